package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/trellis-run/trellis/runtime/store"
)

// The event log's append and ScanEvents are each backend's own (its
// fastest path); what they share is here.

// AppendBatch checks evs before a backend's AppendEvents writes them and
// returns their sessions, sorted (the order of the fence checks), with the
// highest seq of each.
func AppendBatch(evs []store.Event) (sessions []string, last map[string]int64, err error) {
	if err := store.ValidateEvents(evs); err != nil {
		return nil, nil, err
	}
	last = map[string]int64{}
	for _, e := range evs {
		last[e.SessionID] = max(last[e.SessionID], e.Seq)
	}
	sessions = make([]string, 0, len(last))
	for id := range last {
		sessions = append(sessions, id)
	}
	sort.Strings(sessions)
	return sessions, last, nil
}

// AppendErr maps the error of an AppendEvents of n events that failed at
// event failed: a missing session is store.ErrNotFound, a stored seq
// store.ErrConflict, a lost lease as it is.
func (f *Flavor) AppendErr(err error, failed store.Event, n int) error {
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	if f.isForeignKey(err) {
		return fmt.Errorf("session %s: %w", failed.SessionID, store.ErrNotFound)
	}
	return f.InsertErr(err, fmt.Sprintf("event %s/%d", failed.SessionID, failed.Seq), fmt.Sprintf("append %d events", n))
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
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`, sessionID).Scan(&seq)
	if err != nil {
		return 0, s.f.Fail("last seq of "+sessionID, err)
	}
	return seq, nil
}
