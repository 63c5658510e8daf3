package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store"
)

// memQueue is an in-memory store.ApprovalQueue for one daemon whose
// ResolveApproval fails with failResolve when set (the database link is
// down).
type memQueue struct {
	mu          sync.Mutex
	rows        map[string]*store.ApprovalRow
	failResolve error
}

func (q *memQueue) InsertApproval(_ context.Context, row store.ApprovalRow, _ string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rows == nil {
		q.rows = map[string]*store.ApprovalRow{}
	}
	q.rows[row.RequestID] = &row
	return nil
}

func (q *memQueue) ResolveApproval(_ context.Context, id string, res json.RawMessage, _ string) (store.ApprovalRow, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failResolve != nil {
		return store.ApprovalRow{}, q.failResolve
	}
	row, ok := q.rows[id]
	switch {
	case !ok:
		return store.ApprovalRow{}, store.ErrNotFound
	case row.Resolution != nil:
		return *row, store.ErrResolved
	}
	row.Resolution = res
	return *row, nil
}

func (q *memQueue) GetApproval(_ context.Context, id string) (store.ApprovalRow, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if row, ok := q.rows[id]; ok {
		return *row, nil
	}
	return store.ApprovalRow{}, store.ErrNotFound
}

func (q *memQueue) PendingApprovals(_ context.Context, sessionID string) ([]store.ApprovalRow, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []store.ApprovalRow
	for _, row := range q.rows {
		if row.Resolution == nil && (sessionID == "" || row.SessionID == sessionID) {
			out = append(out, *row)
		}
	}
	return out, nil
}

func (q *memQueue) SetApprover(context.Context, string, string) error    { return nil }
func (q *memQueue) RemoveApprover(context.Context, string, string) error { return nil }
func (q *memQueue) ApproverOf(context.Context, string, time.Duration) (string, error) {
	return "", nil
}
func (q *memQueue) ClearApprovers(context.Context, string) error { return nil }
func (q *memQueue) ListenApprovals(ctx context.Context, _ func(store.ApprovalNote)) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestUnrecordedAllowIsADeny: an allow the store cannot record does not
// take effect — the call is denied, the approver and the queue watchers are
// told it was denied, and no allowlist entry is added — on a daemon alone
// (the audit row cannot be written) and on a shared store (the resolution
// cannot be written to the shared queue, as when the daemon's database link
// is down and another daemon may have taken the session over).
func TestUnrecordedAllowIsADeny(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		queue *memQueue
	}{
		{name: "alone"},
		{name: "cluster", queue: &memQueue{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := BrokerOptions{}
			if tc.queue != nil {
				opts.Cluster, opts.DaemonID = tc.queue, "d-1"
			}
			f := newFixture(t, opts)
			f.origins.set("s-1", "c-1")
			ap, err := f.b.Attach("c-1")
			if err != nil {
				t.Fatal(err)
			}
			w := f.b.Watch(t.Context())
			errc := ask(context.Background(), f.b, question("s-1"))
			req := recv(t, ap.Events()).Request
			if tc.queue != nil {
				tc.queue.mu.Lock()
				tc.queue.failResolve = down
				tc.queue.mu.Unlock()
			} else {
				f.st.mu.Lock()
				f.st.failAudit = down
				f.st.mu.Unlock()
			}
			if err := ap.Answer(context.Background(), req.RequestID, Reply{Decision: DecisionAllow, Scope: ScopeSession}); err != nil {
				t.Fatal(err)
			}
			err = recv(t, errc)
			wantCode(t, err, errcode.ApprovalDenied, ErrDenied)
			for _, r := range []*Resolution{recv(t, ap.Events()).Resolved, recv(t, w).Resolved} {
				if r == nil || r.RequestID != req.RequestID || r.Decision != DecisionDeny || r.Scope != ScopeOnce {
					t.Fatalf("resolution = %+v, want a deny of %s taking effect once", r, req.RequestID)
				}
			}
			if n := len(f.st.patterns); n != 0 {
				t.Errorf("%d allowlist entries after an allow the store did not record", n)
			}
			// Once the store records again, an allow is an allow.
			if tc.queue != nil {
				tc.queue.mu.Lock()
				tc.queue.failResolve = nil
				tc.queue.mu.Unlock()
			} else {
				f.st.mu.Lock()
				f.st.failAudit = nil
				f.st.mu.Unlock()
			}
			errc = ask(context.Background(), f.b, question("s-1"))
			req = recv(t, ap.Events()).Request
			if err := ap.Answer(context.Background(), req.RequestID, Reply{Decision: DecisionAllow}); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, errc); err != nil {
				t.Fatalf("Ask after the store recovered = %v, want nil", err)
			}
			rows := f.auditRows(t)
			if last := rows[len(rows)-1]; last.RequestID != req.RequestID || last.Decision != DecisionAllow {
				t.Errorf("last audit row %s", fmt.Sprint(last))
			}
		})
	}
}
