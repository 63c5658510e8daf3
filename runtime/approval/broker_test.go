package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// waitLimit bounds every wait on an event; tests never sleep to wait.
const waitLimit = 5 * time.Second

// origins is a session → origin table standing in for session.Service.Origin.
type origins struct {
	mu sync.Mutex
	m  map[string]string
}

func (o *origins) set(sessionID, origin string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[sessionID] = origin
}

func (o *origins) get(sessionID string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[sessionID]
}

type fixture struct {
	b       *Broker
	st      *memStore
	origins *origins
}

func newFixture(t *testing.T, opts BrokerOptions) *fixture {
	t.Helper()
	st := &memStore{}
	o := &origins{m: map[string]string{}}
	b := NewBroker(st, o.get, nil, opts)
	t.Cleanup(b.Close)
	return &fixture{b: b, st: st, origins: o}
}

func question(sessionID string) Question {
	return Question{
		SessionID: sessionID, Workdir: "/work/proj", Mode: "accept", Kind: store.KindChat,
		TurnID: "t-1", CallID: "call-1", Tool: "shell",
		Args: json.RawMessage(`{"command":"git status --short"}`), Tag: TagExec,
	}
}

func ask(ctx context.Context, b *Broker, q Question) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Ask(ctx, q) }()
	return ch
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("channel closed while waiting for a value")
		}
		return v
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a value")
	}
	panic("unreachable")
}

// drain reads ch until it closes and returns what it read.
func drain[T any](t *testing.T, ch <-chan T) []T {
	t.Helper()
	var out []T
	deadline := time.After(waitLimit)
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, v)
		case <-deadline:
			t.Fatalf("channel still open after %d values", len(out))
		}
	}
}

// eventually polls cond until it holds (a bounded poll, for states that
// have no event of their own).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func wantCode(t *testing.T, err error, code string, cause error) {
	t.Helper()
	if got := errs.CodeOf(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
	if cause != nil && !errors.Is(err, cause) {
		t.Fatalf("error %v does not wrap %v", err, cause)
	}
}

func (f *fixture) auditRows(t *testing.T) []store.AuditEntry {
	t.Helper()
	rows, err := f.st.ListAudit(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestAskBuildsTheRequest(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-1", "c-1")
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	errc := ask(context.Background(), f.b, question("s-1"))
	req := recv(t, ap.Events()).Request
	if req == nil {
		t.Fatal("the approver's first event is not a request")
	}
	if !strings.HasPrefix(req.RequestID, "ap-") {
		t.Errorf("RequestID = %q, want an ap- id", req.RequestID)
	}
	got := *req
	want := Request{
		RequestID: req.RequestID, SessionID: "s-1", TurnID: "t-1", CallID: "call-1", Tool: "shell",
		Args: json.RawMessage(`{"command":"git status --short"}`), Tag: TagExec, Risk: RiskHigh,
		TimeoutSec: 300, ScopeHint: "shell(git status*)", Note: req.Note, Origin: "c-1",
		Workdir: "/work/proj", CreatedAt: req.CreatedAt, Deadline: req.CreatedAt.Add(DefaultTimeout),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("request =\n%+v\nwant\n%+v", got, want)
	}
	if !req.Interactive() || req.Note == "" {
		t.Errorf("Interactive = %v, Note = %q; want an interactive request with a note", req.Interactive(), req.Note)
	}
	if err := ap.Answer(context.Background(), req.RequestID, Reply{Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatalf("Ask = %v, want nil", err)
	}
}

func TestInteractiveAnswers(t *testing.T) {
	tests := []struct {
		name      string
		reply     Reply
		wantCode  string // "" = allowed
		wantMsg   string
		wantScope string
		patterns  int
	}{
		{name: "allow once", reply: Reply{Decision: DecisionAllow}, wantScope: ScopeOnce},
		{name: "allow session", reply: Reply{Decision: DecisionAllow, Scope: ScopeSession}, wantScope: ScopeSession, patterns: 1},
		{name: "deny with a reason", reply: Reply{Decision: DecisionDeny, Reason: "not on main"},
			wantCode: errcode.ApprovalDenied, wantMsg: "shell was denied by c-1: not on main", wantScope: ScopeOnce},
		{name: "a denial adds no pattern", reply: Reply{Decision: DecisionDeny, Scope: ScopeAlways},
			wantCode: errcode.ApprovalDenied, wantMsg: "denied by c-1", wantScope: ScopeOnce},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, BrokerOptions{})
			f.origins.set("s-1", "c-1")
			ap, err := f.b.Attach("c-1")
			if err != nil {
				t.Fatal(err)
			}
			w := f.b.Watch(t.Context())
			errc := ask(context.Background(), f.b, question("s-1"))
			req := recv(t, ap.Events()).Request
			if err := ap.Answer(context.Background(), req.RequestID, tt.reply); err != nil {
				t.Fatal(err)
			}
			err = recv(t, errc)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("Ask = %v, want nil", err)
				}
			} else {
				wantCode(t, err, tt.wantCode, ErrDenied)
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("Ask error %q does not say %q", err, tt.wantMsg)
				}
			}
			// The approver is told, so that it can dismiss its prompt; the
			// queue watchers hear of the resolution only (never the request).
			res := recv(t, ap.Events()).Resolved
			qres := recv(t, w).Resolved
			for _, r := range []*Resolution{res, qres} {
				if r == nil || r.RequestID != req.RequestID || r.Decision != tt.reply.Decision || r.By != "c-1" {
					t.Fatalf("resolution = %+v, want %s by c-1 for %s", r, tt.reply.Decision, req.RequestID)
				}
			}
			rows := f.auditRows(t)
			if len(rows) != 1 || rows[0].Decision != tt.reply.Decision || rows[0].Scope != tt.wantScope ||
				rows[0].By != "c-1" || rows[0].Reason != tt.reply.Reason || rows[0].Tool != "shell" ||
				rows[0].RequestID != req.RequestID || rows[0].SessionID != "s-1" || rows[0].At.IsZero() {
				t.Errorf("audit = %+v", rows)
			}
			if got := len(f.st.patterns); got != tt.patterns {
				t.Errorf("%d allowlist entries, want %d", got, tt.patterns)
			}
		})
	}
}

func TestFirstAnswerWins(t *testing.T) {
	for round := range 20 {
		f := newFixture(t, BrokerOptions{})
		w := f.b.Watch(t.Context())
		errc := ask(context.Background(), f.b, question("s-1"))
		id := recv(t, w).Pending.RequestID

		const answerers = 8
		results := make([]error, answerers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range answerers {
			wg.Go(func() {
				<-start
				decision := DecisionAllow
				if j%2 == 1 {
					decision = DecisionDeny
				}
				results[j] = f.b.Respond(context.Background(), fmt.Sprintf("c-%d", j), id, decision, "", "")
			})
		}
		close(start)
		wg.Wait()

		winner := -1
		for j, err := range results {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: answers %d and %d both won", round, winner, j)
				}
				winner = j
				continue
			}
			wantCode(t, err, errcode.NotFound, ErrNotPending)
		}
		if winner < 0 {
			t.Fatalf("round %d: no answer won", round)
		}
		askErr := recv(t, errc)
		if allowed := winner%2 == 0; allowed != (askErr == nil) {
			t.Fatalf("round %d: answer %d won but Ask = %v", round, winner, askErr)
		}
		if res := recv(t, w).Resolved; res.By != fmt.Sprintf("c-%d", winner) {
			t.Fatalf("round %d: resolved by %q, want c-%d", round, res.By, winner)
		}
		if rows := f.auditRows(t); len(rows) != 1 {
			t.Fatalf("round %d: %d audit rows, want 1", round, len(rows))
		}
	}
}

func TestAnswerRacingTheDeadline(t *testing.T) {
	for round := range 20 {
		f := newFixture(t, BrokerOptions{Timeout: time.Millisecond})
		w := f.b.Watch(t.Context())
		errc := ask(context.Background(), f.b, question("s-1"))
		id := recv(t, w).Pending.RequestID
		respErr := f.b.Respond(context.Background(), "c-1", id, DecisionAllow, "", "")
		askErr := recv(t, errc)
		res := recv(t, w).Resolved
		switch {
		case respErr == nil && (askErr != nil || res.By != "c-1"):
			t.Fatalf("round %d: the answer won but Ask = %v, resolved by %q", round, askErr, res.By)
		case respErr != nil && (!errs.Is(askErr, errcode.ApprovalTimeout) || res.By != ByTimeout):
			t.Fatalf("round %d: the deadline won but Ask = %v, resolved by %q", round, askErr, res.By)
		}
		if rows := f.auditRows(t); len(rows) != 1 {
			t.Fatalf("round %d: %d audit rows, want 1", round, len(rows))
		}
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name    string
		opts    BrokerOptions
		kind    string
		jobID   string
		wantMsg string
	}{
		{name: "chat", opts: BrokerOptions{Timeout: 50 * time.Millisecond}, kind: store.KindChat,
			wantMsg: "nobody answered within 50ms"},
		{name: "scheduled", opts: BrokerOptions{Timeout: time.Hour, ScheduledTimeout: 50 * time.Millisecond},
			kind: store.KindScheduled, jobID: "j-1", wantMsg: "nobody answered within 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.opts)
			w := f.b.Watch(t.Context())
			q := question("s-1")
			q.Kind, q.JobID = tt.kind, tt.jobID
			errc := ask(context.Background(), f.b, q)
			req := recv(t, w).Pending
			if req.TimeoutSec != 1 {
				t.Errorf("TimeoutSec = %d, want 1 (rounded up)", req.TimeoutSec)
			}
			if tt.jobID != "" && !strings.Contains(req.Note, tt.jobID) {
				t.Errorf("note %q does not name job %s", req.Note, tt.jobID)
			}
			err := recv(t, errc)
			wantCode(t, err, errcode.ApprovalTimeout, ErrTimeout)
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Ask error %q does not say %q", err, tt.wantMsg)
			}
			if res := recv(t, w).Resolved; res.By != ByTimeout || res.Decision != DecisionDeny {
				t.Errorf("resolution = %+v, want deny by timeout", res)
			}
			if rows := f.auditRows(t); len(rows) != 1 || rows[0].By != ByTimeout || rows[0].Decision != DecisionDeny {
				t.Errorf("audit = %+v", rows)
			}
			err = f.b.Respond(context.Background(), "c-1", req.RequestID, DecisionAllow, "", "")
			wantCode(t, err, errcode.NotFound, ErrNotPending)
			if !strings.Contains(err.Error(), "already resolved (deny by timeout)") {
				t.Errorf("late answer error %q does not say how the request ended", err)
			}
		})
	}
}

func TestInterruptDenies(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	w := f.b.Watch(t.Context())
	ctx, cancel := context.WithCancel(context.Background())
	errc := ask(ctx, f.b, question("s-1"))
	recv(t, w)
	cancel()
	err := recv(t, errc)
	wantCode(t, err, errcode.ApprovalDenied, ErrDenied)
	if !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("Ask error %q does not mention the interrupt", err)
	}
	if res := recv(t, w).Resolved; res.By != ByInterrupt {
		t.Errorf("resolved by %q, want %q", res.By, ByInterrupt)
	}
	if n := f.b.Pending("s-1"); n != 0 {
		t.Errorf("Pending = %d after the interrupt, want 0", n)
	}
	// A turn already interrupted asks nobody.
	wantCode(t, f.b.Ask(ctx, question("s-1")), errcode.ApprovalDenied, ErrDenied)
}

// TestInterruptDoesNotWaitForTheStore: an interrupted turn's request is
// denied at once, while the store does not answer (a daemon cut off from
// its database past its lease); the deny's audit row is written once the
// store answers, and Close waits for it.
func TestInterruptDoesNotWaitForTheStore(t *testing.T) {
	st := &memStore{holdAudit: make(chan struct{})}
	b := NewBroker(st, func(string) string { return "" }, nil, BrokerOptions{})
	w := b.Watch(t.Context())
	ctx, cancel := context.WithCancel(context.Background())
	errc := ask(ctx, b, question("s-1"))
	recv(t, w)
	cancel()
	wantCode(t, recv(t, errc), errcode.ApprovalDenied, ErrDenied)
	if res := recv(t, w).Resolved; res.By != ByInterrupt {
		t.Errorf("resolved by %q, want %q", res.By, ByInterrupt)
	}
	close(st.holdAudit)
	b.Close()
	rows, err := st.ListAudit(context.Background(), "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].By != ByInterrupt || rows[0].Decision != DecisionDeny {
		t.Errorf("audit after Close = %+v, want one deny by interrupt", rows)
	}
}

func TestApproverGoingAwayDenies(t *testing.T) {
	tests := []struct {
		name    string
		end     func(ap *Approver, id string) error
		wantBy  string
		wantMsg string
	}{
		{name: "detach", end: func(ap *Approver, _ string) error { ap.Detach(); return nil },
			wantBy: ByDisconnect, wantMsg: "the approving connection went away"},
		{name: "error reply", end: func(ap *Approver, id string) error { return ap.Fail(id, "the prompt crashed") },
			wantBy: "c-1", wantMsg: "the prompt crashed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, BrokerOptions{})
			f.origins.set("s-1", "c-1")
			ap, err := f.b.Attach("c-1")
			if err != nil {
				t.Fatal(err)
			}
			errc := ask(context.Background(), f.b, question("s-1"))
			req := recv(t, ap.Events()).Request
			if err := tt.end(ap, req.RequestID); err != nil {
				t.Fatal(err)
			}
			err = recv(t, errc)
			wantCode(t, err, errcode.ApprovalDenied, ErrDenied)
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Ask error %q does not say %q", err, tt.wantMsg)
			}
			if rows := f.auditRows(t); len(rows) != 1 || rows[0].By != tt.wantBy {
				t.Errorf("audit = %+v, want one row by %s", rows, tt.wantBy)
			}
		})
	}
}

func TestDetachClosesAndRoutesToTheQueue(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-1", "c-1")
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	if !f.b.OriginAttached("c-1") || f.b.Approvers() != 1 {
		t.Fatal("the approver is not attached")
	}
	ap.Detach()
	ap.Detach() // idempotent
	drain(t, ap.Events())
	if f.b.OriginAttached("c-1") || f.b.Approvers() != 0 {
		t.Fatal("the approver is still attached after Detach")
	}
	w := f.b.Watch(t.Context())
	errc := ask(context.Background(), f.b, question("s-1"))
	req := recv(t, w).Pending
	if req.Interactive() {
		t.Fatalf("request went to origin %q with no approver attached", req.Origin)
	}
	if err := f.b.Respond(context.Background(), "c-7", req.RequestID, DecisionAllow, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestOnlyTheOriginAnswersInteractiveRequests(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-1", "c-1")
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	errc := ask(context.Background(), f.b, question("s-1"))
	id := recv(t, ap.Events()).Request.RequestID

	for _, by := range []string{"c-2", "", "grpc"} {
		err := f.b.Respond(context.Background(), by, id, DecisionAllow, "", "")
		wantCode(t, err, errcode.Unauthorized, ErrNotYours)
		if by != "" && !strings.Contains(err.Error(), "not "+by+"'s to answer") {
			t.Errorf("error %q does not say whose it is not", err)
		}
	}
	other, _ := f.b.Attach("c-2")
	wantCode(t, other.Fail(id, "nope"), errcode.Unauthorized, ErrNotYours)
	if got := f.b.List("c-2", ""); len(got) != 0 {
		t.Errorf("List(c-2) = %+v, want nothing: the request is c-1's", got)
	}
	if got := f.b.List("c-1", ""); len(got) != 1 || got[0].RequestID != id {
		t.Errorf("List(c-1) = %+v, want %s", got, id)
	}
	if err := f.b.Respond(context.Background(), "c-1", id, DecisionAllow, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestUnattendedQueue(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-1", "c-gone") // an origin with no approver attached
	w1, w2 := f.b.Watch(t.Context()), f.b.Watch(t.Context())
	errc := ask(context.Background(), f.b, question("s-1"))
	p1, p2 := recv(t, w1).Pending, recv(t, w2).Pending
	if p1 == nil || p2 == nil || p1.RequestID != p2.RequestID || p1.Interactive() {
		t.Fatalf("pending = %+v / %+v, want the same unattended request on both watchers", p1, p2)
	}
	if !strings.Contains(p1.Note, "approval.respond") {
		t.Errorf("note %q does not say how to answer", p1.Note)
	}
	if n := f.b.Pending("s-1"); n != 1 {
		t.Errorf("Pending(s-1) = %d, want 1", n)
	}
	for _, tc := range []struct {
		caller, session string
		want            int
	}{{"anyone", "", 1}, {"", "s-1", 1}, {"anyone", "s-2", 0}} {
		if got := f.b.List(tc.caller, tc.session); len(got) != tc.want {
			t.Errorf("List(%q, %q) = %d requests, want %d", tc.caller, tc.session, len(got), tc.want)
		}
	}
	if err := f.b.Respond(context.Background(), "grpc", p1.RequestID, DecisionAllow, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
	for _, w := range []<-chan QueueEvent{w1, w2} {
		if res := recv(t, w).Resolved; res == nil || res.By != "grpc" || res.Decision != DecisionAllow {
			t.Errorf("resolution = %+v, want allow by grpc", res)
		}
	}
	if n := f.b.Pending("s-1"); n != 0 {
		t.Errorf("Pending(s-1) = %d after the answer, want 0", n)
	}
}

func TestCurrentOriginDecidesTheRoute(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	ap, err := f.b.Attach("c-new")
	if err != nil {
		t.Fatal(err)
	}
	f.origins.set("s-1", "c-new") // re-bound since the turn started
	q := question("s-1")
	q.Origin = "c-old"
	errc := ask(context.Background(), f.b, q)
	req := recv(t, ap.Events()).Request
	if req.Origin != "c-new" {
		t.Fatalf("request sent to %q, want c-new", req.Origin)
	}
	if err := ap.Answer(context.Background(), req.RequestID, Reply{Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
}

func TestWiderScopesAllowlist(t *testing.T) {
	const wd = "/work/proj"
	tests := []struct {
		scope              string
		sameSession        bool
		otherSessionSameWD bool
		elsewhere          bool
	}{
		{ScopeSession, true, false, false},
		{ScopeProject, true, true, false},
		{ScopeAlways, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.scope, func(t *testing.T) {
			f := newFixture(t, BrokerOptions{})
			w := f.b.Watch(t.Context())
			errc := ask(context.Background(), f.b, question("s-1"))
			id := recv(t, w).Pending.RequestID
			if err := f.b.Respond(context.Background(), "c-1", id, DecisionAllow, tt.scope, "fine"); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, errc); err != nil {
				t.Fatal(err)
			}
			a := NewAllowlist(f.st, nil)
			ctx := context.Background()
			same := json.RawMessage(`{"command":"git status"}`)
			for _, c := range []struct {
				name             string
				session, workdir string
				args             json.RawMessage
				want             bool
			}{
				{"the next identical call", "s-1", wd, question("s-1").Args, tt.sameSession},
				{"a call the hint covers", "s-1", wd, same, tt.sameSession},
				{"another command", "s-1", wd, json.RawMessage(`{"command":"git push"}`), false},
				{"another session, same workdir", "s-2", wd, same, tt.otherSessionSameWD},
				{"elsewhere", "s-3", "/other", same, tt.elsewhere},
			} {
				if got := a.Allowed(ctx, c.session, c.workdir, "shell", c.args); got != c.want {
					t.Errorf("%s: Allowed = %v, want %v", c.name, got, c.want)
				}
			}
			entries, _ := a.List(ctx, tt.scope, "")
			if len(entries) != 1 || entries[0].Pattern != "shell(git status*)" {
				t.Errorf("entries = %+v, want shell(git status*)", entries)
			}
			if rows := f.auditRows(t); len(rows) != 1 || rows[0].Scope != tt.scope || rows[0].Reason != "fine" {
				t.Errorf("audit = %+v", rows)
			}
		})
	}
}

func TestWiderScopeWithoutAPatternCountsAsOnce(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	w := f.b.Watch(t.Context())
	q := question("s-1")
	q.Tool, q.Tag, q.Args = "set_config", TagConfig, json.RawMessage(`{"key":"x"}`)
	errc := ask(context.Background(), f.b, q)
	req := recv(t, w).Pending
	if req.ScopeHint != "" {
		t.Fatalf("ScopeHint = %q for a config call, want none", req.ScopeHint)
	}
	if err := f.b.Respond(context.Background(), "c-1", req.RequestID, DecisionAllow, ScopeAlways, ""); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
	if len(f.st.patterns) != 0 {
		t.Errorf("patterns = %+v, want none", f.st.patterns)
	}
	rows := f.auditRows(t)
	if len(rows) != 1 || rows[0].Scope != ScopeOnce || !strings.Contains(rows[0].Reason, "scope always taken as once") {
		t.Errorf("audit = %+v", rows)
	}
}

func TestRespondValidation(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	w := f.b.Watch(t.Context())
	errc := ask(context.Background(), f.b, question("s-1"))
	id := recv(t, w).Pending.RequestID
	tests := []struct {
		name, id, decision, scope string
		code                      string
		cause                     error
	}{
		{"unknown decision", id, "maybe", "", errcode.InvalidParams, ErrBadAnswer},
		{"empty decision", id, "", "", errcode.InvalidParams, ErrBadAnswer},
		{"unknown scope", id, DecisionAllow, "forever", errcode.InvalidParams, ErrBadAnswer},
		{"unknown id", "ap-0000", DecisionAllow, "", errcode.NotFound, ErrNotPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, f.b.Respond(context.Background(), "c-1", tt.id, tt.decision, tt.scope, ""), tt.code, tt.cause)
		})
	}
	if n := f.b.Pending("s-1"); n != 1 {
		t.Fatalf("Pending = %d after bad answers, want 1", n)
	}
	if err := f.b.Respond(context.Background(), "c-1", id, DecisionDeny, ScopeOnce, ""); err != nil {
		t.Fatal(err)
	}
	wantCode(t, recv(t, errc), errcode.ApprovalDenied, ErrDenied)
}

func TestAttachReplacesTheApprover(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-1", "c-1")
	old, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	errc := ask(context.Background(), f.b, question("s-1"))
	id := recv(t, old.Events()).Request.RequestID
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	drain(t, old.Events())
	old.Detach() // a late Detach of the replaced approver changes nothing
	if !f.b.OriginAttached("c-1") || f.b.Approvers() != 1 {
		t.Fatal("the replacement approver is not attached")
	}
	if got := recv(t, ap.Events()).Request; got == nil || got.RequestID != id {
		t.Fatalf("the new approver got %+v, want the pending request %s", got, id)
	}
	if err := ap.Answer(context.Background(), id, Reply{Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Attach(""); !errs.Is(err, errcode.InvalidParams) {
		t.Errorf("Attach(\"\") = %v, want invalid_params", err)
	}
}

func TestListOrderAndScope(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Second); return now }
	f := newFixture(t, BrokerOptions{Now: clock})
	f.origins.set("s-mine", "c-1")
	f.origins.set("s-theirs", "c-2")
	if _, err := f.b.Attach("c-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Attach("c-2"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, s := range []string{"s-queue", "s-mine", "s-theirs", "s-queue"} {
		ask(ctx, f.b, question(s))
		eventually(t, "the request of "+s+" is pending", func() bool { return f.b.Pending(s) > 0 })
	}
	eventually(t, "both queue requests are pending", func() bool { return f.b.Pending("s-queue") == 2 })
	got := f.b.List("c-1", "")
	var sessions []string
	for i, r := range got {
		sessions = append(sessions, r.SessionID)
		if i > 0 && r.CreatedAt.Before(got[i-1].CreatedAt) {
			t.Errorf("List is not oldest first: %v", got)
		}
	}
	if fmt.Sprint(sessions) != "[s-queue s-mine s-queue]" {
		t.Errorf("List(c-1) sessions = %v, want [s-queue s-mine s-queue]", sessions)
	}
}

func TestCloseDeniesEverything(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	f.origins.set("s-2", "c-1")
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	w := f.b.Watch(t.Context())
	queued := ask(context.Background(), f.b, question("s-1"))
	recv(t, w)
	interactive := ask(context.Background(), f.b, question("s-2"))
	recv(t, ap.Events())
	f.b.Close()
	f.b.Close() // idempotent
	for _, errc := range []<-chan error{queued, interactive} {
		wantCode(t, recv(t, errc), errcode.ApprovalDenied, ErrClosed)
	}
	evs := drain(t, w)
	if len(evs) != 2 || evs[0].Resolved == nil || evs[0].Resolved.By != ByShutdown {
		t.Errorf("watcher got %+v, want two shutdown resolutions before closing", evs)
	}
	if evs := drain(t, ap.Events()); len(evs) != 1 || evs[0].Resolved == nil {
		t.Errorf("approver got %+v, want its shutdown resolution before closing", evs)
	}
	wantCode(t, f.b.Ask(context.Background(), question("s-1")), errcode.ApprovalDenied, ErrClosed)
	if _, err := f.b.Attach("c-1"); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close = %v, want ErrClosed", err)
	}
	if evs := drain(t, f.b.Watch(t.Context())); len(evs) != 0 {
		t.Errorf("Watch after Close delivered %+v", evs)
	}
}

func TestWatchEndsWithItsContext(t *testing.T) {
	f := newFixture(t, BrokerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	w := f.b.Watch(ctx)
	cancel()
	drain(t, w)
	eventually(t, "the watcher is gone", func() bool {
		return f.b.watchers.Len() == 0
	})
}

func TestSlowWatcherIsDroppedNotWaitedFor(t *testing.T) {
	f := newFixture(t, BrokerOptions{Backlog: 2})
	w := f.b.Watch(t.Context()) // never read until the end
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const asks = 6
	for range asks {
		ask(ctx, f.b, question("s-1"))
	}
	// Ask did not block on the watcher: every request is pending.
	eventually(t, "every request is pending", func() bool { return f.b.Pending("s-1") == asks })
	evs := drain(t, w)
	if len(evs) == 0 || !evs[len(evs)-1].Lagged {
		t.Fatalf("watcher got %+v, want Lagged last", evs)
	}
	if len(evs) > 2+2 { // backlog + the one in hand + Lagged
		t.Errorf("watcher got %d events, more than its backlog allows", len(evs))
	}
}

func TestSlowApproverIsDetached(t *testing.T) {
	f := newFixture(t, BrokerOptions{Backlog: 1})
	f.origins.set("s-1", "c-1")
	ap, err := f.b.Attach("c-1")
	if err != nil {
		t.Fatal(err)
	}
	// Two unread requests fit: the one being handed over and a backlog of 1.
	var results []<-chan error
	for i := 1; i <= 2; i++ {
		results = append(results, ask(context.Background(), f.b, question("s-1")))
		eventually(t, fmt.Sprintf("%d requests are pending", i), func() bool { return f.b.Pending("s-1") == i })
	}
	// The third request overflows: the approver is detached and everything
	// it held is denied.
	results = append(results, ask(context.Background(), f.b, question("s-1")))
	for _, errc := range results {
		err := recv(t, errc)
		wantCode(t, err, errcode.ApprovalDenied, ErrDenied)
		if !strings.Contains(err.Error(), "went away") {
			t.Errorf("Ask error %q does not say the approver went away", err)
		}
	}
	if f.b.OriginAttached("c-1") {
		t.Error("the slow approver is still attached")
	}
	drain(t, ap.Events())
}

func TestRisk(t *testing.T) {
	tests := []struct {
		tool string
		tag  Tag
		want string
	}{
		{"read_file", TagRead, RiskLow},
		{"write_file", TagWrite, RiskMedium},
		{"web_fetch", TagNetwork, RiskMedium},
		{"post", TagSend, RiskMedium},
		{"delegate_task", TagDelegate, RiskMedium},
		{"shell", TagExec, RiskHigh},
		{"shell", TagRead, RiskHigh}, // the tool outranks a mislabelled tag
		{"set_config", TagConfig, RiskHigh},
		{"vault", TagSecret, RiskHigh},
		{"mystery", Tag("bogus"), RiskHigh},
	}
	for _, tt := range tests {
		if got := riskOf(tt.tool, tt.tag); got != tt.want {
			t.Errorf("riskOf(%s, %s) = %s, want %s", tt.tool, tt.tag, got, tt.want)
		}
	}
}

func TestScopeHint(t *testing.T) {
	const wd = "/work/proj"
	tests := []struct {
		tool string
		tag  Tag
		args string
		want string
	}{
		{"shell", TagExec, `{"command":"git status --short"}`, "shell(git status*)"},
		{"shell", TagExec, `{"command":"  go test ./...  "}`, "shell(go test*)"},
		{"shell", TagExec, `{"command":"ls -la"}`, "shell(ls*)"},
		{"shell", TagExec, `{"command":"make"}`, "shell(make*)"},
		{"shell", TagExec, `{"command":"echo *"}`, "shell(echo*)"},
		{"shell", TagExec, `{"command":"rm -rf build"}`, "shell(rm -rf build)"},
		{"shell", TagExec, `{"command":"/usr/bin/sudo ls"}`, "shell(/usr/bin/sudo ls)"},
		{"shell", TagExec, `{"command":"git status; rm -rf ~"}`, "shell(git status; rm -rf ~)"},
		{"shell", TagExec, `{"command":"echo $(id)"}`, "shell(echo $(id))"},
		{"shell", TagExec, `{"command":"git  status"}`, "shell(git  status)"}, // the prefix would not cover it
		{"shell", TagExec, `{"command":""}`, ""},
		{"shell", TagExec, `{}`, ""},
		{"shell", TagExec, `[1]`, ""},
		{"write_file", TagWrite, `{"path":"src/foo/bar.go"}`, "write_file(src/foo/**)"},
		{"write_file", TagWrite, `{"path":"/work/proj/src/x.go"}`, "write_file(src/**)"},
		{"edit_file", TagWrite, `{"path":"main.go"}`, "edit_file(main.go)"},
		{"write_file", TagWrite, `{"path":"a[1]/x.go"}`, `write_file(a\[1\]/**)`},
		{"read_file", TagRead, `{"path":"/etc/passwd"}`, "read_file(/etc/passwd)"},
		{"list_dir", TagRead, `{}`, "list_dir(.)"},
		{"glob", TagRead, `{"pattern":"**/*.go"}`, `glob(\*\*/\*.go)`},
		{"web_fetch", TagNetwork, `{"url":"https://go.dev/doc/install?x=1"}`, "web_fetch(https://go.dev/**)"},
		{"web_fetch", TagNetwork, `{"url":"not a url"}`, "web_fetch(not a url)"},
		{"delegate_task", TagDelegate, `{"task":"x"}`, "delegate_task"},
		{"mcp:search", TagNetwork, `{"q":"x"}`, "mcp:search"},
		{"set_config", TagConfig, `{"key":"x"}`, ""},
	}
	for _, tt := range tests {
		got := ScopeHint(tt.tool, tt.tag, json.RawMessage(tt.args), wd)
		if got != tt.want {
			t.Errorf("ScopeHint(%s, %s) = %q, want %q", tt.tool, tt.args, got, tt.want)
		}
	}
}

// FuzzScopeHint checks the hint's promise: when there is one, it parses and
// covers the very call it was made for.
func FuzzScopeHint(f *testing.F) {
	tools := []string{"shell", "write_file", "read_file", "glob", "web_fetch", "grep", "custom"}
	keys := map[string]string{"shell": "command", "glob": "pattern", "web_fetch": "url"}
	for i, s := range []string{"git status --short", "src/a b/[x].go", "https://h/a?b=c", "a\\", "x;y", "*?{", "../up"} {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		tool := tools[int(which)%len(tools)]
		key := keys[tool]
		if key == "" {
			key = "path"
		}
		args, err := json.Marshal(map[string]string{key: value})
		if err != nil {
			t.Skip()
		}
		hint := ScopeHint(tool, TagWrite, args, "/work/proj")
		if hint == "" {
			return
		}
		p, err := ParsePattern(hint)
		if err != nil {
			t.Fatalf("hint %q does not parse: %v", hint, err)
		}
		if !p.Matches(tool, args, "/work/proj") {
			t.Fatalf("hint %q does not cover the call %s %s", hint, tool, args)
		}
	})
}
