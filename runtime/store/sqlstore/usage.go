package sqlstore

import (
	"context"
	"strconv"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// usageKey is the SQL of a grouping's key; keys compare bytewise.
func (f *Flavor) usageKey(g store.UsageGroup) string {
	owner := func(col string) string {
		return `(SELECT s.` + col + ` FROM sessions s WHERE s.session_id = events.session_id)` + f.Bytewise
	}
	switch g {
	case store.UsageBySession:
		return `session_id`
	case store.UsageByDay:
		return f.Day("ts") + f.Bytewise
	case store.UsageByAgent:
		return owner("agent")
	case store.UsageByJob:
		return owner("job_id")
	case store.UsageByPrincipal:
		return owner("owner")
	}
	field := map[store.UsageGroup]string{store.UsageByProvider: "provider", store.UsageByModel: "model", store.UsageByTurn: "turnId"}[g]
	return `COALESCE(` + f.JSONField("payload", field) + `, '')` + f.Bytewise
}

// The bounds of a usage window left open: every stored time lies within
// them, and both databases keep them.
var (
	usageSince = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	usageUntil = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// SumUsage totals the usage events in q's window by q.GroupBy.
func (s *Store) SumUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	// Bounds always, so that the window is a range of the usage events'
	// index.
	since, until := usageSince, usageUntil
	if !q.Since.IsZero() {
		since = q.Since
	}
	if !q.Until.IsZero() {
		until = q.Until
	}
	where, order := ``, `sum(i) + sum(o) DESC, k`
	args := []any{s.f.Time(since), s.f.Time(until)}
	if q.SessionID != "" {
		where, args = ` AND session_id = $3`, append(args, q.SessionID)
	}
	if q.Owner != "" {
		args = append(args, q.Owner)
		where += ` AND session_id IN (SELECT s.session_id FROM sessions s WHERE s.owner = $` + strconv.Itoa(len(args)) + `)`
	}
	if q.GroupBy == store.UsageByTurn {
		order = `min(seq), k`
	}
	count := func(alias, key string) string {
		return `COALESCE(` + s.f.JSONInt("payload", key) + `, 0) AS ` + alias
	}
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.UsageRow, error) {
		var u store.UsageRow
		err := r.Scan(&u.Key, &u.Calls, &u.InputTokens, &u.OutputTokens, &u.ReasoningTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.CostMicroUSD, &u.UnpricedCalls)
		return u, err
	}, `SELECT k, count(*), CAST(sum(i) AS BIGINT), CAST(sum(o) AS BIGINT), CAST(sum(r) AS BIGINT), CAST(sum(cr) AS BIGINT),
			CAST(sum(cw) AS BIGINT), CAST(sum(c) AS BIGINT), CAST(sum(u) AS BIGINT) FROM (
		SELECT `+s.f.usageKey(q.GroupBy)+` AS k, seq, `+count("i", "inputTokens")+`, `+count("o", "outputTokens")+`,
			`+count("r", "reasoningTokens")+`, `+count("cr", "cacheReadTokens")+`, `+count("cw", "cacheWriteTokens")+`,
			`+count("c", "costMicroUsd")+`, CASE WHEN `+s.f.JSONTrue("payload", "priced")+` THEN 0 ELSE 1 END AS u
		FROM events WHERE kind = 'usage' AND ts >= $1 AND ts < $2`+where+`) AS u
		GROUP BY k ORDER BY `+order, args...)
	if err != nil {
		return nil, s.f.Fail("sum usage by "+string(q.GroupBy), err)
	}
	return out, nil
}
