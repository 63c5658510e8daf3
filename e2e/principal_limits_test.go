package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServicePrincipalLimits: a service principal limited to agent a1 and
// workdir prefix P creates sessions and schedules jobs with a1 under P,
// and nothing else, over the WebSocket and gRPC alike: another agent, the
// default agent, a workdir outside P, P's sibling P+"x", and a symbolic
// link under P leading outside are forbidden, naming the allowed list. A
// job made within the limits stops running once the limits no longer
// allow it; its sessions' sub-agents are held to them too. Bad limits are invalid_params and store nothing.
func TestServicePrincipalLimits(t *testing.T) {
	d := startDaemon(t)
	admin := helloWS(t, d)
	ctx := context.Background()
	for _, name := range []string{"a1", "a2"} {
		if err := admin.Call(ctx, "agent.create", map[string]any{"name": name, "description": "test agent " + name}, nil); err != nil {
			t.Fatalf("agent.create %s: %v", name, err)
		}
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "srv", "p")
	inside, sibling, outside := filepath.Join(p, "work"), p+"x", filepath.Join(root, "outside")
	for _, dir := range []string{inside, sibling, outside} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	escape := filepath.Join(p, "escape")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}

	// Bad limits change nothing.
	count := func() int {
		var r struct {
			Principals []struct{ Name string } `json:"principals"`
		}
		if err := admin.Call(ctx, "principal.list", map[string]any{}, &r); err != nil {
			t.Fatal(err)
		}
		return len(r.Principals)
	}
	before := count()
	for _, params := range []map[string]any{
		{"name": "bad", "role": "member", "kind": "service", "workdirs": []string{"srv/p"}},
		{"name": "bad", "role": "member", "kind": "service", "agents": []string{""}},
		{"name": "bad", "role": "member", "kind": "service", "agents": []string{"Not An Agent"}},
		{"name": "bad", "role": "member", "agents": []string{"a1"}}, // a human
	} {
		if e := admin.Call(ctx, "principal.create", params, nil); codeOf(e) != "invalid_params" {
			t.Errorf("principal.create %v: %v, want invalid_params", params, e)
		}
	}
	if n := count(); n != before {
		t.Fatalf("refused creates stored principals: %d, want %d", n, before)
	}

	var made struct {
		Principal struct {
			PrincipalID string   `json:"principalId"`
			Agents      []string `json:"agents"`
			Workdirs    []string `json:"workdirs"`
		} `json:"principal"`
	}
	if err := admin.Call(ctx, "principal.create", map[string]any{
		"name": "ci", "role": "member", "kind": "service", "agents": []string{"a1"}, "workdirs": []string{p + "/"},
	}, &made); err != nil {
		t.Fatalf("principal.create ci: %v", err)
	}
	if fmt.Sprint(made.Principal.Agents) != "[a1]" || fmt.Sprint(made.Principal.Workdirs) != "["+p+"]" {
		t.Fatalf("principal.create answered limits %v %v, want [a1] [%s]", made.Principal.Agents, made.Principal.Workdirs, p)
	}
	ciID := made.Principal.PrincipalID
	for _, params := range []map[string]any{
		{"principalId": ciID, "workdirs": []string{"relative"}},
		{"principalId": ciID, "agents": []string{"a1"}, "clearAgents": true},
	} {
		if e := admin.Call(ctx, "principal.update", params, nil); codeOf(e) != "invalid_params" {
			t.Errorf("principal.update %v: %v, want invalid_params", params, e)
		}
	}
	var k struct {
		Secret string `json:"secret"`
	}
	if err := admin.Call(ctx, "key.create", map[string]any{"principalId": ciID}, &k); err != nil {
		t.Fatal(err)
	}

	ws, _ := helloWSKey(t, d, k.Secret)
	transports := map[string]client{"ws": ws, "grpc": dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), k.Secret)}
	var okJob string
	for name, c := range transports {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				method  string
				params  map[string]any
				want    string
				mention string
			}{
				{"session.create", map[string]any{"agent": "a1", "workdir": inside}, "", ""},
				{"session.create", map[string]any{"agent": "a1", "workdir": p}, "", ""},
				{"session.create", map[string]any{"agent": "a2", "workdir": inside}, "forbidden", `only the agents a1, not "a2"`},
				{"session.create", map[string]any{"workdir": inside}, "forbidden", `not "default"`},
				{"session.create", map[string]any{"agent": "a1", "workdir": outside}, "forbidden", "only the workdirs " + p},
				{"session.create", map[string]any{"agent": "a1", "workdir": sibling}, "forbidden", "not " + sibling},
				{"session.create", map[string]any{"agent": "a1", "workdir": escape}, "forbidden", "not " + outside},
				{"session.create", map[string]any{"agent": "a1", "workdir": filepath.Join(inside, "..", "..", "px")}, "forbidden", "not " + sibling},
				{"job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "a1", "workdir": outside}, "forbidden", "only the workdirs " + p},
				{"job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "a2", "workdir": inside}, "forbidden", `not "a2"`},
				{"job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "a1", "workdir": escape}, "forbidden", "not " + outside},
				{"job.schedule", map[string]any{"spec": "@daily", "task": "x", "agent": "a1", "workdir": inside}, "", ""},
			} {
				var r struct {
					JobID string `json:"jobId"`
				}
				e := c.Call(ctx, tc.method, tc.params, &r)
				if codeOf(e) != tc.want || (e != nil && !strings.Contains(e.Message, tc.mention)) {
					t.Errorf("%s %v: %v, want %q mentioning %q", tc.method, tc.params, e, tc.want, tc.mention)
				}
				if r.JobID != "" {
					okJob = r.JobID
				}
			}
		})
	}

	// A sub-agent of its session runs as the session's owner, within its
	// limits: another agent, or the default one, is refused.
	parent := createSession(t, ws, map[string]any{"agent": "a1", "workdir": inside})
	for _, name := range []string{"a2", ""} {
		e := ws.Call(ctx, "agent.spawn", map[string]any{"sessionId": parent, "name": name, "task": "x"}, nil)
		if codeOf(e) != "forbidden" || !strings.Contains(e.Message, "only the agents a1") {
			t.Errorf("agent.spawn %q from a limited session: %v, want forbidden", name, e)
		}
	}

	// The limits are read again at each run: narrowed, the job's next run
	// is refused, and the refusal names the job's agent.
	if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": ciID, "agents": []string{"a2"}}, nil); err != nil {
		t.Fatalf("principal.update: %v", err)
	}
	if e := ws.Call(ctx, "job.runNow", map[string]any{"jobId": okJob}, nil); codeOf(e) != "forbidden" || !strings.Contains(e.Message, `not "a1"`) {
		t.Fatalf("job.runNow after the limits changed: %v, want forbidden", e)
	}
	// Cleared, anything goes again.
	if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": ciID, "clearAgents": true, "clearWorkdirs": true}, nil); err != nil {
		t.Fatalf("principal.update clear: %v", err)
	}
	createSession(t, ws, map[string]any{"agent": "a2", "workdir": outside})

	// A limited operator's gateway bindings: the agent target runs in the
	// daemon's working directory, a newSession target (the default agent)
	// in its workdir.
	if err := admin.Call(ctx, "principal.create", map[string]any{
		"name": "ops", "role": "operator", "kind": "service", "agents": []string{"a1", "default"}, "workdirs": []string{p},
	}, &made); err != nil {
		t.Fatalf("principal.create ops: %v", err)
	}
	if err := admin.Call(ctx, "key.create", map[string]any{"principalId": made.Principal.PrincipalID}, &k); err != nil {
		t.Fatal(err)
	}
	ops := dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), k.Secret)
	for _, tc := range []struct {
		method string
		params map[string]any
	}{
		{"gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_NONE",
			"target": map[string]any{"newSession": map[string]any{"workdir": outside}}}},
		{"gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_NONE",
			"target": map[string]any{"agent": "a2"}}},
		{"gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_NONE",
			"target": map[string]any{"agent": "a1"}}}, // the daemon's working directory is outside p
		{"agent.bindChannel", map[string]any{"name": "a2", "channel": "webhook:default", "credentialsRef": "env:TRELLIS_E2E_NONE"}},
	} {
		if e := ops.Call(ctx, tc.method, tc.params, nil); codeOf(e) != "forbidden" {
			t.Errorf("%s %v: %v, want forbidden", tc.method, tc.params, e)
		}
	}
	// Within the limits, the bind gets as far as its (missing) credential.
	if e := ops.Call(ctx, "gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_NONE",
		"target": map[string]any{"newSession": map[string]any{"workdir": inside}}}, nil); codeOf(e) != "invalid_params" || !strings.Contains(e.Message, "TRELLIS_E2E_NONE") {
		t.Errorf("gateway.bind within the limits: %v, want invalid_params naming the credential", e)
	}
	// With one, it binds and answers; once the limits leave its workdir
	// out, a new conversation's session is refused.
	t.Setenv("TRELLIS_E2E_SVC_HOOK", webhookSecret)
	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if e := ops.Call(ctx, "gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "env:TRELLIS_E2E_SVC_HOOK",
		"target": map[string]any{"newSession": map[string]any{"workdir": inside}}}, &bound); e != nil {
		t.Fatalf("gateway.bind within the limits: %v", e)
	}
	if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true}); code != 200 {
		t.Fatalf("a conversation within the limits: %d %s", code, body)
	}
	if err := admin.Call(ctx, "principal.update", map[string]any{"principalId": made.Principal.PrincipalID, "workdirs": []string{sibling}}, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u2", "wait": true}); code == 200 || !strings.Contains(string(body), "only the workdirs "+sibling) {
		t.Fatalf("a new conversation outside the limits: %d %s, want refused naming the workdirs", code, body)
	}
}
