package sqlite

import (
	"context"
	"fmt"
	"math"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// usageKeys is the SQL of each grouping's key (postgres/usage.go has the
// same query for PostgreSQL); ts is in microseconds.
var usageKeys = map[store.UsageGroup]string{
	store.UsageByProvider:  `ifnull(payload ->> '$.provider', '')`,
	store.UsageByModel:     `ifnull(payload ->> '$.model', '')`,
	store.UsageBySession:   `session_id`,
	store.UsageByDay:       `strftime('%Y-%m-%d', ts / 1000000, 'unixepoch')`,
	store.UsageByTurn:      `ifnull(payload ->> '$.turnId', '')`,
	store.UsageByAgent:     `(SELECT s.agent FROM sessions s WHERE s.session_id = events.session_id)`,
	store.UsageByJob:       `(SELECT s.job_id FROM sessions s WHERE s.session_id = events.session_id)`,
	store.UsageByPrincipal: `(SELECT s.owner FROM sessions s WHERE s.session_id = events.session_id)`,
}

// SumUsage totals the usage events in q's window by q.GroupBy.
func (s *Store) SumUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	// Bounds always, so that the window is a range of the usage events'
	// index (migration 0014).
	since, until := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.Since.IsZero() {
		since = micros(q.Since)
	}
	if !q.Until.IsZero() {
		until = micros(q.Until)
	}
	where, order := ``, `sum(i) + sum(o) DESC, k`
	args := []any{since, until}
	if q.SessionID != "" {
		where, args = ` AND session_id = ?3`, append(args, q.SessionID)
	}
	if q.Owner != "" {
		args = append(args, q.Owner)
		where += fmt.Sprintf(` AND session_id IN (SELECT s.session_id FROM sessions s WHERE s.owner = ?%d)`, len(args))
	}
	if q.GroupBy == store.UsageByTurn {
		order = `min(seq), k`
	}
	out, err := sqlstore.QueryAll(ctx, s.r, func(r sqlstore.Scanner) (store.UsageRow, error) {
		var u store.UsageRow
		err := r.Scan(&u.Key, &u.Calls, &u.InputTokens, &u.OutputTokens, &u.ReasoningTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.CostMicroUSD, &u.UnpricedCalls)
		return u, err
	}, `SELECT k, count(*), sum(i), sum(o), sum(r), sum(cr), sum(cw), sum(c), sum(u) FROM (
		SELECT `+usageKeys[q.GroupBy]+` AS k, seq, ifnull(payload ->> '$.inputTokens', 0) AS i,
			ifnull(payload ->> '$.outputTokens', 0) AS o, ifnull(payload ->> '$.reasoningTokens', 0) AS r,
			ifnull(payload ->> '$.cacheReadTokens', 0) AS cr, ifnull(payload ->> '$.cacheWriteTokens', 0) AS cw,
			ifnull(payload ->> '$.costMicroUsd', 0) AS c, iif(payload ->> '$.priced' IS 1, 0, 1) AS u
		FROM events WHERE kind = 'usage' AND ts >= ?1 AND ts < ?2`+where+`)
		GROUP BY k ORDER BY `+order, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: sum usage by %s: %w", q.GroupBy, err)
	}
	return out, nil
}
