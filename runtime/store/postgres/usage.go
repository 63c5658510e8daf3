package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// usageKeys is the SQL of each grouping's key (sqlite/usage.go has the
// same query for SQLite); keys compare bytewise, as SQLite's do.
var usageKeys = map[store.UsageGroup]string{
	store.UsageByProvider:  `coalesce(payload ->> 'provider', '') COLLATE "C"`,
	store.UsageByModel:     `coalesce(payload ->> 'model', '') COLLATE "C"`,
	store.UsageBySession:   `session_id`,
	store.UsageByDay:       `to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD') COLLATE "C"`,
	store.UsageByTurn:      `coalesce(payload ->> 'turnId', '') COLLATE "C"`,
	store.UsageByAgent:     `(SELECT s.agent FROM sessions s WHERE s.session_id = events.session_id) COLLATE "C"`,
	store.UsageByJob:       `(SELECT s.job_id FROM sessions s WHERE s.session_id = events.session_id) COLLATE "C"`,
	store.UsageByPrincipal: `(SELECT s.owner FROM sessions s WHERE s.session_id = events.session_id) COLLATE "C"`,
}

// SumUsage totals the usage events in q's window by q.GroupBy.
func (s *Store) SumUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var since, until *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	if !q.Until.IsZero() {
		until = &q.Until
	}
	where, order := ``, `sum(i) + sum(o) DESC, k`
	args := []any{since, until}
	if q.SessionID != "" {
		where, args = ` AND session_id = $3`, append(args, q.SessionID)
	}
	if q.Owner != "" {
		args = append(args, q.Owner)
		where += fmt.Sprintf(` AND session_id IN (SELECT s.session_id FROM sessions s WHERE s.owner = $%d)`, len(args))
	}
	if q.GroupBy == store.UsageByTurn {
		order = `min(seq), k`
	}
	out, err := queryAll(ctx, s.pool, func(r pgx.Row) (store.UsageRow, error) {
		var u store.UsageRow
		err := r.Scan(&u.Key, &u.Calls, &u.InputTokens, &u.OutputTokens, &u.ReasoningTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.CostMicroUSD, &u.UnpricedCalls)
		return u, err
	}, `SELECT k, count(*), sum(i)::bigint, sum(o)::bigint, sum(r)::bigint, sum(cr)::bigint, sum(cw)::bigint, sum(c)::bigint, sum(u)::bigint FROM (
		SELECT `+usageKeys[q.GroupBy]+` AS k, seq, coalesce((payload ->> 'inputTokens')::bigint, 0) AS i,
			coalesce((payload ->> 'outputTokens')::bigint, 0) AS o, coalesce((payload ->> 'reasoningTokens')::bigint, 0) AS r,
			coalesce((payload ->> 'cacheReadTokens')::bigint, 0) AS cr, coalesce((payload ->> 'cacheWriteTokens')::bigint, 0) AS cw,
			coalesce((payload ->> 'costMicroUsd')::bigint, 0) AS c, CASE WHEN payload ->> 'priced' = 'true' THEN 0 ELSE 1 END AS u
		FROM events WHERE kind = 'usage' AND ($1::timestamptz IS NULL OR ts >= $1) AND ($2::timestamptz IS NULL OR ts < $2)`+where+`) AS u
		GROUP BY k ORDER BY `+order, args...)
	if err != nil {
		return nil, flavor.Fail("sum usage by "+string(q.GroupBy), err)
	}
	return out, nil
}
