package approval

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/trellis-run/trellis/runtime/store"
)

// memStore is an in-memory Store: allowlist patterns and the audit log,
// with the filter semantics of store.AllowlistStore.
type memStore struct {
	mu        sync.Mutex
	patterns  []store.Pattern
	audit     []store.AuditEntry
	failList  error // when set, ListPatterns fails with it
	failAudit error // when set, AppendAudit fails with it
	// holdAudit, when set, holds every AppendAudit until it is closed: a
	// store that does not answer.
	holdAudit chan struct{}
}

func (m *memStore) AddPattern(_ context.Context, p store.Pattern) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range m.patterns {
		if q.PatternID == p.PatternID {
			return "", fmt.Errorf("pattern %s: %w", p.PatternID, store.ErrConflict)
		}
	}
	for _, q := range m.patterns {
		if q.Pattern == p.Pattern && q.Scope == p.Scope && q.Workdir == p.Workdir && q.SessionID == p.SessionID {
			return q.PatternID, nil
		}
	}
	m.patterns = append(m.patterns, p)
	return p.PatternID, nil
}

func (m *memStore) ListPatterns(_ context.Context, f store.PatternFilter) ([]store.Pattern, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failList != nil {
		return nil, m.failList
	}
	var out []store.Pattern
	for _, p := range m.patterns {
		if (f.Scope == "" || p.Scope == f.Scope) && (f.Workdir == "" || p.Workdir == f.Workdir) &&
			(f.SessionID == "" || p.SessionID == f.SessionID) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (m *memStore) RemovePattern(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.patterns, func(p store.Pattern) bool { return p.PatternID == id })
	if i < 0 {
		return fmt.Errorf("pattern %s: %w", id, store.ErrNotFound)
	}
	m.patterns = slices.Delete(m.patterns, i, i+1)
	return nil
}

func (m *memStore) AppendAudit(_ context.Context, e store.AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	if m.holdAudit != nil {
		<-m.holdAudit
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failAudit != nil {
		return 0, m.failAudit
	}
	e.ID = int64(len(m.audit) + 1)
	m.audit = append(m.audit, e)
	return e.ID, nil
}

func (m *memStore) ListAudit(_ context.Context, sessionID string) ([]store.AuditEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.AuditEntry
	for _, e := range m.audit {
		if sessionID == "" || e.SessionID == sessionID {
			out = append(out, e)
		}
	}
	return out, nil
}
