package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-run/trellis/runtime/store"
)

// AppendEvents stores evs in one transaction.
func (s *Store) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if err := store.ValidateEvents(evs); err != nil {
		return err
	}
	// The highest seq of each session, in a fixed order: the fence locks
	// and the notifications.
	last := map[string]int64{}
	for _, e := range evs {
		last[e.SessionID] = max(last[e.SessionID], e.Seq)
	}
	sessions := make([]string, 0, len(last))
	for id := range last {
		sessions = append(sessions, id)
	}
	sort.Strings(sessions)
	fences, err := w.FencesOf(sessions)
	if err != nil {
		return err
	}
	var failed store.Event
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := checkFences(ctx, tx, fences); err != nil {
			return err
		}
		// One round trip for the whole batch; results come back in order,
		// so the first error names the event that caused it.
		b := &pgx.Batch{}
		for _, e := range evs {
			b.Queue(`INSERT INTO events (session_id, seq, kind, payload, ts) VALUES ($1, $2, $3, $4, $5)`,
				e.SessionID, e.Seq, e.Kind, jsonText(e.Payload), e.TS)
		}
		// Delivered on commit only, to every daemon's LISTEN connection.
		b.Queue(`SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n`, eventsChannel, notifications(sessions, last))
		br := tx.SendBatch(ctx, b)
		for _, e := range evs {
			if _, err := br.Exec(); err != nil {
				failed = e
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
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	if isForeignKeyViolation(err) {
		return fmt.Errorf("session %s: %w", failed.SessionID, store.ErrNotFound)
	}
	return insertErr(err, fmt.Sprintf("event %s/%d", failed.SessionID, failed.Seq), fmt.Sprintf("append %d events", len(evs)))
}

// eventsQuery selects a session's events after a seq, ascending, at most
// limit of them when limit > 0 (eventsArgs gives its arguments).
func eventsQuery(limit int) string {
	q := `SELECT seq, kind, payload, ts FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq`
	if limit > 0 {
		q += ` LIMIT $3`
	}
	return q
}

func eventsArgs(sessionID string, afterSeq int64, limit int) []any {
	if limit > 0 {
		return []any{sessionID, afterSeq, limit}
	}
	return []any{sessionID, afterSeq}
}

// ReadEvents returns the session's events after afterSeq, ascending.
func (s *Store) ReadEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error) {
	out, err := queryAll(ctx, s.pool, func(row pgx.Row) (store.Event, error) {
		e := store.Event{SessionID: sessionID}
		var payload []byte
		if err := row.Scan(&e.Seq, &e.Kind, &payload, &e.TS); err != nil {
			return e, err
		}
		e.Payload = payload
		e.TS = e.TS.UTC()
		return e, nil
	}, eventsQuery(limit), eventsArgs(sessionID, afterSeq, limit)...)
	if err != nil {
		return nil, fail("read events of "+sessionID, err)
	}
	return out, nil
}

// ScanEvents reads the session's events after afterSeq, ascending, and
// hands each row to fn with kind and payload pointing into the
// connection's read buffer (store.EventStore).
func (s *Store) ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*store.EventRow) error) error {
	rows, err := s.pool.Query(ctx, eventsQuery(limit), eventsArgs(sessionID, afterSeq, limit)...)
	if err != nil {
		return fail("read events of "+sessionID, err)
	}
	defer rows.Close()
	var (
		row           store.EventRow
		kind, payload pgtype.DriverBytes
	)
	for rows.Next() {
		if err := rows.Scan(&row.Seq, &kind, &payload, &row.TS); err != nil {
			return fail("read events of "+sessionID, err)
		}
		row.Kind, row.Payload, row.TS = kind, payload, row.TS.UTC()
		if err := fn(&row); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fail("read events of "+sessionID, err)
	}
	return nil
}

// LastSeq returns the session's highest stored seq, 0 if none.
func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`, sessionID).Scan(&seq)
	if err != nil {
		return 0, fail("last seq of "+sessionID, err)
	}
	return seq, nil
}

// notifications are the payloads "<sessionId> <lastSeq>" of one commit.
func notifications(sessions []string, last map[string]int64) []string {
	out := make([]string, len(sessions))
	for i, id := range sessions {
		out[i] = id + " " + strconv.FormatInt(last[id], 10)
	}
	return out
}
