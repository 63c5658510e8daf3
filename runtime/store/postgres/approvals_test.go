package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestSharedApprovalQueue: two stores on one schema (two daemons). A request
// inserted by one is listed and read by the other and announced to both;
// 8 resolutions at once through both stores: exactly one wins, the others
// get ErrResolved with the winner's resolution; approvers are found only
// while their daemon is registered.
func TestSharedApprovalQueue(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	ctx := context.Background()
	var sts []*postgres.Store
	for range 2 {
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		sts = append(sts, st)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notes := make(chan store.ApprovalNote, 16)
	listening := make(chan struct{})
	go sts[1].ListenApprovals(lctx, func(n store.ApprovalNote) { notes <- n })
	// The listener is up once a notification sent after it arrives.
	go func() {
		for {
			select {
			case <-lctx.Done():
				return
			case <-listening:
				return
			case <-time.After(50 * time.Millisecond):
				sts[0].InsertApproval(ctx, store.ApprovalRow{RequestID: fmt.Sprintf("ap-probe-%d", time.Now().UnixNano()), SessionID: "s-probe", OwnerID: "d-a", Request: json.RawMessage(`{}`)}, "probe")
			}
		}
	}()
	for n := range notes {
		if n.By == "probe" {
			close(listening)
			break
		}
	}

	if err := sts[0].InsertApproval(ctx, store.ApprovalRow{RequestID: "", SessionID: "s", OwnerID: "d", Request: json.RawMessage(`{}`)}, "d-a"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("insert without an id: %v", err)
	}
	row := store.ApprovalRow{RequestID: "ap-1", SessionID: "s-1", Origin: "o-1", OwnerID: "d-a", Request: json.RawMessage(`{"Tool":"shell"}`)}
	if err := sts[0].InsertApproval(ctx, row, "d-a"); err != nil {
		t.Fatal(err)
	}
	waitNote(t, notes, store.ApprovalNote{Kind: "pending", RequestID: "ap-1", By: "d-a"})
	pending, err := sts[1].PendingApprovals(ctx, "s-1")
	if err != nil || len(pending) != 1 || pending[0].Origin != "o-1" || pending[0].OwnerID != "d-a" || pending[0].Resolution != nil {
		t.Fatalf("pending on the other store: %+v %v", pending, err)
	}
	var tool struct{ Tool string }
	if json.Unmarshal(pending[0].Request, &tool); tool.Tool != "shell" {
		t.Fatalf("request %s", pending[0].Request)
	}

	const answers = 8
	var wg sync.WaitGroup
	results := make([]error, answers)
	rows := make([]store.ApprovalRow, answers)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i], results[i] = sts[i%2].ResolveApproval(ctx, "ap-1", json.RawMessage(fmt.Sprintf(`{"By":"answer-%d"}`, i)), "d")
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("answers %d and %d both won", winner, i)
			}
			winner = i
		case !errors.Is(err, store.ErrResolved):
			t.Fatalf("answer %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no answer won")
	}
	want := fmt.Sprintf(`{"By": "answer-%d"}`, winner)
	for i, r := range rows {
		if string(r.Resolution) != want {
			t.Fatalf("answer %d sees resolution %s, want %s", i, r.Resolution, want)
		}
	}
	waitNote(t, notes, store.ApprovalNote{Kind: "resolved", RequestID: "ap-1", By: "d"})
	if pending, _ := sts[0].PendingApprovals(ctx, "s-1"); len(pending) != 0 {
		t.Fatalf("still pending: %+v", pending)
	}
	if _, err := sts[1].ResolveApproval(ctx, "ap-unknown", json.RawMessage(`{}`), "d"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("resolve an unknown request: %v", err)
	}
	if got, err := sts[1].GetApproval(ctx, "ap-1"); err != nil || string(got.Resolution) != want {
		t.Fatalf("get: %+v %v", got, err)
	}

	// Approvers: found while their daemon is registered.
	if err := sts[0].SetApprover(ctx, "o-1", "d-a"); err != nil {
		t.Fatal(err)
	}
	if d, err := sts[1].ApproverOf(ctx, "o-1", time.Minute); err != nil || d != "" {
		t.Fatalf("approver of an unregistered daemon: %q %v", d, err)
	}
	if err := sts[0].RegisterDaemon(ctx, store.Daemon{ID: "d-a", GRPCAddr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if d, err := sts[1].ApproverOf(ctx, "o-1", time.Minute); err != nil || d != "d-a" {
		t.Fatalf("approver: %q %v", d, err)
	}
	if err := sts[1].RemoveApprover(ctx, "o-1", "d-b"); err != nil { // not d-b's: kept
		t.Fatal(err)
	}
	if d, _ := sts[1].ApproverOf(ctx, "o-1", time.Minute); d != "d-a" {
		t.Fatalf("approver after another daemon's remove: %q", d)
	}
	if err := sts[1].RemoveApprover(ctx, "o-1", "d-a"); err != nil {
		t.Fatal(err)
	}
	if d, _ := sts[1].ApproverOf(ctx, "o-1", time.Minute); d != "" {
		t.Fatalf("approver after remove: %q", d)
	}
	// A daemon without a recent heartbeat (it died) has no approvers; a
	// restarted one clears those of its previous run.
	if err := sts[0].SetApprover(ctx, "o-2", "d-a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if d, _ := sts[1].ApproverOf(ctx, "o-2", 10*time.Millisecond); d != "" {
		t.Fatalf("approver of a daemon with no recent heartbeat: %q", d)
	}
	if err := sts[0].ClearApprovers(ctx, "d-a"); err != nil {
		t.Fatal(err)
	}
	if d, _ := sts[1].ApproverOf(ctx, "o-2", time.Minute); d != "" {
		t.Fatalf("approver after clear: %q", d)
	}
}

func waitNote(t *testing.T, notes <-chan store.ApprovalNote, want store.ApprovalNote) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-notes:
			if n == want {
				return
			}
		case <-deadline:
			t.Fatalf("no notification %+v within 10 s", want)
		}
	}
}
