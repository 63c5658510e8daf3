package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

const script = `{"steps":[
 {"match":"part one","tool_calls":[{"name":"write_file","arguments":{"path":"one.txt","content":"1"}}]},
 {"match":"part two","tool_calls":[{"name":"write_file","arguments":{"path":"two.txt","content":"2"}}]},
 {"match":"clash one","tool_calls":[{"name":"write_file","arguments":{"path":"same.txt","content":"1"}}]},
 {"match":"clash two","tool_calls":[{"name":"write_file","arguments":{"path":"same.txt","content":"2"}}]},
 {"after_tool":"write_file","text":"Wrote it."},
 {"match":"tidy job","text":"Here: [\"part one\", \"part two\", \"part three\"]"},
 {"match":"conflicting job","text":"[\"clash one\",\"clash two\"]"},
 {"match":"please delegate","text":"Delegating.","tool_calls":[{"name":"delegate_task","arguments":{"task":"hello from the parent"}}]},
 {"after_tool":"delegate_task","text":"The sub-agent answered."},
 {"match":"hello","text":"Hi there, nice to meet you.","usage":{"input":10,"output":5}},
 {"match":"slow","text":"slowly","delaySec":60},
 {"match":"lazy job","text":"[\"slow a\",\"slow b\"]"},
 {"default":true,"text":"default answer"}
],"repeat":true}`

type providers struct{ p llm.Provider }

func (p providers) Open(string) (llm.Provider, error) { return p.p, nil }
func (p providers) Default() string                   { return "fake" }

// hook gives the session service and the tool the agents service, built
// after them (as the daemon does).
type hook struct{ a **agents.Service }

func (h hook) DelegateTask(ctx context.Context, parentID, name, task string) (string, bool, error) {
	return (*h.a).DelegateTask(ctx, parentID, name, task)
}
func (h hook) InterruptChildren(ctx context.Context, parentID string) {
	(*h.a).InterruptChildren(ctx, parentID)
}

type harness struct {
	st       store.Store
	log      *eventlog.Log
	sessions *session.Service
	agents   *agents.Service
	home     string
}

func newHarness(t *testing.T, maxRunning int) *harness {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{st: st, log: eventlog.New(st), home: home}
	hk := hook{&h.agents}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(tool.NewDelegateTask(hk)); err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	h.sessions, err = session.NewService(context.Background(), session.Deps{
		Store: st, Events: h.log, Providers: providers{fake.New(sc)},
		Toolbox: toolbox.New(reg, filepath.Join(home, "out"), nil, nil), Log: discard, Subagents: hk,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.agents = agents.New(h.sessions, h.log, agents.Options{Home: home, Workdir: t.TempDir(), MaxRunning: maxRunning, Log: discard,
		Providers: providers{fake.New(sc)}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.agents.Shutdown(ctx)
		h.sessions.Shutdown(ctx)
		h.log.Close()
		h.st.Close()
	})
	return h
}

func (h *harness) parent(t *testing.T, mode string) string {
	t.Helper()
	return h.parentIn(t, mode, t.TempDir())
}

func (h *harness) parentIn(t *testing.T, mode, dir string) string {
	t.Helper()
	id, err := h.sessions.Create(context.Background(), session.CreateParams{Workdir: dir, Mode: mode, Origin: "conn-1"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitKind reads a session's events until the n-th of kind and returns
// every event read.
func (h *harness) waitKind(t *testing.T, id, kind string, n int) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sub, err := h.log.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var out []store.Event
	seen := 0
	for it := range sub.Items() {
		if it.Event == nil {
			continue
		}
		out = append(out, *it.Event)
		if it.Event.Kind == kind {
			if seen++; seen == n {
				return out
			}
		}
	}
	t.Fatalf("no %d×%s on %s; got %v", n, kind, id, kinds(out))
	return nil
}

func kinds(evs []store.Event) []string {
	var k []string
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return k
}

func only(evs []store.Event, prefix string) []store.Event {
	var out []store.Event
	for _, e := range evs {
		if strings.HasPrefix(e.Kind, prefix) {
			out = append(out, e)
		}
	}
	return out
}

func payload(t *testing.T, e store.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSpawnReportsOnParent(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	if _, err := h.agents.Definitions().Create(agents.Definition{Name: "greeter", Description: "Greets", Instructions: "You greet people.", Model: "m-greet"}); err != nil {
		t.Fatal(err)
	}
	parent := h.parent(t, "auto")
	id, err := h.agents.Spawn(ctx, agents.SpawnParams{Name: "greeter", Task: "say hello", ParentSessionID: parent})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "a-") {
		t.Fatalf("agent id %q", id)
	}
	evs := only(h.waitKind(t, parent, eventkind.SubagentDone, 1), "subagent.")
	if got := kinds(evs); strings.Join(got, ",") != "subagent.spawn,subagent.update,subagent.update,subagent.done" {
		t.Fatalf("events %v", got)
	}
	spawn, running, last, done := payload(t, evs[0]), payload(t, evs[1]), payload(t, evs[2]), payload(t, evs[3])
	if spawn["agentId"] != id || spawn["name"] != "greeter" || spawn["task"] != "say hello" || spawn["status"] != "queued" {
		t.Fatalf("spawn %v", spawn)
	}
	if running["status"] != "running" || last["status"] != "done" || last["text"] != "Hi there, nice to meet you." {
		t.Fatalf("updates %v %v", running, last)
	}
	if done["ok"] != true || done["status"] != "done" || done["summary"] != "Hi there, nice to meet you." || done["sessionId"] != spawn["sessionId"] {
		t.Fatalf("done %v", done)
	}
	if u := done["usage"].(map[string]any); u["inputTokens"] != 10.0 || u["outputTokens"] != 5.0 {
		t.Fatalf("usage %v", u)
	}

	childID := spawn["sessionId"].(string)
	child, err := h.sessions.Get(ctx, childID)
	if err != nil {
		t.Fatal(err)
	}
	par, _ := h.sessions.Get(ctx, parent)
	r := child.Row
	if r.Kind != store.KindSubagent || r.ParentSessionID != parent || r.Agent != "greeter" || r.Mode != "auto" || r.Workdir != par.Row.Workdir || r.Model != "m-greet" {
		t.Fatalf("child row %+v", r)
	}
	user := only(h.waitKind(t, childID, "turn.done", 1), "message.user")
	if text := payload(t, user[0])["text"]; text != "You greet people.\n\nsay hello" {
		t.Fatalf("child prompt %q", text)
	}
	list, err := h.agents.List(ctx)
	if err != nil || len(list) != 1 || list[0].Kind != "definition" {
		t.Fatalf("list after the end %+v, %v", list, err)
	}
}

func TestSpawnRejects(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	parent := h.parent(t, "auto")
	id, err := h.agents.Spawn(ctx, agents.SpawnParams{Task: "hello", ParentSessionID: parent})
	if err != nil {
		t.Fatal(err)
	}
	done := payload(t, only(h.waitKind(t, parent, eventkind.SubagentDone, 1), eventkind.SubagentSpawn)[0])
	for _, tc := range []struct {
		name string
		p    agents.SpawnParams
		code string
		is   error
	}{
		{"no task", agents.SpawnParams{ParentSessionID: parent}, errcode.InvalidParams, nil},
		{"unknown agent", agents.SpawnParams{Name: "nobody", Task: "x", ParentSessionID: parent}, errcode.NotFound, agents.ErrNotFound},
		{"bad agent name", agents.SpawnParams{Name: "No!", Task: "x", ParentSessionID: parent}, errcode.InvalidParams, agents.ErrInvalidName},
		{"unknown parent", agents.SpawnParams{Task: "x", ParentSessionID: "s-nope"}, errcode.NotFound, nil},
		{"nested", agents.SpawnParams{Task: "x", ParentSessionID: done["sessionId"].(string)}, errcode.InvalidParams, agents.ErrNested},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.agents.Spawn(ctx, tc.p)
			if errs.CodeOf(err) != tc.code || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("err %v (code %q), want %s / %v", err, errs.CodeOf(err), tc.code, tc.is)
			}
		})
	}
	_ = id
}

func TestSpawnWithoutParent(t *testing.T) {
	h := newHarness(t, 0)
	id, err := h.agents.Spawn(context.Background(), agents.SpawnParams{Task: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.agents.Wait(context.Background(), id)
	if errors.Is(err, agents.ErrNotFound) {
		return // it already ended
	}
	if err != nil || !res.OK || res.Summary != "Hi there, nice to meet you." || res.Name != agents.DefaultName {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// A limit of one runs children one after another; interrupting the parent
// ends the queued child at once and interrupts the running one.
func TestQueueAndInterruptParent(t *testing.T) {
	h := newHarness(t, 1)
	ctx := context.Background()
	parent := h.parent(t, "auto")
	first, err := h.agents.Spawn(ctx, agents.SpawnParams{Task: "slow one", ParentSessionID: parent})
	if err != nil {
		t.Fatal(err)
	}
	second, err := h.agents.Spawn(ctx, agents.SpawnParams{Task: "slow two", ParentSessionID: parent})
	if err != nil {
		t.Fatal(err)
	}
	h.waitKind(t, parent, eventkind.SubagentUpdate, 1) // the first is running
	list, err := h.agents.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, e := range list {
		if e.Kind == "subagent" && e.ParentSessionID == parent {
			status[e.AgentID] = e.Status
		}
	}
	if status[first] != "running" || status[second] != "queued" {
		t.Fatalf("statuses %v (first %s, second %s)", status, first, second)
	}
	if err := h.sessions.Interrupt(ctx, parent); err != nil {
		t.Fatal(err)
	}
	evs := only(h.waitKind(t, parent, eventkind.SubagentDone, 2), eventkind.SubagentDone)
	got := map[string]string{}
	for _, e := range evs {
		p := payload(t, e)
		if p["ok"] != false {
			t.Fatalf("interrupted child ok: %v", p)
		}
		got[p["agentId"].(string)] = p["status"].(string)
	}
	if got[first] != "interrupted" || got[second] != "interrupted" {
		t.Fatalf("done statuses %v", got)
	}
	if list, _ := h.agents.List(ctx); len(list) != 0 {
		t.Fatalf("children left: %+v", list)
	}
}

func TestDelegateTaskTool(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	parent := h.parent(t, "auto")
	if _, err := h.sessions.Prompt(ctx, parent, "please delegate", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, parent, "turn.done", 1)
	var result, done map[string]any
	for _, e := range evs {
		switch e.Kind {
		case "tool.result":
			result = payload(t, e)
		case eventkind.SubagentDone:
			done = payload(t, e)
		}
	}
	if result == nil || result["ok"] != true || result["output"] != "Hi there, nice to meet you." {
		t.Fatalf("tool.result %v; events %v", result, kinds(evs))
	}
	if done == nil || done["ok"] != true {
		t.Fatalf("subagent.done %v", done)
	}
	if last := payload(t, evs[len(evs)-1]); last["reason"] != "complete" {
		t.Fatalf("turn.done %v", last)
	}
}

func TestDelegateCommand(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	parent := h.parent(t, "accept")
	if _, err := h.sessions.Prompt(ctx, parent, "/delegate hello there", nil, ""); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, parent, "turn.done", 1)
	var answer string
	for _, e := range evs {
		if e.Kind == "message.done" {
			answer = payload(t, e)["text"].(string)
		}
	}
	if answer != "Hi there, nice to meet you." {
		t.Fatalf("answer %q; events %v", answer, kinds(evs))
	}
	if len(only(evs, eventkind.SubagentDone)) != 1 {
		t.Fatalf("no subagent.done: %v", kinds(evs))
	}
}

// Interrupting a turn that waits in /delegate stops the child too, and the
// turn ends interrupted.
func TestInterruptDelegatingTurn(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	parent := h.parent(t, "accept")
	if _, err := h.sessions.Prompt(ctx, parent, "/delegate slow work", nil, ""); err != nil {
		t.Fatal(err)
	}
	h.waitKind(t, parent, eventkind.SubagentUpdate, 1)
	if err := h.sessions.Interrupt(ctx, parent); err != nil {
		t.Fatal(err)
	}
	evs := h.waitKind(t, parent, "turn.done", 1)
	if r := payload(t, evs[len(evs)-1])["reason"]; r != "interrupted" {
		t.Fatalf("turn.done reason %v; events %v", r, kinds(evs))
	}
	done := payload(t, only(h.waitKind(t, parent, eventkind.SubagentDone, 1), eventkind.SubagentDone)[0])
	if done["status"] != "interrupted" {
		t.Fatalf("child %v", done)
	}
}
