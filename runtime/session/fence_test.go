package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

// hookStore runs beforeReplace before each ReplaceHistory (a takeover that
// happens while a compaction waits on the model).
type hookStore struct {
	store.Store
	beforeReplace func(sessionID string)
}

func (h *hookStore) ReplaceHistory(ctx context.Context, w store.Writer, id string, msgs []json.RawMessage) error {
	if h.beforeReplace != nil {
		h.beforeReplace(id)
	}
	return h.Store.ReplaceHistory(ctx, w, id, msgs)
}

// clusterDaemon is one daemon's session service on a shared PostgreSQL
// store, wired as daemon/cluster.go wires it. Its node is not started: it
// never renews, so it goes on believing it holds a lease another daemon
// took over (a daemon stalled between two renewals).
type clusterDaemon struct {
	*harness
	node *cluster.Node
	hook *hookStore
	dsn  string
}

func newClusterDaemon(t *testing.T, dsn, id string, lease time.Duration) *clusterDaemon {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterDaemon(ctx, store.Daemon{ID: id, GRPCAddr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	sc, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	d := &clusterDaemon{hook: &hookStore{Store: st}, dsn: dsn}
	d.node = cluster.New(cluster.Options{
		Store: st, DaemonID: id, GRPCAddr: "127.0.0.1:1", Lease: lease,
		OnAcquire: func(ctx context.Context, sid string) error {
			d.log.Reload(sid)
			return d.svc.Recover(ctx, sid)
		},
	})
	d.harness = &harness{st: st, log: eventlog.New(st, eventlog.WithFence(d.node.Fence)), home: home}
	d.svc, err = session.NewService(ctx, session.Deps{
		Store: d.hook, Events: d.log, Providers: providers{fake.New(sc)},
		Toolbox: toolbox.New(reg, filepath.Join(home, "out"), nil, nil),
		Leases:  d.node,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

// takeOver ends the session's lease at the database, as if its owner had
// not renewed it for a lease while it still believes it holds it (its own
// clock says the lease has most of a minute left: a stalled daemon whose
// clock did not see the stall), and has b take session id over.
func takeOver(t *testing.T, b *clusterDaemon, id string) {
	t.Helper()
	if err := pgtest.ExpireLease(context.Background(), b.dsn, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := b.node.Acquire(context.Background(), id)
		if err == nil {
			return
		}
		var other *cluster.NotOwnerError
		if !errors.As(err, &other) || time.Now().After(deadline) {
			t.Fatalf("take session %s over: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantRefused checks that err is the error of a write fenced out by a
// takeover: code overloaded, wrapping store.ErrLeaseLost.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if errs.CodeOf(err) != errcode.Overloaded || !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("%s by a daemon that lost the lease: %v (code %s), want code overloaded wrapping ErrLeaseLost", what, err, errs.CodeOf(err))
	}
}

// TestStaleOwnerWritesRefused: after daemon B took a session over, the old
// owner A, which has not noticed yet, cannot change the session's mode,
// replace its history (a compaction that finishes after the takeover) or
// delete it; the store keeps B's state.
func TestStaleOwnerWritesRefused(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	ctx := context.Background()
	a := newClusterDaemon(t, dsn, "d-a", time.Minute)
	b := newClusterDaemon(t, dsn, "d-b", time.Minute)

	// Mode: A sets plan, B takes over and sets auto, A's stale write of
	// accept is refused.
	s1, err := a.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.SetMode(ctx, s1, "plan"); err != nil {
		t.Fatal(err)
	}
	takeOver(t, b, s1)
	if _, err := b.svc.SetMode(ctx, s1, "auto"); err != nil {
		t.Fatal(err)
	}
	if !a.node.Holds(s1) {
		t.Fatal("A noticed the takeover: the test needs a stale owner")
	}
	_, err = a.svc.SetMode(ctx, s1, "accept")
	wantRefused(t, "setMode", err)
	row, err := b.st.GetSession(ctx, s1)
	if err != nil || row.Mode != "auto" {
		t.Fatalf("mode after the stale write: %q (%v), want auto (B's)", row.Mode, err)
	}
	evs, _ := b.st.ReadEvents(ctx, s1, 0, 100)
	var modes []string
	for _, e := range evs {
		if e.Kind == "mode.changed" {
			modes = append(modes, payload(t, e)["mode"].(string))
		}
	}
	if len(modes) != 2 || modes[0] != "plan" || modes[1] != "auto" {
		t.Fatalf("mode.changed events after the stale write: %v, want [plan auto] (A's, then B's)", modes)
	}
	// A dropped the session at once: its next call finds B the owner.
	if a.node.Holds(s1) {
		t.Fatal("A still holds the session after a refused write")
	}
	var other *cluster.NotOwnerError
	if _, err := a.svc.SetMode(ctx, s1, "accept"); !errors.As(err, &other) || other.Owner != "d-b" {
		t.Fatalf("setMode on A after the refusal: %v, want the session served by d-b", err)
	}

	// History: a compaction on A whose model call ends after B took the
	// session over does not replace the history.
	s2, err := a.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"hello", "list", "summarise please"} {
		if _, err := a.svc.Prompt(ctx, s2, p, nil, ""); err != nil {
			t.Fatal(err)
		}
		a.waitKind(t, s2, 0, "turn.done", i+1)
	}
	before, err := b.st.LoadHistory(ctx, s2)
	if err != nil || len(before) < 4 {
		t.Fatalf("history before the compaction: %d messages (%v)", len(before), err)
	}
	a.hook.beforeReplace = func(id string) { takeOver(t, b, id) }
	_, err = a.svc.Compact(ctx, s2, "")
	wantRefused(t, "compact", err)
	after, err := b.st.LoadHistory(ctx, s2)
	if err != nil || len(after) != len(before) {
		t.Fatalf("history after the refused compaction: %d messages (%v), want the %d of before", len(after), err, len(before))
	}
	for i := range before {
		if string(after[i]) != string(before[i]) {
			t.Fatalf("history message %d changed: %s -> %s", i, before[i], after[i])
		}
	}
	// B, the owner, compacts it.
	if _, err := b.svc.Compact(ctx, s2, ""); err != nil {
		t.Fatalf("compact by the owner: %v", err)
	}
	if h, _ := b.st.LoadHistory(ctx, s2); len(h) >= len(before) {
		t.Fatalf("the owner's compaction kept %d of %d messages", len(h), len(before))
	}

	// Delete: A deletes none of the sessions B owns; B deletes them.
	if n, err := a.svc.DeleteSaved(ctx, session.DeleteSelector{All: true}); err != nil || n != 0 {
		t.Fatalf("A deleted %d sessions owned by B (%v), want 0", n, err)
	}
	for _, id := range []string{s1, s2} {
		if _, err := b.st.GetSession(ctx, id); err != nil {
			t.Fatalf("session %s after A's delete: %v", id, err)
		}
	}
	if err := b.svc.Close(ctx, s1); err != nil {
		t.Fatal(err)
	}
	if n, err := b.svc.DeleteSaved(ctx, session.DeleteSelector{SessionID: s1}); err != nil || n != 1 {
		t.Fatalf("the owner deleted %d closed sessions (%v), want 1", n, err)
	}
}

// TestLiveSessionWithoutItsLease: a call on a session that is still live
// on a daemon which no longer holds its lease (Lost forgets the session a
// moment after a renewal or a refused write finds the lease gone) asks the
// lease and names the new owner, instead of writing unfenced and being
// refused (code overloaded) until Lost has run.
func TestLiveSessionWithoutItsLease(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	ctx := context.Background()
	a := newClusterDaemon(t, dsn, "d-a", time.Minute)
	b := newClusterDaemon(t, dsn, "d-b", time.Minute)
	id, err := a.svc.Create(ctx, session.CreateParams{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.SetMode(ctx, id, "plan"); err != nil {
		t.Fatal(err)
	}
	takeOver(t, b, id)
	// A learns of the loss, as a renewal does, before it forgets the
	// session.
	a.node.Release(ctx, id)
	var other *cluster.NotOwnerError
	if _, err := a.svc.SetMode(ctx, id, "accept"); !errors.As(err, &other) || other.Owner != "d-b" {
		t.Fatalf("setMode on A after it lost the lease: %v (code %s), want the session served by d-b", err, errs.CodeOf(err))
	}
	if row, err := b.st.GetSession(ctx, id); err != nil || row.Mode != "plan" {
		t.Fatalf("mode: %q (%v), want plan (nothing written by A)", row.Mode, err)
	}
}
