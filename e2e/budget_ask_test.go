package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// budgetAsk is the budget request approval.pending announces for a paused
// turn, with its args decoded.
type budgetAsk struct {
	RequestID string
	SessionID string
	Note      string
	Args      struct {
		Reason  string         `json:"reason"`
		Budget  map[string]any `json:"budget"`
		Spent   map[string]any `json:"spent"`
		RaiseTo struct {
			MaxCostMicroUsd *int64 `json:"maxCostMicroUsd"`
			MaxTokens       *int64 `json:"maxTokens"`
		} `json:"raiseTo"`
	}
}

// waitBudgetAsk waits on watcher (a connection that gets approval.pending)
// for the budget request of session id, and checks that approval.list
// shows it too.
func waitBudgetAsk(t *testing.T, watcher *wsClient, id string) budgetAsk {
	t.Helper()
	for {
		note := waitNote(t, watcher, "approval.pending")
		req, _ := note["request"].(map[string]any)
		if req["tool"] != "budget" || req["sessionId"] != id {
			continue
		}
		var ask budgetAsk
		ask.RequestID, _ = req["requestId"].(string)
		ask.SessionID = id
		ask.Note, _ = req["note"].(string)
		raw, _ := json.Marshal(req["args"])
		if err := json.Unmarshal(raw, &ask.Args); err != nil {
			t.Fatalf("budget request args %s: %v", raw, err)
		}
		if req["permissionTag"] != "config" || req["interactive"] == true {
			t.Fatalf("budget request %v: want tag config, in the unattended queue", req)
		}
		var list struct {
			Requests []struct {
				RequestID string `json:"requestId"`
				Tool      string `json:"tool"`
			} `json:"requests"`
		}
		if err := watcher.Call(context.Background(), "approval.list", map[string]any{"sessionId": id}, &list); err != nil {
			t.Fatalf("approval.list: %v", err)
		}
		if len(list.Requests) != 1 || list.Requests[0].RequestID != ask.RequestID || list.Requests[0].Tool != "budget" {
			t.Fatalf("approval.list for %s: %+v, want the budget request %s", id, list.Requests, ask.RequestID)
		}
		return ask
	}
}

// TestBudgetAskedLikeAnApproval: a turn that pauses at its budget puts a
// budget request in the unattended approval queue (approval.pending, tag
// config, args with the budget, the spending and the limits an allow
// raises it to). A member without access to the session, or an approver,
// may not allow it (forbidden: allowing sets a budget); the session's
// owner allows it, which sets the session's budget to raiseTo and resumes
// the turn where it stopped. A second pause is denied: the turn ends
// interrupted, named for who denied it. A third is lifted with
// session.setBudget: its request is withdrawn (approval.resolved, by
// interrupt).
func TestBudgetAskedLikeAnApproval(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	_, annKey := makePrincipal(t, admin, "ann", "member")
	vicID, vicKey := makePrincipal(t, admin, "vic", "approver")
	_, bobKey := makePrincipal(t, admin, "bob", "member")
	ann, _ := helloWSKey(t, d, annKey)
	vic, _ := helloWSKey(t, d, vicKey)
	bob, _ := helloWSKey(t, d, bobKey)
	id := createSession(t, ann, nil)
	if err := ann.Call(ctx, "session.share", map[string]any{"sessionId": id, "principalId": vicID, "role": "approver"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ann.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxTokens": 0}, nil); err != nil {
		t.Fatal(err)
	}

	// Paused before the first call: asked like an approval.
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(id), "turn.paused", 1)
	ask := waitBudgetAsk(t, admin, id)
	raise := ask.Args.RaiseTo.MaxTokens
	if ask.Args.Reason != "budget_reached" || ask.Args.Budget["source"] != "session" || ask.Args.Budget["maxTokens"] != float64(0) ||
		raise == nil || *raise < 1 || ask.Args.RaiseTo.MaxCostMicroUsd != nil || !strings.Contains(ask.Note, "allow raises it to maxTokens") {
		t.Fatalf("budget request: %+v (raiseTo.maxTokens %v)", ask, raise)
	}
	for who, c := range map[string]*wsClient{"vic (approver)": vic, "bob (member, not his session)": bob} {
		err := c.Call(ctx, "approval.respond", map[string]any{"requestId": ask.RequestID, "decision": "allow"}, nil)
		if code := codeOf(err); code != "forbidden" && code != "not_found" {
			t.Fatalf("%s allowing the budget request: %v, want forbidden", who, err)
		}
	}
	if err := ann.Call(ctx, "approval.respond", map[string]any{"requestId": ask.RequestID, "decision": "allow"}, nil); err != nil {
		t.Fatalf("ann allowing the budget request: %v", err)
	}
	evs := collect(t, ann.Events(id), "turn.done", 1)
	if kinds := eventKinds(evs); !slicesContain(kinds, "turn.resumed") || payloadOf(evs[len(evs)-1])["reason"] != "complete" {
		t.Fatalf("after the allow: %v, turn.done %v", kinds, payloadOf(evs[len(evs)-1]))
	}
	var set budgetResult
	if err := ann.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxTokens": 0}, &set); err != nil {
		t.Fatal(err)
	}

	// Paused again (budget back at 0): denied, the turn ends.
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "again"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(id), "turn.paused", 1)
	ask = waitBudgetAsk(t, admin, id)
	if err := vic.Call(ctx, "approval.respond", map[string]any{"requestId": ask.RequestID, "decision": "deny", "reason": "enough"}, nil); err != nil {
		t.Fatalf("vic denying the budget request: %v", err)
	}
	evs = collect(t, ann.Events(id), "turn.done", 1)
	done := payloadOf(evs[len(evs)-1])
	if by, _ := done["principal"].(map[string]any); done["reason"] != "interrupted" || slicesContain(eventKinds(evs), "turn.resumed") || by["name"] != "vic" {
		t.Fatalf("after the deny: %v, turn.done %v", eventKinds(evs), done)
	}

	// Paused a third time: session.setBudget lifts it and withdraws the
	// request.
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "once more"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(id), "turn.paused", 1)
	ask = waitBudgetAsk(t, admin, id)
	if err := ann.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxTokens": 1_000_000}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		res := waitNote(t, admin, "approval.resolved")
		if res["requestId"] != ask.RequestID {
			continue
		}
		if res["decision"] != "deny" || res["by"] != "interrupt" || res["principal"] != nil {
			t.Fatalf("approval.resolved of the withdrawn budget request: %v", res)
		}
		break
	}
	evs = collect(t, ann.Events(id), "turn.done", 1)
	if payloadOf(evs[len(evs)-1])["reason"] != "complete" {
		t.Fatalf("after session.setBudget: %v", eventKinds(evs))
	}
	var list struct {
		Requests []any `json:"requests"`
	}
	if err := admin.Call(ctx, "approval.list", map[string]any{}, &list); err != nil || len(list.Requests) != 0 {
		t.Fatalf("approval.list after the turns: %v %v", list.Requests, err)
	}
}

// TestBudgetAskForAPrincipal: a turn paused at its principal's budget is
// asked about too, and allowing that request raises the principal's
// budget, which needs an admin: the member whose budget it is gets
// forbidden; the admin's allow sets the principal's budget to raiseTo
// (principal.list shows it) and the turn completes.
func TestBudgetAskForAPrincipal(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxTokens": 0}, nil); err != nil {
		t.Fatal(err)
	}
	ann, _ := helloWSKey(t, d, annKey)
	id := createSession(t, ann, nil)
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann.Events(id), "turn.paused", 1)
	ask := waitBudgetAsk(t, admin, id)
	raise := ask.Args.RaiseTo.MaxTokens
	if ask.Args.Budget["source"] != "principal" || ask.Args.Budget["principalId"] != annID || raise == nil || *raise < 1 {
		t.Fatalf("budget request: %+v", ask.Args)
	}
	err := ann.Call(ctx, "approval.respond", map[string]any{"requestId": ask.RequestID, "decision": "allow"}, nil)
	if codeOf(err) != "forbidden" || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("ann allowing her own principal's raise: %v, want forbidden naming admin", err)
	}
	if err := admin.Call(ctx, "approval.respond", map[string]any{"requestId": ask.RequestID, "decision": "allow"}, nil); err != nil {
		t.Fatalf("the admin allowing: %v", err)
	}
	evs := collect(t, ann.Events(id), "turn.done", 1)
	if payloadOf(evs[len(evs)-1])["reason"] != "complete" || !slicesContain(eventKinds(evs), "turn.resumed") {
		t.Fatalf("after the admin's allow: %v", eventKinds(evs))
	}
	if budget := principalBudgets(t, admin)[annID]; budget["maxTokens"] != float64(*raise) {
		t.Fatalf("ann's budget after the allow: %v, want maxTokens %d", budget, *raise)
	}
}

// listedBudgetAsk polls approval.list through c until it shows the budget
// request of session id, and returns its request id.
func listedBudgetAsk(t *testing.T, c client, id string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var list struct {
			Requests []struct {
				RequestID string `json:"requestId"`
				SessionID string `json:"sessionId"`
				Tool      string `json:"tool"`
			} `json:"requests"`
		}
		if err := c.Call(context.Background(), "approval.list", map[string]any{"sessionId": id}, &list); err != nil {
			t.Fatalf("approval.list: %v", err)
		}
		for _, r := range list.Requests {
			if r.Tool == "budget" && r.SessionID == id {
				return r.RequestID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("approval.list never showed a budget request for %s", id)
	return ""
}
