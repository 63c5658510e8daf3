package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// budgetServer is a local server speaking OpenAI's streaming format, set
// as the openai provider of the daemons the test starts (in-process or as
// child processes, which inherit the environment). Its first answer asks
// for one list_dir call and reports 100 000 input tokens (gpt-4.1: 2 USD
// a million, so 0.2 USD = 200 000 micro-USD); its second ends the turn.
func budgetServer(t *testing.T) *providertest.Server {
	t.Helper()
	srv := providertest.NewServer(t)
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").ToolCall(0, "call-1", "list_dir").ToolArgs(0, `{"path": "."}`).
		Finish("tool_calls").Usage(100_000, 20).Reply())
	t.Setenv("OPENAI_API_KEY", "sk-budget")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	return srv
}

// sessionStatus is the status session.list gives session id.
func sessionStatus(t *testing.T, c client, id string) string {
	t.Helper()
	var res struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
			Status    string `json:"status"`
		} `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{}, &res); err != nil {
		t.Fatalf("session.list: %v", err)
	}
	for _, s := range res.Sessions {
		if s.SessionID == id {
			return s.Status
		}
	}
	t.Fatalf("session.list lacks %s", id)
	return ""
}

type budgetResult struct {
	Budget struct {
		MaxCostMicroUsd *int64 `json:"maxCostMicroUsd"`
		MaxTokens       *int64 `json:"maxTokens"`
		Source          string `json:"source"`
	} `json:"budget"`
	Spent struct {
		CostMicroUsd int64 `json:"costMicroUsd"`
		Tokens       int64 `json:"tokens"`
	} `json:"spent"`
	Paused bool `json:"paused"`
}

// TestBudgetPausesSurvivesKillNineResumes: a session with a cost budget of
// 0.05 USD makes its first model call (estimated far below it), which
// costs 0.2 USD; right before the next call the turn pauses with
// turn.paused{budget_reached} and the provider gets no further request.
// The daemon is killed with SIGKILL while the turn is paused: restarted on
// the same home, the session is still paused (and its budget asked for
// again in the approval queue) and the provider still saw one request. session.setBudget raising the budget resumes the turn where
// it stopped (turn.resumed): the second model call reads the tool result
// of the first, and the turn completes.
func TestBudgetPausesSurvivesKillNineResumes(t *testing.T) {
	srv := budgetServer(t)
	home := t.TempDir()
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	id := createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	var set budgetResult
	if err := c.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxCostMicroUsd": 50_000}, &set); err != nil {
		t.Fatalf("session.setBudget: %v", err)
	}
	if set.Budget.Source != "session" || set.Budget.MaxCostMicroUsd == nil || *set.Budget.MaxCostMicroUsd != 50_000 || set.Budget.MaxTokens != nil || set.Paused {
		t.Fatalf("session.setBudget: %+v", set)
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "list the files"}, &turn); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.paused", 1)
	kinds := strings.Join(eventKinds(evs), " ")
	if !strings.Contains(kinds, "tool.result") || strings.Contains(kinds, "turn.done") {
		t.Fatalf("events up to turn.paused: %s", kinds)
	}
	paused := payloadOf(evs[len(evs)-1])
	spent, _ := paused["spent"].(map[string]any)
	budget, _ := paused["budget"].(map[string]any)
	if paused["reason"] != "budget_reached" || paused["turnId"] != turn.TurnID || spent["costMicroUsd"] != float64(200_160) ||
		spent["tokens"] != float64(100_020) || budget["maxCostMicroUsd"] != float64(50_000) || budget["source"] != "session" {
		t.Fatalf("turn.paused: %v", paused)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("the provider got %d requests, want 1: the paused turn made another call", n)
	}
	if st := sessionStatus(t, c, id); st != "paused" {
		t.Fatalf("status %q while paused, want paused", st)
	}
	c.Close()
	p.kill()

	p2 := startProc(t, home)
	c2 := dialInfo(t, p2.info)
	if st := sessionStatus(t, c2, id); st != "paused" {
		t.Fatalf("status %q after kill -9 and restart, want paused", st)
	}
	// The restarted daemon picked the turn up: a person is asked again.
	listedBudgetAsk(t, c2, id)
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c2.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, &res); err != nil {
		t.Fatal(err)
	}
	for _, ev := range res.Events {
		if ev["kind"] == "turn.done" {
			t.Fatalf("the paused turn was closed at restart: %v", ev)
		}
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("the provider got %d requests after the restart, want 1", n)
	}
	// A raise that still leaves the budget reached keeps the turn paused.
	if err := c2.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxCostMicroUsd": 100_000}, &set); err != nil || !set.Paused || set.Spent.CostMicroUsd != 200_160 {
		t.Fatalf("session.setBudget below the spending: %+v %v", set, err)
	}
	// A prompt to the session (resumed on the new daemon) queues behind
	// the paused turn.
	var next struct {
		TurnID string `json:"turnId"`
	}
	if err := c2.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "and then?"}, &next); err != nil {
		t.Fatal(err)
	}
	queued := collect(t, c2.Events(id), "turn.queued", 1)
	if q := payloadOf(queued[len(queued)-1]); q["turnId"] != next.TurnID || slicesContain(eventKinds(queued), "turn.started") {
		t.Fatalf("the prompt to the paused session: %v", eventKinds(queued))
	}
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("Two entries.").Finish("stop").Usage(100_050, 5).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("Nothing more.").Finish("stop").Usage(100_100, 5).Reply())
	if err := c2.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxCostMicroUsd": 10_000_000}, &set); err != nil || set.Paused {
		t.Fatalf("session.setBudget raising it: %+v %v", set, err)
	}
	after := collect(t, c2.Events(id), "turn.done", 1)
	kinds = strings.Join(eventKinds(after), " ")
	if !strings.Contains(kinds, "turn.resumed") || strings.Contains(kinds, "turn.paused") {
		t.Fatalf("events after the raise: %s", kinds)
	}
	done := payloadOf(after[len(after)-1])
	if done["reason"] != "complete" || done["turnId"] != turn.TurnID {
		t.Fatalf("turn.done: %v", done)
	}
	after = collect(t, c2.Events(id), "turn.done", 1)
	if done := payloadOf(after[len(after)-1]); done["reason"] != "complete" || done["turnId"] != next.TurnID {
		t.Fatalf("the queued prompt's turn.done: %v", done)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the provider got %d requests, want 3", len(reqs))
	}
	// The second call goes on from the first: it carries the prompt once
	// and the tool's result.
	body, _ := json.Marshal(reqs[1].JSON()["messages"])
	if strings.Count(string(body), "list the files") != 1 || !strings.Contains(string(body), `"tool"`) {
		t.Fatalf("second request's messages: %s", body)
	}
	if st := sessionStatus(t, c2, id); st != "idle" {
		t.Fatalf("status %q after the turn, want idle", st)
	}
}

// TestBudgetInterruptWhilePaused: a paused turn ends with interrupt as any
// turn does (turn.done{interrupted}); the next prompt, under a raised
// budget, runs normally. A token budget of 0 pauses the first call.
func TestBudgetInterruptWhilePaused(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	if err := c.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxTokens": 0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.paused", 1)
	if slicesContain(eventKinds(evs), "step.started") {
		t.Fatalf("a model call started under a budget of 0 tokens: %v", eventKinds(evs))
	}
	if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	evs = collect(t, c.Events(id), "turn.done", 1)
	if r := payloadOf(evs[len(evs)-1])["reason"]; r != "interrupted" {
		t.Fatalf("turn.done reason %v after interrupting a paused turn", r)
	}
	if st := sessionStatus(t, c, id); st != "idle" {
		t.Fatalf("status %q after the interrupt", st)
	}
	// Clearing the session's budget: nothing limits it any more.
	var set budgetResult
	if err := c.Call(ctx, "session.setBudget", map[string]any{"sessionId": id}, &set); err != nil || set.Budget.Source != "none" {
		t.Fatalf("session.setBudget {}: %+v %v", set, err)
	}
	promptComplete(t, c, id, "hello")
}

func slicesContain(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// TestBudgetBadInput: negative or non-numeric limits are invalid_params
// naming the field; an unknown session is not_found.
func TestBudgetBadInput(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	for _, tc := range []struct {
		params map[string]any
		code   string
		field  string
	}{
		{map[string]any{"sessionId": id, "maxCostMicroUsd": -1}, "invalid_params", "maxCostMicroUsd"},
		{map[string]any{"sessionId": id, "maxTokens": -5}, "invalid_params", "maxTokens"},
		{map[string]any{"sessionId": id, "maxCostMicroUsd": "lots"}, "invalid_params", "maxCostMicroUsd"},
		{map[string]any{"sessionId": id, "maxTokens": 1.5}, "invalid_params", "maxTokens"},
		{map[string]any{"sessionId": "s-none", "maxTokens": 5}, "not_found", "s-none"},
	} {
		err := c.Call(ctx, "session.setBudget", tc.params, nil)
		if err == nil || codeOf(err) != tc.code || !strings.Contains(err.Message, tc.field) {
			t.Errorf("session.setBudget %v: %v, want %s naming %s", tc.params, err, tc.code, tc.field)
		}
	}
	err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "workdir": t.TempDir(), "maxTokens": -1}, nil)
	if err == nil || codeOf(err) != "invalid_params" || !strings.Contains(err.Message, "maxTokens") {
		t.Errorf("job.schedule with maxTokens -1: %v", err)
	}
}

// TestBudgetJobRunStops: a job whose budget is reached stops its run
// (job.runNow answers budget_reached, and job.list records it); the run's
// session stays paused until session.setBudget raises its budget.
func TestBudgetJobRunStops(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	jobID := scheduleJob(t, c, map[string]any{"spec": "@daily", "task": "hello", "maxTokens": 0})
	var run struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": jobID}, &run); err != nil || run.Status != "budget_reached" {
		t.Fatalf("job.runNow: %+v %v", run, err)
	}
	var list struct {
		Jobs []jobRow `json:"jobs"`
	}
	if err := c.Call(ctx, "job.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range list.Jobs {
		if j.JobID == jobID {
			found = true
			if j.LastStatus == nil || *j.LastStatus != "budget_reached" || j.State == "running" {
				t.Fatalf("job.list after the run: %+v", j)
			}
		}
	}
	if !found {
		t.Fatal("job.list lacks the job")
	}
	if st := sessionStatus(t, c, run.SessionID); st != "paused" {
		t.Fatalf("the run's session is %q, want paused", st)
	}
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"sessionId": run.SessionID}, &res); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "session.setBudget", map[string]any{"sessionId": run.SessionID, "maxTokens": 1_000_000}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for sessionStatus(t, c, run.SessionID) != "idle" {
		if time.Now().After(deadline) {
			t.Fatal("the run's session did not finish its turn after the raise")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostgresBudgetPauseTakeover: two daemons on one PostgreSQL database.
// A session's turn pauses at its budget on the daemon that owns it, which
// is then killed with SIGKILL. The other daemon reports the session
// paused, and once the dead daemon's lease has expired, session.setBudget
// through it picks the paused turn up there and resumes it: one
// turn.paused, one turn.resumed, one turn.done{complete}, no synthetic
// end, and the provider saw exactly the two calls of the turn.
func TestPostgresBudgetPauseTakeover(t *testing.T) {
	srv := budgetServer(t)
	dsn, procs := startCluster(t, 2)
	db := clusterDB(t, dsn)
	ctx := context.Background()
	c0, c1 := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)
	id := createSession(t, c0, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	if err := c0.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxCostMicroUsd": 50_000}, nil); err != nil {
		t.Fatal(err)
	}
	var turn struct {
		TurnID string `json:"turnId"`
	}
	if err := c0.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "list the files"}, &turn); err != nil {
		t.Fatal(err)
	}
	collect(t, c0.Events(id), "turn.paused", 1)
	c0.Close()
	procs[0].kill()

	if st := sessionStatus(t, c1, id); st != "paused" {
		t.Fatalf("the other daemon reports the session %q, want paused", st)
	}
	// Once the killed owner's lease expired, the surviving daemon takes the
	// session over and picks the paused turn up: its budget is asked for
	// again, in the cluster's approval queue.
	listedBudgetAsk(t, c1, id)
	srv.Enqueue(providertest.NewOpenAIStream("gpt-4.1").Text("Two entries.").Finish("stop").Usage(100_050, 5).Reply())
	// Refused (overloaded) until the killed owner's lease expires.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c1.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxCostMicroUsd": 10_000_000}, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session.setBudget on the surviving daemon: still refused after 60 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var evs []storedEvent
	for deadline := time.Now().Add(60 * time.Second); ; {
		evs = storedEvents(t, db, id)
		if n := len(evs); n > 0 && evs[n-1].kind == "turn.done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed turn did not end within 60 s; last events %v", evs[max(0, len(evs)-5):])
		}
		time.Sleep(50 * time.Millisecond)
	}
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.kind]++
		if e.kind == "turn.done" && (e.turnID != turn.TurnID || e.reason != "complete" || e.synth) {
			t.Fatalf("turn.done: %+v", e)
		}
	}
	if counts["turn.paused"] != 1 || counts["turn.resumed"] != 1 || counts["turn.done"] != 1 || counts["turn.started"] != 1 {
		t.Fatalf("stored events: %v", counts)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("the provider got %d requests, want 2", n)
	}
	if st := sessionStatus(t, c1, id); st != "idle" {
		t.Fatalf("status %q after the turn", st)
	}
}

// TestBudgetSources: an agent definition's budget limits its sessions
// (source agent), the daemon's default limits the others (source default),
// and a session's own budget replaces both: raising it resumes the paused
// turn, which completes.
func TestBudgetSources(t *testing.T) {
	d := startDaemonWith(t, daemon.Config{BudgetDefaultTokens: 1})
	c := helloWS(t, d)
	ctx := context.Background()
	if err := c.Call(ctx, "agent.create", map[string]any{"name": "capped", "description": "d", "maxTokens": -1}, nil); err == nil || codeOf(err) != "invalid_params" || !strings.Contains(err.Message, "maxTokens") {
		t.Fatalf("agent.create with maxTokens -1: %v", err)
	}
	if err := c.Call(ctx, "agent.create", map[string]any{"name": "capped", "description": "d", "maxCostMicroUsd": 0}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		params map[string]any
		source string
	}{
		{map[string]any{"agent": "capped"}, "agent"},
		{nil, "default"},
	} {
		id := createSession(t, c, tc.params)
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, c.Events(id), "turn.paused", 1)
		budget, _ := payloadOf(evs[len(evs)-1])["budget"].(map[string]any)
		if budget["source"] != tc.source {
			t.Fatalf("turn.paused budget %v, want source %s", budget, tc.source)
		}
		var set budgetResult
		if err := c.Call(ctx, "session.setBudget", map[string]any{"sessionId": id, "maxTokens": 1_000_000}, &set); err != nil || set.Budget.Source != "session" || set.Paused {
			t.Fatalf("session.setBudget: %+v %v", set, err)
		}
		evs = collect(t, c.Events(id), "turn.done", 1)
		if r := payloadOf(evs[len(evs)-1])["reason"]; r != "complete" || !slicesContain(eventKinds(evs), "turn.resumed") {
			t.Fatalf("after the raise: %v, reason %v", eventKinds(evs), r)
		}
	}
}
