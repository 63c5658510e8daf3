package postgres

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// AppendEvents stores evs in one transaction: one round trip for the
// whole batch and its notifications.
func (s *Store) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	return flavor.AppendEvents(evs, func(b *sqlstore.EventBatch) error {
		fences, err := w.FencesOf(b.Sessions)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := sqlstore.CheckFences(fences, leases(ctx, tx)); err != nil {
				return err
			}
			// Results come back in order, so the first error names the
			// event that caused it.
			batch := &pgx.Batch{}
			for _, e := range evs {
				batch.Queue(`INSERT INTO events (session_id, seq, kind, payload, ts) VALUES ($1, $2, $3, $4, $5)`,
					e.SessionID, e.Seq, e.Kind, sqlstore.JSONText(e.Payload), e.TS)
			}
			// Delivered on commit only, to every daemon's LISTEN connection.
			batch.Queue(`SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n`, eventsChannel, notifications(b.Sessions, b.Last))
			br := tx.SendBatch(ctx, batch)
			for _, e := range evs {
				if _, err := br.Exec(); err != nil {
					b.Failed = e
					br.Close()
					return err
				}
			}
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
			return br.Close()
		})
	})
}

// leases reads lease rows inside tx for sqlstore.CheckFences, as sqlstore
// does on database/sql: FOR SHARE makes a concurrent takeover wait for tx,
// or tx see the new epoch.
func leases(ctx context.Context, tx pgx.Tx) sqlstore.LeaseReader {
	return func(id string) (string, int64, bool, error) {
		var owner string
		var epoch int64
		err := tx.QueryRow(ctx, `SELECT owner_id, epoch FROM session_leases WHERE session_id = $1 FOR SHARE`, id).Scan(&owner, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", 0, false, nil
		}
		return owner, epoch, err == nil, err
	}
}

// ScanEvents reads the session's events after afterSeq, ascending, and
// hands each row to fn with kind and payload pointing into the
// connection's read buffer (store.EventStore).
func (s *Store) ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*store.EventRow) error) error {
	q, args := `SELECT seq, kind, payload, ts FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq`, []any{sessionID, afterSeq}
	if limit > 0 {
		q, args = q+` LIMIT $3`, append(args, limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return flavor.Fail("read events of "+sessionID, err)
	}
	defer rows.Close()
	var (
		row           store.EventRow
		kind, payload pgtype.DriverBytes
	)
	for rows.Next() {
		if err := rows.Scan(&row.Seq, &kind, &payload, &row.TS); err != nil {
			return flavor.Fail("read events of "+sessionID, err)
		}
		row.Kind, row.Payload, row.TS = kind, payload, row.TS.UTC()
		if err := fn(&row); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return flavor.Fail("read events of "+sessionID, err)
	}
	return nil
}

// notifications are the payloads "<sessionId> <lastSeq>" of one commit.
func notifications(sessions []string, last map[string]int64) []string {
	out := make([]string, len(sessions))
	for i, id := range sessions {
		out[i] = id + " " + strconv.FormatInt(last[id], 10)
	}
	return out
}
