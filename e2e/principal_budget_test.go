package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// principalBudgets returns each principal's budget as principal.list
// shows it (nil: none), by principal id.
func principalBudgets(t *testing.T, c client) map[string]map[string]any {
	t.Helper()
	var list struct {
		Principals []struct {
			PrincipalID string         `json:"principalId"`
			Budget      map[string]any `json:"budget"`
		} `json:"principals"`
	}
	if err := c.Call(context.Background(), "principal.list", map[string]any{}, &list); err != nil {
		t.Fatalf("principal.list: %v", err)
	}
	out := map[string]map[string]any{}
	for _, p := range list.Principals {
		out[p.PrincipalID] = p.Budget
	}
	return out
}

type principalBudgetResult struct {
	Budget struct {
		MaxCostMicroUsd *int64 `json:"maxCostMicroUsd"`
		MaxTokens       *int64 `json:"maxTokens"`
		Source          string `json:"source"`
		PrincipalID     string `json:"principalId"`
	} `json:"budget"`
	Spent struct {
		CostMicroUsd int64 `json:"costMicroUsd"`
		Tokens       int64 `json:"tokens"`
	} `json:"spent"`
	Reached bool `json:"reached"`
}

// TestPrincipalBudgetPausesEverySession: an admin gives principal ann a
// budget of 0.05 USD. Ann's first session makes one model call (0.2 USD)
// and its turn pauses before the next, with turn.paused naming the
// principal's budget; her second session, whose own spending is 0, pauses
// before its first call, because the budget is the sum over every session
// she created. The daemon is killed with SIGKILL: restarted, both are still
// paused and the provider saw one request. principal.setBudget raising the
// budget resumes both turns (on the new daemon, which restarts them), and
// principal.list shows the budget.
func TestPrincipalBudgetPausesEverySession(t *testing.T) {
	srv := budgetServer(t)
	home := t.TempDir()
	p := startProc(t, home)
	admin := dialInfo(t, p.info)
	ctx := context.Background()
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	var set principalBudgetResult
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxCostMicroUsd": 50_000}, &set); err != nil {
		t.Fatalf("principal.setBudget: %v", err)
	}
	if set.Budget.Source != "principal" || set.Budget.PrincipalID != annID || set.Budget.MaxCostMicroUsd == nil || *set.Budget.MaxCostMicroUsd != 50_000 ||
		set.Budget.MaxTokens != nil || set.Reached || set.Spent.CostMicroUsd != 0 {
		t.Fatalf("principal.setBudget: %+v", set)
	}
	ann := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", p.info.GRPCPort), annKey)
	first := createSession(t, ann, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": first, "text": "list the files"}, nil); err != nil {
		t.Fatal(err)
	}
	wantPaused := func(evs []map[string]any) {
		t.Helper()
		paused := payloadOf(evs[len(evs)-1])
		budget, _ := paused["budget"].(map[string]any)
		spent, _ := paused["spent"].(map[string]any)
		if paused["reason"] != "budget_reached" || budget["source"] != "principal" || budget["principalId"] != annID ||
			budget["maxCostMicroUsd"] != float64(50_000) || spent["costMicroUsd"] != float64(200_160) {
			t.Fatalf("turn.paused: %v", paused)
		}
	}
	wantPaused(collect(t, ann.Events(first), "turn.paused", 1))
	// The second session spent nothing itself: the principal's sum pauses it.
	second := createSession(t, ann, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := ann.Call(ctx, "session.prompt", map[string]any{"sessionId": second, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	wantPaused(collect(t, ann.Events(second), "turn.paused", 1))
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("the provider got %d requests, want 1", n)
	}
	// session.setBudget on a session reports the principal's budget that
	// holds it.
	var sb budgetResult
	if err := ann.Call(ctx, "session.setBudget", map[string]any{"sessionId": second}, &sb); err != nil || !sb.Paused || sb.Budget.Source != "principal" {
		t.Fatalf("session.setBudget {} on the second session: %+v %v", sb, err)
	}
	ann.Close()
	admin.Close()
	p.kill()

	p2 := startProc(t, home)
	admin = dialInfo(t, p2.info)
	ann = dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", p2.info.GRPCPort), annKey)
	for _, id := range []string{first, second} {
		if st := sessionStatus(t, ann, id); st != "paused" {
			t.Fatalf("session %s is %q after kill -9 and restart, want paused", id, st)
		}
		if err := ann.Call(ctx, "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Still reached: nothing resumes.
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxCostMicroUsd": 100_000}, &set); err != nil || !set.Reached || set.Spent.CostMicroUsd != 200_160 {
		t.Fatalf("principal.setBudget below the spending: %+v %v", set, err)
	}
	for pid, budget := range principalBudgets(t, admin) {
		if pid == annID && (budget["maxCostMicroUsd"] != float64(100_000) || budget["source"] != "principal") {
			t.Fatalf("principal.list: ann's budget %v", budget)
		}
		if pid != annID && budget != nil {
			t.Fatalf("principal.list: %s has a budget %v", pid, budget)
		}
	}
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(100, 5).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(100, 5).Reply())
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxCostMicroUsd": 10_000_000}, &set); err != nil || set.Reached {
		t.Fatalf("principal.setBudget raising it: %+v %v", set, err)
	}
	for _, id := range []string{first, second} {
		evs := collect(t, ann.Events(id), "turn.done", 1)
		if r := payloadOf(evs[len(evs)-1])["reason"]; r != "complete" || !slicesContain(eventKinds(evs), "turn.resumed") {
			t.Fatalf("session %s after the raise: %v, reason %v", id, eventKinds(evs), r)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("the provider got %d requests, want 3", n)
	}
}

// TestPrincipalBudgetBadInput: negative or non-numeric limits are
// invalid_params naming the field, an unknown principal not_found, the
// daemon token's built-in admin invalid_params; a member may not set
// budgets (forbidden).
func TestPrincipalBudgetBadInput(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	id, key := makePrincipal(t, admin, "bob", "member")
	for _, tc := range []struct {
		params map[string]any
		code   string
		field  string
	}{
		{map[string]any{"principalId": id, "maxCostMicroUsd": -1}, "invalid_params", "maxCostMicroUsd"},
		{map[string]any{"principalId": id, "maxTokens": "many"}, "invalid_params", "maxTokens"},
		{map[string]any{"principalId": "p-none", "maxTokens": 5}, "not_found", "p-none"},
		{map[string]any{"principalId": "builtin-admin", "maxTokens": 5}, "invalid_params", "built-in admin"},
	} {
		err := admin.Call(ctx, "principal.setBudget", tc.params, nil)
		if err == nil || codeOf(err) != tc.code || !strings.Contains(err.Message, tc.field) {
			t.Errorf("principal.setBudget %v: %v, want %s naming %s", tc.params, err, tc.code, tc.field)
		}
	}
	bob, _ := helloWSKey(t, d, key)
	if err := bob.Call(ctx, "principal.setBudget", map[string]any{"principalId": id, "maxTokens": 1_000_000}, nil); codeOf(err) != "forbidden" {
		t.Fatalf("a member's principal.setBudget: %v, want forbidden", err)
	}
	// Cleared: principal.list shows no budget.
	var set principalBudgetResult
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": id}, &set); err != nil || set.Budget.Source != "none" {
		t.Fatalf("principal.setBudget {}: %+v %v", set, err)
	}
}

// TestPostgresPrincipalBudgetAcrossDaemons: two daemons on one PostgreSQL
// database. Principal ann's session on the first daemon spends 0.2 USD of
// her 0.05 USD budget; her session on the second daemon, which spent
// nothing, pauses before its first call: each daemon totals her spending
// from the shared store. principal.setBudget through the first daemon
// raises it, and the turn paused on the second resumes and completes (it
// checks again within its recheck period: no daemon-to-daemon call wakes
// it).
func TestPostgresPrincipalBudgetAcrossDaemons(t *testing.T) {
	srv := budgetServer(t)
	_, procs := startCluster(t, 2)
	ctx := context.Background()
	admin := dialInfo(t, procs[0].info)
	annID, annKey := makePrincipal(t, admin, "ann", "member")
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxCostMicroUsd": 50_000}, nil); err != nil {
		t.Fatal(err)
	}
	ann0 := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", procs[0].info.GRPCPort), annKey)
	ann1 := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", procs[1].info.GRPCPort), annKey)
	first := createSession(t, ann0, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := ann0.Call(ctx, "session.prompt", map[string]any{"sessionId": first, "text": "list the files"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, ann0.Events(first), "turn.paused", 1)
	second := createSession(t, ann1, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := ann1.Call(ctx, "session.prompt", map[string]any{"sessionId": second, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ann1.Events(second), "turn.paused", 1)
	if b, _ := payloadOf(evs[len(evs)-1])["budget"].(map[string]any); b["source"] != "principal" {
		t.Fatalf("turn.paused on the second daemon: %v", payloadOf(evs[len(evs)-1]))
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("the provider got %d requests, want 1", n)
	}
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(100, 5).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(100, 5).Reply())
	if err := admin.Call(ctx, "principal.setBudget", map[string]any{"principalId": annID, "maxCostMicroUsd": 10_000_000}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cl client
		id string
	}{{ann0, first}, {ann1, second}} {
		evs := collect(t, c.cl.Events(c.id), "turn.done", 1)
		if r := payloadOf(evs[len(evs)-1])["reason"]; r != "complete" || !slicesContain(eventKinds(evs), "turn.resumed") {
			t.Fatalf("session %s after the raise: %v, reason %v", c.id, eventKinds(evs), r)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("the provider got %d requests, want 3", n)
	}
}

// TestProviderPrices: a provider configuration's prices replace the price
// table's for its models: a call of gpt-4.1 with 100 000 input and 20
// output tokens costs 100 080 micro-dollars at the provider's 1 and 4 USD
// a million (200 160 at the built-in table's 2 and 8); clear_prices brings
// the table back. Bad prices are invalid_params naming the field, and
// change nothing.
func TestProviderPrices(t *testing.T) {
	srv := providertest.NewServer(t)
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("One.").Finish("stop").Usage(100_000, 20).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("Two.").Finish("stop").Usage(100_000, 20).Reply())
	t.Setenv("OPENAI_API_KEY", "sk-prices")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	for _, tc := range []struct {
		vendor string
		config map[string]any
		field  string
	}{
		{"openai", map[string]any{"prices": map[string]any{"gpt-4.1": map[string]any{"input": -1, "output": 4}}}, `prices."gpt-4.1".input`},
		{"openai", map[string]any{"prices": map[string]any{"gpt-4.1": map[string]any{"input": 1, "output": 0.0000001}}}, `prices."gpt-4.1".output`},
		{"openai", map[string]any{"prices": map[string]any{"gpt-4.1": map[string]any{"input": 1, "output": 4, "cache_read": 2_000_000}}}, `prices."gpt-4.1".cache_read`},
		{"openai", map[string]any{"prices": map[string]any{"gpt-4.1": map[string]any{"input": "cheap", "output": 4}}}, "input"},
		{"openai", map[string]any{"prices": map[string]any{"gpt-4.1": map[string]any{"input": 1, "output": 4}}, "clear_prices": true}, "clear_prices"},
		{"fake", map[string]any{"prices": map[string]any{"fake": map[string]any{"input": 1, "output": 4}}}, "prices"},
	} {
		err := c.Call(ctx, "provider.configure", map[string]any{"vendor": tc.vendor, "config": tc.config}, nil)
		if err == nil || codeOf(err) != "invalid_params" || !strings.Contains(err.Message, tc.field) {
			t.Errorf("provider.configure %s %v: %v, want invalid_params naming %s", tc.vendor, tc.config, err, tc.field)
		}
	}
	costOf := func(id, text string) any {
		t.Helper()
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": text}, nil); err != nil {
			t.Fatal(err)
		}
		for _, ev := range collect(t, c.Events(id), "turn.done", 1) {
			if ev["kind"] == "usage" {
				p := payloadOf(ev)
				if p["priced"] != true {
					t.Fatalf("usage event not priced: %v", p)
				}
				return p["costMicroUsd"]
			}
		}
		t.Fatal("no usage event")
		return nil
	}
	if err := c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{
		"prices": map[string]any{"gpt-4.1": map[string]any{"input": 1, "output": 4}}}}, nil); err != nil {
		t.Fatalf("provider.configure prices: %v", err)
	}
	id := createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if cost := costOf(id, "first"); cost != float64(100_080) {
		t.Fatalf("cost at the provider's prices: %v, want 100080", cost)
	}
	if err := c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"clear_prices": true}}, nil); err != nil {
		t.Fatalf("provider.configure clear_prices: %v", err)
	}
	if cost := costOf(id, "second"); cost != float64(200_160) {
		t.Fatalf("cost once cleared: %v, want 200160 (the built-in table)", cost)
	}
}
