package e2e

// The snowpea 1.x contract suite (issue 15): what a client written for
// snowpea's protocol 1.x sends, over WebSocket with protocol 1.7.0 hellos,
// against a daemon whose model is a snowpea-format fixture (top-level
// "default" and "repeat"). Each case is written from the seed's and
// PROTOCOL.md's descriptions of the method, not from Trellis's code.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/wire/pagent"
	"github.com/trellis-run/trellis/facade/wire/pi"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/gateway"
)

// snowpeaFixture is a scripted-provider fixture in snowpea's format: the
// unmatched answer is the top-level "default" object, and "repeat" is a
// boolean.
const snowpeaFixture = `{
  "steps": [
    {"match": "hello", "text": "Hi from the fixture."},
    {"match": "slow", "text": "This answer takes its time to arrive.", "delaySec": 60},
    {"match": "run ls", "text": "Running ls.", "tool_calls": [{"name": "shell", "arguments": {"command": "ls"}}]},
    {"after_tool": "shell", "text": "Listed."},
    {"match": "fail", "text": "Partial", "error": "upstream exploded"}
  ],
  "default": {"text": "Default from the fixture."},
  "repeat": true
}`

// compatHello is what a snowpea 1.7 client sends first.
func compatHello(t *testing.T, d *daemon.Daemon) *wsClient {
	t.Helper()
	c := dialWS(t, d)
	var res struct {
		ProtocolVersion string   `json:"protocolVersion"`
		Capabilities    []string `json:"capabilities"`
	}
	if err := c.Call(context.Background(), "system.hello", map[string]any{
		"token": d.Token(), "clientVersion": "snowpea-sdk 1.7.0", "protocolVersion": "1.7.0",
	}, &res); err != nil {
		t.Fatalf("hello 1.7.0: %v", err)
	}
	return c
}

func startCompatDaemon(t *testing.T) *daemon.Daemon {
	t.Helper()
	return startDaemonScript(t, t.TempDir(), daemon.Config{}, snowpeaFixture)
}

// await reads ch until pred holds for an event, failing after a minute.
func await(t *testing.T, ch <-chan map[string]any, what string, pred func(ev map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var kinds []string
	for {
		select {
		case ev := <-ch:
			kinds = append(kinds, fmt.Sprint(ev["kind"]))
			if pred(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s within 60 s; saw %v", what, kinds)
		}
	}
}

func kindIs(kind string) func(map[string]any) bool {
	return func(ev map[string]any) bool { return ev["kind"] == kind }
}

func turnDone(turnID string) func(map[string]any) bool {
	return func(ev map[string]any) bool {
		return ev["kind"] == "turn.done" && payloadOf(ev)["turnId"] == turnID
	}
}

func prompt(t *testing.T, c client, params map[string]any) string {
	t.Helper()
	var res struct {
		TurnID string `json:"turnId"`
	}
	if err := c.Call(context.Background(), "session.prompt", params, &res); err != nil {
		t.Fatalf("session.prompt %v: %v", params, err)
	}
	return res.TurnID
}

func wantCode(t *testing.T, err *errcode.Error, code, inMessage string) {
	t.Helper()
	if err == nil || err.StringCode() != code || !strings.Contains(err.Message, inMessage) {
		t.Fatalf("got %v, want %s containing %q", err, code, inMessage)
	}
}

// TestCompatFixtureAndWhenBusy: the fixture loads (top-level default and
// repeat), an unmatched prompt plays the default, and session.prompt's
// whenBusy queue | interrupt | reject | steer and session.steer each do what
// they say.
func TestCompatFixtureAndWhenBusy(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	evs := c.Events(id)

	t1 := prompt(t, c, map[string]any{"sessionId": id, "text": "anything at all"})
	done := await(t, evs, "message.done", kindIs("message.done"))
	if got := payloadOf(done)["text"]; got != "Default from the fixture." {
		t.Fatalf("unmatched prompt answered %q, want the fixture's default", got)
	}
	if end := await(t, evs, "turn.done", turnDone(t1)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("turn.done %v", end)
	}

	slow := prompt(t, c, map[string]any{"sessionId": id, "text": "slow please"})
	await(t, evs, "the slow turn's step", kindIs("step.started"))
	err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello", "whenBusy": "reject"}, nil)
	wantCode(t, err, "session_busy", "whenBusy")
	queued := prompt(t, c, map[string]any{"sessionId": id, "text": "hello", "whenBusy": "queue"})
	q := await(t, evs, "turn.queued", kindIs("turn.queued"))
	if p := payloadOf(q); p["turnId"] != queued || p["prompt"] != "hello" {
		t.Fatalf("turn.queued %v: want turn %s with its prompt text", p, queued)
	}
	// snowpea 1.7's steering: session.steer and whenBusy steer join the
	// running turn (its id; nothing started); the interrupt below drops the
	// text its model has not read.
	var steer struct {
		OK      bool `json:"ok"`
		Started bool `json:"started"`
	}
	if err := c.Call(ctx, "session.steer", map[string]any{"sessionId": id, "text": "hurry"}, &steer); err != nil || !steer.OK || steer.Started {
		t.Fatalf("session.steer during the slow turn: %+v %v, want ok and not started", steer, err)
	}
	if joined := prompt(t, c, map[string]any{"sessionId": id, "text": "faster", "whenBusy": "steer"}); joined != slow {
		t.Fatalf("whenBusy=steer answered turn %s, want the running turn %s", joined, slow)
	}
	now := prompt(t, c, map[string]any{"sessionId": id, "text": "hello", "whenBusy": "interrupt"})
	if end := await(t, evs, "the slow turn's end", turnDone(slow)); payloadOf(end)["reason"] != "interrupted" {
		t.Fatalf("whenBusy=interrupt: slow turn ended %v", end)
	}
	if end := await(t, evs, "the interrupting turn's end", turnDone(now)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("whenBusy=interrupt: the new turn ended %v", end)
	}
	err = c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "x", "whenBusy": "later"}, nil)
	wantCode(t, err, "invalid_params", "later")

	// The pi rendering of this session lists the queued prompt's text.
	status, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/v1/sessions/%s/events?follow=false&format=pi", d.HTTPPort(), id), d.Token())
	if status != http.StatusOK {
		t.Fatalf("pi rendering: HTTP %d %s", status, body)
	}
	sawQueue := false
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		ev, err := pi.DecodeEventLine([]byte(l))
		if err != nil {
			t.Fatalf("pi line %s: %v", l, err)
		}
		if u, ok := ev.(pi.QueueUpdate); ok && len(u.FollowUp) == 1 {
			sawQueue = true
			if u.FollowUp[0] != "hello" {
				t.Fatalf("queue_update followUp %q, want the prompt text", u.FollowUp)
			}
		}
	}
	if !sawQueue {
		t.Fatal("no queue_update listing the queued prompt")
	}
}

// TestCompatWireRunEnd: a run whose provider call fails ends in the wire
// rendering as pagent's raises after the deltas: no StepEnd or TurnEnd for
// the call, RunEnd says why (stop_reason and the provider's message).
func TestCompatWireRunEnd(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	id := createSession(t, c, nil)
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "fail now"})
	await(t, c.Events(id), "turn.done", turnDone(turn))
	status, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/v1/sessions/%s/events?follow=false&format=wire", d.HTTPPort(), id), d.Token())
	if status != http.StatusOK {
		t.Fatalf("HTTP %d %s", status, body)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var methods []string
	for _, l := range lines {
		ev, err := pagent.DecodeEventLine([]byte(l))
		if err != nil {
			t.Fatalf("wire line %s: %v", l, err)
		}
		methods = append(methods, ev.Method())
		if d, ok := ev.(pagent.TextDelta); ok && d.Text != "Partial" {
			t.Fatalf("the failed call's delta %q, want what it said", d.Text)
		}
	}
	if got := strings.Join(methods, " "); got != "RunBegin TurnBegin TextDelta RunEnd" {
		t.Fatalf("wire methods %s, want RunBegin TurnBegin TextDelta RunEnd", got)
	}
	ev, _ := pagent.DecodeEventLine([]byte(lines[len(lines)-1]))
	if end := ev.(pagent.RunEnd); end.StopReason != "error" || end.Error != "upstream exploded" || end.Content != "" {
		t.Fatalf("last wire line %s: want stop_reason error with the provider's message", lines[len(lines)-1])
	}
}

// TestCompatPiQueuedPromptSameRun: a prompt queued behind a turn is, in the
// pi rendering, a turn of the same agent run, as pi delivers a follow-up:
// one agent_start and one agent_end holding both prompts.
func TestCompatPiQueuedPromptSameRun(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	asked, release := make(chan struct{}, 1), make(chan struct{})
	// The first turn waits on its approval until the second prompt is
	// queued behind it.
	c.onRequest = func(string, json.RawMessage) (any, *errcode.Error) {
		asked <- struct{}{}
		<-release
		return map[string]any{"decision": "allow", "scope": "once"}, nil
	}
	id := createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "accept"})
	evs := c.Events(id)
	first := prompt(t, c, map[string]any{"sessionId": id, "text": "run ls"})
	<-asked
	second := prompt(t, c, map[string]any{"sessionId": id, "text": "hello", "whenBusy": "queue"})
	await(t, evs, "turn.queued", kindIs("turn.queued"))
	close(release)
	if end := await(t, evs, "the first turn's end", turnDone(first)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("first turn: %v", end)
	}
	await(t, evs, "the queued turn's end", turnDone(second))

	status, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/v1/sessions/%s/events?follow=false&format=pi", d.HTTPPort(), id), d.Token())
	if status != http.StatusOK {
		t.Fatalf("pi rendering: HTTP %d %s", status, body)
	}
	var types []string
	var end pi.AgentEnd
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		ev, err := pi.DecodeEventLine([]byte(l))
		if err != nil {
			t.Fatalf("pi line %s: %v", l, err)
		}
		switch e := ev.(type) {
		case pi.AgentStart, pi.AgentSettled, pi.TurnStart:
			types = append(types, fmt.Sprintf("%T", e))
		case pi.AgentEnd:
			types, end = append(types, "pi.AgentEnd"), e
		}
	}
	want := "pi.AgentStart pi.TurnStart pi.TurnStart pi.TurnStart pi.AgentEnd pi.AgentSettled"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("pi run outline %s, want %s (one run: the tool call's two provider calls, then the queued prompt's)", got, want)
	}
	var users []string
	for _, m := range end.Messages {
		if m.Role == "user" {
			users = append(users, m.Content[0].Text)
		}
	}
	if strings.Join(users, "|") != "run ls|hello" {
		t.Fatalf("agent_end's user messages %q, want both prompts", users)
	}
}

// TestCompatSessionFields: session.create effort, session.deleteSaved
// deleteWorkspace, provider.configure's token names.
func TestCompatSessionFields(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()

	id := createSession(t, c, map[string]any{"effort": "high"})
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "hello"})
	if end := await(t, c.Events(id), "turn.done", turnDone(turn)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("a session with effort high: %v", end)
	}
	err := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir(), "effort": "extreme"}, nil)
	wantCode(t, err, "invalid_params", "extreme")

	// deleteWorkspace removes a workspace the daemon made (under its home),
	// never the user's own directory.
	made := filepath.Join(d.Home(), "workspaces", "w1")
	if err := os.MkdirAll(made, 0o700); err != nil {
		t.Fatal(err)
	}
	mine := t.TempDir()
	for _, wd := range []string{made, mine} {
		sid := createSession(t, c, map[string]any{"workdir": wd})
		if err := c.Call(ctx, "session.close", map[string]any{"sessionId": sid}, nil); err != nil {
			t.Fatal(err)
		}
		var res struct {
			Deleted           int `json:"deleted"`
			WorkspacesDeleted int `json:"workspacesDeleted"`
		}
		if err := c.Call(ctx, "session.deleteSaved", map[string]any{"sessionId": sid, "deleteWorkspace": true}, &res); err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(wd)
		switch wd {
		case made:
			if res.Deleted != 1 || res.WorkspacesDeleted != 1 || !os.IsNotExist(statErr) {
				t.Fatalf("daemon workspace: %+v, stat %v", res, statErr)
			}
		case mine:
			if res.Deleted != 1 || res.WorkspacesDeleted != 0 || statErr != nil {
				t.Fatalf("user's workdir: %+v, stat %v", res, statErr)
			}
		}
	}

	if err := c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"token": "sk-compat-token"}}, nil); err != nil {
		t.Fatalf("provider.configure {token}: %v", err)
	}
	var list struct {
		Providers []map[string]any `json:"providers"`
	}
	if err := c.Call(ctx, "provider.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Providers {
		if p["vendor"] == "openai" && p["configured"] != true {
			t.Fatalf("openai after configure {token}: %v", p)
		}
	}
	err = c.Call(ctx, "provider.configure", map[string]any{"vendor": "anthropic", "config": map[string]any{"api_key": "a", "access_token": "b"}}, nil)
	wantCode(t, err, "invalid_params", "access_token")
	if strings.Contains(err.Message, "sk-") {
		t.Fatalf("error shows a secret: %v", err)
	}
}

// TestCompatAgents: agent.create without a name (and named), session.create
// and job.schedule {agent} applying the definition with its tools list
// enforced, unknown agents not_found, agent.spawn without sessionId.
func TestCompatAgents(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()

	var made struct {
		Name string `json:"name"`
		Path string `json:"path"`
	}
	if err := c.Call(ctx, "agent.create", map[string]any{"description": "Reads Go code, and reviews it"}, &made); err != nil {
		t.Fatalf("agent.create without name: %v", err)
	}
	if made.Name != "reads-go-code-and" {
		t.Fatalf("generated name %q", made.Name)
	}
	if err := c.Call(ctx, "agent.create", map[string]any{"description": "Reads Go code, and reviews it"}, &made); err != nil || made.Name != "reads-go-code-and-2" {
		t.Fatalf("second generated name: %q %v", made.Name, err)
	}
	err := c.Call(ctx, "agent.create", map[string]any{"name": "x", "named": false, "description": "d"}, nil)
	wantCode(t, err, "invalid_params", "named")
	if err := c.Call(ctx, "agent.create", map[string]any{
		"name": "reader", "named": true, "description": "Reads only", "instructions": "Only read.", "tools": []string{"read_file"},
	}, nil); err != nil {
		t.Fatal(err)
	}

	// The tools list is enforced: the model's shell call does not run.
	id := createSession(t, c, map[string]any{"agent": "reader", "mode": "auto"})
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "run ls"})
	evs := c.Events(id)
	res := await(t, evs, "tool.result", kindIs("tool.result"))
	if p := payloadOf(res); p["ok"] != false || !strings.Contains(fmt.Sprint(p["error"]), "not among agent reader's tools") {
		t.Fatalf("shell under agent reader: %v", p)
	}
	await(t, evs, "turn.done", turnDone(turn))

	err = c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir(), "agent": "ghost"}, nil)
	wantCode(t, err, "not_found", "ghost")
	err = c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "ghost"}, nil)
	wantCode(t, err, "not_found", "ghost")
	if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "reader"}, nil); err != nil {
		t.Fatalf("job.schedule {agent: reader}: %v", err)
	}

	// agent.spawn without sessionId: the caller's one session is the parent.
	var spawned struct {
		AgentID string `json:"agentId"`
	}
	if err := c.Call(ctx, "agent.spawn", map[string]any{"name": "", "task": "hello there"}, &spawned); err != nil {
		t.Fatalf("agent.spawn without sessionId, one session: %v", err)
	}
	sp := await(t, evs, "subagent.spawn", kindIs("subagent.spawn"))
	if payloadOf(sp)["agentId"] != spawned.AgentID {
		t.Fatalf("subagent.spawn on the caller's session: %v", sp)
	}
	await(t, evs, "subagent.done", kindIs("subagent.done"))
	other := compatHello(t, d)
	err = other.Call(ctx, "agent.spawn", map[string]any{"task": "x"}, nil)
	wantCode(t, err, "invalid_params", "sessionId")
	createSession(t, c, nil)
	err = c.Call(ctx, "agent.spawn", map[string]any{"task": "x"}, nil)
	wantCode(t, err, "invalid_params", "2 open sessions")
}

// TestCompatApprovalsAndAllowlist: approval.request's scopeHint is a scope
// and pattern the allowlist pattern; an allow with scope site (or a scope
// the daemon does not know) stays an allow, and so does an answer with a
// field the protocol does not have (snowpea 1.7's "remember");
// permission.allowlist.add infers its subject from the caller's session.
func TestCompatApprovalsAndAllowlist(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	scopes := make(chan string, 2)
	// First an unknown scope (the allow takes effect once, so the next call
	// asks again), then site (a daemon-wide entry).
	scopes <- "galaxy"
	scopes <- "site"
	requests := make(chan map[string]any, 2)
	c.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
		var p map[string]any
		_ = json.Unmarshal(params, &p)
		requests <- p
		return map[string]any{"decision": "allow", "scope": <-scopes, "remember": true}, nil
	}
	wd := t.TempDir()
	id := createSession(t, c, map[string]any{"workdir": wd, "mode": "accept"})
	evs := c.Events(id)
	for i, scope := range []string{"galaxy", "site"} {
		turn := prompt(t, c, map[string]any{"sessionId": id, "text": "run ls"})
		if i == 0 {
			req := <-requests
			if req["scopeHint"] != "project" || req["pattern"] != "shell(ls*)" {
				t.Fatalf("approval.request scopeHint/pattern: %v / %v", req["scopeHint"], req["pattern"])
			}
		}
		res := await(t, evs, "tool.result", kindIs("tool.result"))
		if payloadOf(res)["ok"] != true {
			t.Fatalf("allow with scope %s did not run the tool: %v", scope, payloadOf(res))
		}
		await(t, evs, "turn.done", turnDone(turn))
	}
	var list struct {
		Patterns []map[string]any `json:"patterns"`
	}
	if err := c.Call(ctx, "permission.allowlist.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Patterns) != 1 || list.Patterns[0]["pattern"] != "shell(ls*)" || list.Patterns[0]["scope"] != "always" {
		t.Fatalf("scope site adds a daemon-wide entry: %v", list.Patterns)
	}

	var added struct {
		PatternID string `json:"patternId"`
	}
	if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "read_file"}, &added); err != nil {
		t.Fatalf("allowlist.add without workdir, one session: %v", err)
	}
	if err := c.Call(ctx, "permission.allowlist.list", map[string]any{"scope": "project", "workdir": wd}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Patterns) != 1 || list.Patterns[0]["patternId"] != added.PatternID {
		t.Fatalf("the inferred project entry: %v", list.Patterns)
	}
	if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "write_file", "scope": "session"}, nil); err != nil {
		t.Fatalf("allowlist.add scope session without sessionId: %v", err)
	}
	other := compatHello(t, d)
	err := other.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "read_file"}, nil)
	wantCode(t, err, "invalid_params", "workdir")
}

// TestCompatJobs: natural-language schedules, the default workdir, channel,
// runNow's answer and its refusal of a cancelled job.
func TestCompatJobs(t *testing.T) {
	t.Setenv("TRELLIS_E2E_COMPAT_HOOK", "hook-secret")
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()

	for spec, wantHHMM := range map[string]string{"every day at 9am": "09:00", "weekdays at 18:30": "18:30", "every 15 minutes": ""} {
		var res struct {
			JobID     string  `json:"jobId"`
			NextRunAt *string `json:"nextRunAt"`
		}
		if err := c.Call(ctx, "job.schedule", map[string]any{"spec": spec, "task": "hello"}, &res); err != nil {
			t.Fatalf("job.schedule %q: %v", spec, err)
		}
		if res.NextRunAt == nil {
			t.Fatalf("%q: no nextRunAt", spec)
		}
		if next, err := time.Parse(time.RFC3339Nano, *res.NextRunAt); err != nil || wantHHMM != "" && next.UTC().Format("15:04") != wantHHMM {
			t.Fatalf("%q: nextRunAt %s (%v), want at %s UTC", spec, *res.NextRunAt, err, wantHHMM)
		}
	}
	err := c.Call(ctx, "job.schedule", map[string]any{"spec": "every blursday at 9am", "task": "x"}, nil)
	wantCode(t, err, "invalid_params", "blursday")

	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_COMPAT_HOOK",
		"target": map[string]any{"newSession": map[string]any{"workdir": t.TempDir(), "mode": "plan"}},
	}, &bound); err != nil {
		t.Fatal(err)
	}
	err = c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "x", "channel": "b-nope"}, nil)
	wantCode(t, err, "not_found", "b-nope")
	var job struct {
		JobID string `json:"jobId"`
	}
	if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "say something", "channel": bound.BindingID}, &job); err != nil {
		t.Fatalf("job.schedule {channel}: %v", err)
	}
	var run map[string]any
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": job.JobID}, &run); err != nil {
		t.Fatal(err)
	}
	if run["ok"] != true || run["status"] != "ok" || !strings.HasPrefix(fmt.Sprint(run["sessionId"]), "s-") {
		t.Fatalf("job.runNow answered %v", run)
	}
	// The run's answer was posted to the channel: a gateway.event reply.
	deadline := time.After(60 * time.Second)
	for posted := false; !posted; {
		select {
		case f := <-c.notes:
			if f.Method != "gateway.event" {
				continue
			}
			var ev map[string]any
			_ = json.Unmarshal(f.Params, &ev)
			p, _ := ev["payload"].(map[string]any)
			posted = ev["bindingId"] == bound.BindingID && ev["kind"] == "reply" && p["text"] == "Default from the fixture."
		case <-deadline:
			t.Fatal("the job's answer never reached its channel (gateway.event reply)")
		}
	}

	var list struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := c.Call(ctx, "job.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(filepath.Join(d.Home(), "workspace"))
	cwd, _ := os.Getwd()
	for _, j := range list.Jobs {
		if j["workdir"] != want || j["workdir"] == cwd {
			t.Fatalf("a job without workdir got %v, want the default %s", j["workdir"], want)
		}
	}

	if err := c.Call(ctx, "job.cancel", map[string]any{"jobId": job.JobID}, nil); err != nil {
		t.Fatal(err)
	}
	err = c.Call(ctx, "job.runNow", map[string]any{"jobId": job.JobID}, nil)
	wantCode(t, err, "invalid_params", "cancelled")
}

// TestCompatUnsupported: enum values the protocol names but this daemon
// does not provide answer unsupported naming them, not invalid_params.
// Every documented gateway platform is real now, and binding one would
// reach its vendor's servers, so only the backend is tried (the docker one
// answers from the local engine, or says none answers).
func TestCompatUnsupported(t *testing.T) {
	t.Setenv("TRELLIS_E2E_COMPAT_TOKEN", "x")
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	for _, call := range []struct {
		method string
		params map[string]any
		field  string
		value  string
	}{
		{"backend.set", map[string]any{"sessionId": id, "kind": "docker", "config": map[string]any{"image": "alpine"}}, "kind", "docker"},
	} {
		// Once built (issue 16), the call may succeed or fail for its own
		// reasons; what it must never do is call the value invalid.
		err := c.Call(ctx, call.method, call.params, nil)
		if err != nil && err.StringCode() == "invalid_params" && strings.Contains(err.Message, "not available") {
			t.Fatalf("%s: a missing capability answered invalid_params: %v", call.method, err)
		}
		if err != nil && err.StringCode() == "unsupported" && (err.Data["field"] != call.field || err.Data["value"] != call.value || err.Code != -32000) {
			t.Fatalf("%s: unsupported must name the field and value: %v %v", call.method, err, err.Data)
		}
	}
}

// TestCompatUnknownIDs: a call naming something that does not exist
// answers not_found, as snowpea 1.7 does, where the value itself is well
// formed (a malformed one stays invalid_params).
func TestCompatUnknownIDs(t *testing.T) {
	t.Setenv("TRELLIS_E2E_COMPAT_TOKEN", "x")
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	for _, call := range []struct {
		method string
		params map[string]any
		inMsg  string
	}{
		{"agent.bindChannel", map[string]any{"name": "ghost", "channel": "webhook:default", "credentialsRef": "env:TRELLIS_E2E_COMPAT_TOKEN"}, "ghost"},
		{"gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_COMPAT_TOKEN", "target": map[string]any{"session": "s-none"}}, "s-none"},
		{"provider.configure", map[string]any{"vendor": "gemini", "config": map[string]any{"api_key": "x"}}, "gemini"},
		{"skill.install", map[string]any{"source": filepath.Join(t.TempDir(), "no-such-skill")}, "does not exist"},
		{"approval.list", map[string]any{"sessionId": "s-none"}, "s-none"},
	} {
		err := c.Call(ctx, call.method, call.params, nil)
		if err == nil || err.StringCode() != "not_found" || !strings.Contains(err.Message, call.inMsg) {
			t.Errorf("%s %v: got %v, want not_found naming %q", call.method, call.params, err, call.inMsg)
		}
	}
}

// TestCompatValues (issue 32 item 2): the values and fields of 1.7 that
// were refused — effort max, denyExec, mcp.list {sessionId}, keys of
// provider.configure's config that Trellis does not have — are accepted
// and do what 1.7 does; what is wrong stays invalid_params.
func TestCompatValues(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()

	id := createSession(t, c, map[string]any{"effort": "max"})
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "hello"})
	if end := await(t, c.Events(id), "turn.done", turnDone(turn)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("a session with effort max: %v", end)
	}

	// denyExec: even in mode auto the shell call is denied, unasked.
	wd := t.TempDir()
	denied := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto", "denyExec": true})
	evs := c.Events(denied)
	turn = prompt(t, c, map[string]any{"sessionId": denied, "text": "run ls"})
	res := await(t, evs, "tool.result", kindIs("tool.result"))
	if p := payloadOf(res); p["ok"] != false || !strings.Contains(fmt.Sprint(p["error"]), "denyExec") {
		t.Fatalf("shell in a denyExec session: %v", p)
	}
	await(t, evs, "turn.done", turnDone(turn))
	err := c.Call(ctx, "session.create", map[string]any{"workdir": wd, "denyExec": "yes"}, nil)
	wantCode(t, err, "invalid_params", "denyExec")

	var servers struct {
		Servers []map[string]any `json:"servers"`
	}
	if err := c.Call(ctx, "mcp.list", map[string]any{"sessionId": id}, &servers); err != nil || servers.Servers == nil {
		t.Fatalf("mcp.list {sessionId}: %v %v", servers, err)
	}
	err = c.Call(ctx, "mcp.list", map[string]any{"sessionId": "s-none"}, nil)
	wantCode(t, err, "not_found", "s-none")

	if err := c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{
		"api_key": "sk-compat", "organization": "org-compat", "timeout": 30, "headers": map[string]any{"x": "y"},
	}}, nil); err != nil {
		t.Fatalf("provider.configure with 1.7's other config keys: %v", err)
	}
	err = c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{"api_key": 5, "organization": "o"}}, nil)
	wantCode(t, err, "invalid_params", "config.api_key")
	err = c.Call(ctx, "provider.configure", map[string]any{"vendor": "openai", "config": map[string]any{}, "organization": "o"}, nil)
	wantCode(t, err, "invalid_params", "organization")
}

// TestCompatFixtureSteps (issue 32 item 3): a snowpea fixture whose steps
// are played once (identical prompts take them in turn), with a per-step
// "repeat": true that stays, and the step fields "thinking" and
// "reasoningTokens" (a message.reasoning event, the usage's reasoning
// tokens). The daemon used to refuse to start on it.
func TestCompatFixtureSteps(t *testing.T) {
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, `{
  "steps": [
    {"match": "count", "text": "one"},
    {"match": "count", "text": "two"},
    {"match": "count", "text": "three"},
    {"match": "ping", "text": "pong", "repeat": true},
    {"match": "ping", "text": "never"},
    {"match": "think", "thinking": "Pondering it.", "text": "Thought.", "reasoningTokens": 7}
  ],
  "default": {"text": "Default."}
}`)
	c := compatHello(t, d)
	id := createSession(t, c, nil)
	evs := c.Events(id)
	// answer prompts text and returns the turn's payloads by kind (the last
	// of each kind; message.reasoning's texts joined).
	answer := func(text string) map[string]map[string]any {
		turn := prompt(t, c, map[string]any{"sessionId": id, "text": text})
		got := map[string]map[string]any{}
		reasoning := ""
		await(t, evs, "the turn's end", func(ev map[string]any) bool {
			kind := fmt.Sprint(ev["kind"])
			got[kind] = payloadOf(ev)
			if kind == "message.reasoning" {
				reasoning += fmt.Sprint(payloadOf(ev)["text"])
				got[kind] = map[string]any{"text": reasoning}
			}
			return turnDone(turn)(ev)
		})
		return got
	}
	for _, want := range []string{"one", "two", "three"} {
		if got := answer("count")["message.done"]["text"]; got != want {
			t.Fatalf("identical prompts: got %v, want %q", got, want)
		}
	}
	for range 2 {
		if got := answer("ping")["message.done"]["text"]; got != "pong" {
			t.Fatalf("a step with repeat true: got %v, want pong every time", got)
		}
	}
	got := answer("think")
	if got["message.reasoning"]["text"] != "Pondering it." || got["usage"]["reasoningTokens"] != float64(7) {
		t.Fatalf("thinking / reasoningTokens: reasoning %v, usage %v", got["message.reasoning"], got["usage"])
	}
}

// TestCompatEventShapes (issue 32 item 4): turn.queued carries snowpea
// 1.7's queued (how many prompts wait, this one included) besides
// PROTOCOL.md's position; backend.changed keeps PROTOCOL.md's
// {backend: {kind, ...}} (docs/compat.md says why).
func TestCompatEventShapes(t *testing.T) {
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	evs := c.Events(id)
	slow := prompt(t, c, map[string]any{"sessionId": id, "text": "slow please"})
	await(t, evs, "the slow turn's step", kindIs("step.started"))
	for want := 1; want <= 2; want++ {
		queued := prompt(t, c, map[string]any{"sessionId": id, "text": "hello"})
		q := payloadOf(await(t, evs, "turn.queued", kindIs("turn.queued")))
		if q["turnId"] != queued || q["queued"] != float64(want) || q["position"] != float64(want) {
			t.Fatalf("turn.queued %v: want queued and position %d", q, want)
		}
	}
	if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	await(t, evs, "the slow turn's end", turnDone(slow))

	if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "local"}, nil); err != nil {
		t.Fatal(err)
	}
	b := payloadOf(await(t, evs, "backend.changed", kindIs("backend.changed")))
	if kind, _ := b["backend"].(map[string]any); kind["kind"] != "local" {
		t.Fatalf("backend.changed %v: want PROTOCOL.md's {backend: {kind: local}}", b)
	}
}

// TestCompatGatewayCredentials (issue 32 item 6): snowpea's credentialsRef
// form, a bare name ("telegram"), and the SDK's bindAgentChannel(name,
// "telegram:123") without one, find the bot token where a 1.7 setup keeps
// it (TELEGRAM_BOT_TOKEN here).
func TestCompatGatewayCredentials(t *testing.T) {
	bot := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true,"result":[]}`)) // no updates
	}))
	t.Cleanup(bot.Close)
	t.Setenv(gateway.TelegramAPIEnv, bot.URL)
	t.Setenv("TELEGRAM_BOT_TOKEN", "123:compat-bot-token")
	d := startCompatDaemon(t)
	c := compatHello(t, d)
	ctx := context.Background()
	if err := c.Call(ctx, "agent.create", map[string]any{"name": "helper", "description": "Helps"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "agent.bindChannel", map[string]any{"name": "helper", "channel": "telegram:123"}, nil); err != nil {
		t.Fatalf("bindAgentChannel(helper, telegram:123) without credentialsRef: %v", err)
	}
	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "telegram", "credentialsRef": "telegram", "channelId": "456", "target": map[string]any{"agent": "helper"},
	}, &bound); err != nil {
		t.Fatalf("gateway.bind credentialsRef telegram: %v", err)
	}
	var list struct {
		Bindings []map[string]any `json:"bindings"`
	}
	if err := c.Call(ctx, "gateway.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Bindings) != 2 {
		t.Fatalf("gateway.list: %v", list.Bindings)
	}
	for _, b := range list.Bindings {
		if b["state"] != "active" || strings.Contains(fmt.Sprint(b), "compat-bot-token") {
			t.Fatalf("binding %v: want active, never showing the token", b)
		}
	}
	err := c.Call(ctx, "gateway.bind", map[string]any{
		"platform": "telegram", "credentialsRef": "slackish", "target": map[string]any{"agent": "helper"},
	}, nil)
	wantCode(t, err, "invalid_params", "SLACKISH_BOT_TOKEN")
}

// TestCompatInactiveTool (issue 32 item 7): a call of web_search on a
// daemon with no search provider reaches the client as the seed's
// search_provider_unavailable (an error event, as PROTOCOL.md has the
// codes of a turn arrive), besides the failed tool.result the model reads.
func TestCompatInactiveTool(t *testing.T) {
	t.Setenv("TRELLIS_SEARCH_PROVIDER", "")
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, `{"steps":[
  {"match": "search", "tool_calls": [{"name": "web_search", "arguments": {"query": "snowpea"}}]},
  {"after_tool": "web_search", "text": "No search."}
]}`)
	c := compatHello(t, d)
	id := createSession(t, c, map[string]any{"mode": "auto"})
	evs := c.Events(id)
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "search the web"})
	e := payloadOf(await(t, evs, "the error event", kindIs("error")))
	if e["code"] != "search_provider_unavailable" || !strings.Contains(fmt.Sprint(e["message"]), "web_search") {
		t.Fatalf("error event %v: want search_provider_unavailable naming web_search", e)
	}
	if r := payloadOf(await(t, evs, "tool.result", kindIs("tool.result"))); r["ok"] != false || r["error"] != e["message"] {
		t.Fatalf("tool.result %v after the error event %v", r, e)
	}
	if end := await(t, evs, "turn.done", turnDone(turn)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("the turn goes on after an inactive tool: %v", end)
	}
}
