package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// agentsScript is the fake model of the sub-agent tests: "please delegate"
// makes the model call delegate_task, whose sub-agent answers "hello".
const agentsScript = `{"steps":[
 {"match":"please delegate","text":"Delegating.","tool_calls":[{"name":"delegate_task","arguments":{"task":"hello from the parent"}}]},
 {"after_tool":"delegate_task","text":"The sub-agent is done."},
 {"match":"hello","text":"Hello from the sub-agent.","usage":{"input":12,"output":4}},
 {"default":true,"text":"Default answer."}
],"repeat":true}`

// startAgentsDaemon runs a daemon in this process whose model plays agentsScript.
func startAgentsDaemon(t *testing.T) *daemon.Daemon {
	t.Helper()
	home := t.TempDir()
	path := filepath.Join(home, "agents-script.json")
	if err := os.WriteFile(path, []byte(agentsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func eachAgentsTransport(t *testing.T, test func(t *testing.T, d *daemon.Daemon, c client)) {
	for name, dial := range transports() {
		t.Run(name, func(t *testing.T) {
			d := startAgentsDaemon(t)
			test(t, d, dial(t, d))
		})
	}
}

type agentRow struct {
	Name            string   `json:"name"`
	Description     string   `json:"description"`
	Kind            string   `json:"kind"`
	Source          string   `json:"source"`
	Path            *string  `json:"path"`
	AgentID         *string  `json:"agentId"`
	Channels        []string `json:"channels"`
	ParentSessionID *string  `json:"parentSessionId"`
}

func listAgents(t *testing.T, c client) []agentRow {
	t.Helper()
	var res struct {
		Agents []agentRow `json:"agents"`
	}
	if err := c.Call(context.Background(), "agent.list", map[string]any{}, &res); err != nil {
		t.Fatalf("agent.list: %v", err)
	}
	return res.Agents
}

func TestAgentDefinitions(t *testing.T) {
	eachAgentsTransport(t, func(t *testing.T, d *daemon.Daemon, c client) {
		ctx := context.Background()
		if got := listAgents(t, c); len(got) != 0 {
			t.Fatalf("fresh home lists %+v", got)
		}
		var created struct{ Name, Path string }
		if err := c.Call(ctx, "agent.create", map[string]any{"name": "reviewer", "description": "Reviews diffs",
			"instructions": "Review carefully.", "tools": []string{"read_file"}, "model": "m-1"}, &created); err != nil {
			t.Fatalf("agent.create: %v", err)
		}
		if created.Name != "reviewer" || filepath.Base(created.Path) != "reviewer.md" {
			t.Fatalf("created %+v", created)
		}
		body, err := os.ReadFile(created.Path)
		if err != nil || !strings.Contains(string(body), "Review carefully.") || !strings.Contains(string(body), `description: "Reviews diffs"`) {
			t.Fatalf("file %q, %v", body, err)
		}
		rows := listAgents(t, c)
		if len(rows) != 1 || rows[0].Kind != "definition" || rows[0].Source != "home" || rows[0].Path == nil ||
			*rows[0].Path != created.Path || rows[0].AgentID != nil || rows[0].Channels == nil {
			t.Fatalf("list %+v", rows)
		}
		for _, tc := range []struct {
			method string
			params map[string]any
			code   string
		}{
			{"agent.create", map[string]any{"name": "reviewer", "description": "again"}, "invalid_params"},
			{"agent.create", map[string]any{"name": "Bad Name", "description": "x"}, "invalid_params"},
			{"agent.delete", map[string]any{"name": "nobody"}, "not_found"},
			{"agent.spawn", map[string]any{"name": "nobody", "task": "x"}, "not_found"},
			{"agent.spawn", map[string]any{"task": "x", "sessionId": "s-0000000000000000"}, "not_found"},
			{"team.status", map[string]any{}, "not_found"},
			{"team.start", map[string]any{"sessionId": "s-0000000000000000", "n": 2, "task": "x"}, "not_found"},
		} {
			if err := c.Call(ctx, tc.method, tc.params, nil); !err.HasCode(tc.code) {
				t.Fatalf("%s %v: %v, want %s", tc.method, tc.params, err, tc.code)
			}
		}
		if err := c.Call(ctx, "agent.delete", map[string]any{"name": "reviewer"}, nil); err != nil {
			t.Fatalf("agent.delete: %v", err)
		}
		if got := listAgents(t, c); len(got) != 0 {
			t.Fatalf("after delete %+v", got)
		}
	})
}

func TestAgentSpawnReportsOnParent(t *testing.T) {
	eachAgentsTransport(t, func(t *testing.T, d *daemon.Daemon, c client) {
		ctx := context.Background()
		parent := createSession(t, c, nil)
		var res struct {
			AgentID string `json:"agentId"`
		}
		if err := c.Call(ctx, "agent.spawn", map[string]any{"name": "", "task": "say hello", "sessionId": parent}, &res); err != nil {
			t.Fatalf("agent.spawn: %v", err)
		}
		if !strings.HasPrefix(res.AgentID, "a-") {
			t.Fatalf("agentId %q", res.AgentID)
		}
		evs := collect(t, c.Events(parent), "subagent.done", 1)
		if got := strings.Join(eventKinds(evs), ","); got != "subagent.spawn,subagent.update,subagent.update,subagent.done" {
			t.Fatalf("events %s", got)
		}
		spawn, done := payloadOf(evs[0]), payloadOf(evs[3])
		if spawn["agentId"] != res.AgentID || spawn["status"] != "queued" || spawn["task"] != "say hello" {
			t.Fatalf("subagent.spawn %v", spawn)
		}
		if done["ok"] != true || done["status"] != "done" || done["summary"] != "Hello from the sub-agent." ||
			done["sessionId"] != spawn["sessionId"] || done["agentId"] != res.AgentID {
			t.Fatalf("subagent.done %v", done)
		}
		if u, _ := done["usage"].(map[string]any); u["inputTokens"] != 12.0 || u["outputTokens"] != 4.0 {
			t.Fatalf("usage %v", done["usage"])
		}
		var sessions struct {
			Sessions []struct {
				SessionID       string  `json:"sessionId"`
				Kind            string  `json:"kind"`
				ParentSessionID *string `json:"parentSessionId"`
			} `json:"sessions"`
		}
		if err := c.Call(ctx, "session.list", map[string]any{}, &sessions); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range sessions.Sessions {
			if s.SessionID == spawn["sessionId"] {
				found = s.Kind == "subagent" && s.ParentSessionID != nil && *s.ParentSessionID == parent
			}
		}
		if !found {
			t.Fatalf("child session not listed as a subagent of %s: %+v", parent, sessions.Sessions)
		}
	})
}

func TestDelegateTaskTool(t *testing.T) {
	eachAgentsTransport(t, func(t *testing.T, d *daemon.Daemon, c client) {
		ctx := context.Background()
		parent := createSession(t, c, map[string]any{"mode": "auto"})
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": parent, "text": "please delegate"}, nil); err != nil {
			t.Fatal(err)
		}
		evs := collect(t, c.Events(parent), "turn.done", 1)
		var result, done map[string]any
		for _, ev := range evs {
			switch ev["kind"] {
			case "tool.result":
				result = payloadOf(ev)
			case "subagent.done":
				done = payloadOf(ev)
			}
		}
		if result["name"] != "delegate_task" || result["ok"] != true || result["output"] != "Hello from the sub-agent." {
			t.Fatalf("tool.result %v; events %v", result, eventKinds(evs))
		}
		if done["ok"] != true || done["summary"] != "Hello from the sub-agent." {
			t.Fatalf("subagent.done %v", done)
		}
		if last := payloadOf(evs[len(evs)-1]); last["reason"] != "complete" {
			t.Fatalf("turn.done %v", last)
		}
		var tools struct {
			Tools []struct{ Name, PermissionTag, State string } `json:"tools"`
		}
		if err := c.Call(ctx, "tool.list", map[string]any{}, &tools); err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, tl := range tools.Tools {
			ok = ok || (tl.Name == "delegate_task" && tl.PermissionTag == "delegate" && tl.State == "active")
		}
		if !ok {
			t.Fatalf("delegate_task not listed active with tag delegate: %+v", tools.Tools)
		}
	})
}

func TestTeamStartAndStatus(t *testing.T) {
	eachAgentsTransport(t, func(t *testing.T, d *daemon.Daemon, c client) {
		ctx := context.Background()
		parent := createSession(t, c, map[string]any{"mode": "auto"})
		var res struct {
			TeamID string `json:"teamId"`
		}
		// The model's answer to the split request is not a list: one subtask.
		if err := c.Call(ctx, "team.start", map[string]any{"sessionId": parent, "n": 2, "task": "say hello"}, &res); err != nil {
			t.Fatalf("team.start: %v", err)
		}
		evs := collect(t, c.Events(parent), "team.task.update", 3)
		var ups []map[string]any
		for _, ev := range evs {
			if ev["kind"] == "team.task.update" {
				ups = append(ups, payloadOf(ev))
			}
		}
		if ups[0]["teamId"] != res.TeamID || ups[0]["status"] != "queued" || ups[0]["assignee"] != nil || ups[2]["status"] != "done" {
			t.Fatalf("team.task.update %v", ups)
		}
		var st struct {
			TeamID string `json:"teamId"`
			State  string `json:"state"`
			Task   string `json:"task"`
			Tasks  []struct {
				TaskID   string  `json:"taskId"`
				Status   string  `json:"status"`
				Assignee *string `json:"assignee"`
				Retries  int     `json:"retries"`
			} `json:"tasks"`
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := c.Call(ctx, "team.status", map[string]any{}, &st); err != nil {
				t.Fatalf("team.status: %v", err)
			}
			if st.State != "running" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.TeamID != res.TeamID || st.State != "done" || st.Task != "say hello" || len(st.Tasks) != 1 ||
			st.Tasks[0].Status != "done" || st.Tasks[0].Assignee == nil {
			t.Fatalf("team.status %+v", st)
		}
	})
}
