package eventlog_test

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/trellis-run/trellis/runtime/store"
)

// memEvents is an in-memory store.EventStore with the store contract
// (atomic batches, ErrConflict, ErrNotFound). The race-heavy tests use it
// because the SQLite driver is slow under the race detector; the same tests
// also run, smaller, against SQLite.
type memEvents struct {
	mu       sync.RWMutex
	sessions map[string][]store.Event // by seq
}

func newMemEvents(sessions ...string) *memEvents {
	m := &memEvents{sessions: map[string][]store.Event{}}
	for _, id := range sessions {
		m.sessions[id] = nil
	}
	return m
}

func (m *memEvents) AppendEvents(_ context.Context, _ store.Writer, evs []store.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]map[int64]bool{}
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			return err
		}
		stored, ok := m.sessions[e.SessionID]
		if !ok {
			return fmt.Errorf("session %s: %w", e.SessionID, store.ErrNotFound)
		}
		i := sort.Search(len(stored), func(i int) bool { return stored[i].Seq >= e.Seq })
		if seen[e.SessionID] == nil {
			seen[e.SessionID] = map[int64]bool{}
		}
		if (i < len(stored) && stored[i].Seq == e.Seq) || seen[e.SessionID][e.Seq] {
			return fmt.Errorf("event %s/%d: %w", e.SessionID, e.Seq, store.ErrConflict)
		}
		seen[e.SessionID][e.Seq] = true
	}
	for _, e := range evs {
		stored := m.sessions[e.SessionID]
		i := sort.Search(len(stored), func(i int) bool { return stored[i].Seq >= e.Seq })
		stored = append(stored, store.Event{})
		copy(stored[i+1:], stored[i:])
		stored[i] = e
		m.sessions[e.SessionID] = stored
	}
	return nil
}

func (m *memEvents) ReadEvents(_ context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	stored := m.sessions[sessionID]
	i := sort.Search(len(stored), func(i int) bool { return stored[i].Seq > afterSeq })
	rest := stored[i:]
	if limit > 0 && len(rest) > limit {
		rest = rest[:limit]
	}
	return append([]store.Event(nil), rest...), nil
}

func (m *memEvents) ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*store.EventRow) error) error {
	evs, err := m.ReadEvents(ctx, sessionID, afterSeq, limit)
	if err != nil {
		return err
	}
	return scanEvents(evs, fn)
}

// scanEvents hands evs to fn as a store's ScanEvents does.
func scanEvents(evs []store.Event, fn func(*store.EventRow) error) error {
	for _, e := range evs {
		if err := fn(&store.EventRow{Seq: e.Seq, Kind: []byte(e.Kind), Payload: e.Payload, TS: e.TS}); err != nil {
			return err
		}
	}
	return nil
}

func (m *memEvents) LastSeq(_ context.Context, sessionID string) (int64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	stored := m.sessions[sessionID]
	if len(stored) == 0 {
		return 0, nil
	}
	return stored[len(stored)-1].Seq, nil
}
