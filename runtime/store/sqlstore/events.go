package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/trellis-run/trellis/runtime/store"
)

// ScanEvents is each backend's own (its fastest read), and so is
// PostgreSQL's AppendEvents (one round trip with its notifications); what
// they share is here.

// EventBatch is one AppendEvents call as a backend writes it.
type EventBatch struct {
	Events []store.Event
	// Sessions are the events' sessions, sorted: the order of the fence
	// checks; Last holds the highest seq of each.
	Sessions []string
	Last     map[string]int64
	// Failed is the event whose insert failed, set by the backend.
	Failed store.Event
}

// AppendEvents checks evs and has write store them, in one transaction
// that checks the batch's fences first (CheckFences with b.Sessions), and
// maps write's error: a missing session is store.ErrNotFound, a stored seq
// store.ErrConflict, a lost lease as it is.
func (f *Flavor) AppendEvents(evs []store.Event, write func(b *EventBatch) error) error {
	if len(evs) == 0 {
		return nil
	}
	if err := store.ValidateEvents(evs); err != nil {
		return err
	}
	b := &EventBatch{Events: evs, Last: map[string]int64{}}
	for _, e := range evs {
		b.Last[e.SessionID] = max(b.Last[e.SessionID], e.Seq)
	}
	for id := range b.Last {
		b.Sessions = append(b.Sessions, id)
	}
	sort.Strings(b.Sessions)
	err := write(b)
	switch {
	case err == nil || errors.Is(err, store.ErrLeaseLost):
		return err
	case f.isForeignKey(err):
		return fmt.Errorf("session %s: %w", b.Failed.SessionID, store.ErrNotFound)
	}
	return f.InsertErr(err, fmt.Sprintf("event %s/%d", b.Failed.SessionID, b.Failed.Seq), fmt.Sprintf("append %d events", len(evs)))
}

// AppendEvents stores evs in one transaction, with its prepared insert.
func (s *Store) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	return s.f.AppendEvents(evs, func(b *EventBatch) error {
		return s.fencedTx(ctx, w, b.Sessions, func(ctx context.Context, tx Tx) error {
			stmt, err := tx.Prepared(ctx, `INSERT INTO events (session_id, seq, kind, payload, ts) VALUES ($1, $2, $3, $4, $5)`)
			if err != nil {
				return err
			}
			for _, e := range evs {
				if _, err := stmt.ExecContext(ctx, e.SessionID, e.Seq, e.Kind, JSONText(e.Payload), s.f.Time(e.TS)); err != nil {
					b.Failed = e
					return err
				}
			}
			return nil
		})
	})
}

// ReadEvents returns the session's events after afterSeq, ascending.
func (s *Store) ReadEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error) {
	q, args := `SELECT seq, kind, payload, ts FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq`, []any{sessionID, afterSeq}
	if limit > 0 {
		q, args = q+` LIMIT $3`, append(args, limit)
	}
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.Event, error) {
		e := store.Event{SessionID: sessionID}
		var payload []byte
		err := r.Scan(&e.Seq, &e.Kind, &payload, scanTime(&e.TS))
		e.Payload = payload
		return e, err
	}, q, args...)
	if err != nil {
		return nil, s.f.Fail("read events of "+sessionID, err)
	}
	return out, nil
}

// LastSeq returns the session's highest stored seq, 0 if none.
func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	var seq int64
	st, err := s.prepared(ctx, s.r, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`)
	if err == nil {
		err = st.QueryRowContext(s.run(ctx), sessionID).Scan(&seq)
	}
	if err != nil {
		return 0, s.f.Fail("last seq of "+sessionID, err)
	}
	return seq, nil
}
