package approval

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// TestApproverGroup: the approvers of one group share one channel; each
// event names its approver; an approver's end (detach, replacement, falling
// behind, the broker closing) comes as Ended after its events, and the
// other approvers of the group go on.
func TestApproverGroup(t *testing.T) {
	f := newFixture(t, BrokerOptions{Backlog: 2})
	f.origins.set("s-1", "c-1")
	f.origins.set("s-2", "c-2")
	g := f.b.NewGroup()
	defer g.Close()
	a1, err := g.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := g.Attach("c-2")
	if err != nil {
		t.Fatal(err)
	}
	if a1.Events() != nil {
		t.Error("an approver of a group has a channel of its own")
	}
	if n := f.b.Approvers(); n != 2 {
		t.Fatalf("Approvers = %d, want 2", n)
	}

	// Each request comes tagged with its approver; answers resolve it.
	err1 := ask(context.Background(), f.b, question("s-1"))
	ev := recv(t, g.Events())
	if ev.Approver != a1 || ev.Event.Request == nil || ev.Event.Request.SessionID != "s-1" {
		t.Fatalf("event %+v, want s-1's request for c-1", ev)
	}
	err2 := ask(context.Background(), f.b, question("s-2"))
	ev2 := recv(t, g.Events())
	if ev2.Approver != a2 || ev2.Event.Request.SessionID != "s-2" {
		t.Fatalf("event %+v, want s-2's request for c-2", ev2)
	}
	if err := a2.Answer(context.Background(), ev2.Event.Request.RequestID, Reply{Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, err2); err != nil {
		t.Fatalf("Ask of s-2 = %v", err)
	}
	if ev := recv(t, g.Events()); ev.Approver != a2 || ev.Event.Resolved == nil || ev.Event.Resolved.Decision != DecisionAllow {
		t.Fatalf("event %+v, want c-2's resolution", ev)
	}

	// Detaching c-1 denies its pending request and ends it; c-2 goes on.
	a1.Detach()
	if err := recv(t, err1); errs.CodeOf(err) != errcode.ApprovalDenied || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("Ask of s-1 after its detach = %v", err)
	}
	if ev := recv(t, g.Events()); ev.Approver != a1 || !ev.Ended {
		t.Fatalf("event %+v, want c-1 ended", ev)
	}
	a1.Detach() // idempotent: no second Ended

	// Another Attach for c-2 (outside the group) replaces it: Ended, and
	// its pending request moves there.
	err2 = ask(context.Background(), f.b, question("s-2"))
	if ev := recv(t, g.Events()); ev.Approver != a2 || ev.Event.Request == nil {
		t.Fatalf("event %+v, want s-2's request", ev)
	}
	other, err := f.b.Attach("c-2")
	if err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, g.Events()); ev.Approver != a2 || !ev.Ended {
		t.Fatalf("event %+v, want c-2 ended (replaced)", ev)
	}
	moved := recv(t, other.Events()).Request
	if err := other.Answer(context.Background(), moved.RequestID, Reply{Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, err2); err != nil {
		t.Fatalf("Ask of s-2 answered by the new approver = %v", err)
	}

	// An approver whose events are not read past the backlog (2 per
	// approver attached, plus the one the group's goroutine holds) is
	// detached: its requests are denied, then it ends.
	a3, err := g.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	// Four asks cannot all fit; one asked once a3 is gone goes to the
	// unattended queue, and the cancel at the end interrupts it.
	ctx, cancel := context.WithCancel(context.Background())
	var waits []<-chan error
	for range 4 {
		waits = append(waits, ask(ctx, f.b, question("s-1")))
	}
	// Nothing reads the group meanwhile, so it overflows.
	for deadline := time.Now().Add(5 * time.Second); f.b.OriginAttached("c-1"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("c-1 is still attached after four unread requests")
		}
	}
	for ended := false; !ended; {
		ev := recv(t, g.Events())
		if ev.Approver != a3 {
			t.Fatalf("event %+v of another approver", ev)
		}
		ended = ev.Ended
	}
	cancel()
	wentAway := 0
	for _, w := range waits {
		err := recv(t, w)
		if errs.CodeOf(err) != errcode.ApprovalDenied {
			t.Fatalf("Ask of an approver that stopped reading = %v, want approval_denied", err)
		}
		if strings.Contains(err.Error(), "went away") {
			wentAway++
		}
	}
	if wentAway == 0 {
		t.Fatal("no request was denied for its approver going away")
	}

	// The broker closing ends every approver of the group.
	a4, err := g.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	f.b.Close()
	if ev := recv(t, g.Events()); ev.Approver != a4 || !ev.Ended {
		t.Fatalf("event %+v, want c-1 ended by the close", ev)
	}
	if _, err := g.Attach("c-3"); err == nil {
		t.Fatal("Attach after Close succeeded")
	}
}
