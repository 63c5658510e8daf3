package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
)

// TestJobsAndConversationsManagedByDefault: a job scheduled without a
// workdir runs each time in a managed workdir of its own under the
// daemon's --workspace-root, as does the session of a gateway conversation
// whose target names no workdir (an agent target, a newSession target with
// an empty workdir); a job or newSession target naming its workdir stays
// unmanaged there.
func TestJobsAndConversationsManagedByDefault(t *testing.T) {
	home, root := t.TempDir(), t.TempDir()
	writeWebhookSecret(t, home)
	d := startDaemonHome(t, home, daemon.Config{WorkspaceRoot: root})
	c := dialGRPC(t, d)
	ctx := context.Background()
	managedIn := func(what, id string) {
		t.Helper()
		got := listedAll(t, c, id)
		if got["workspace"] != "managed" || got["workdir"] != filepath.Join(realPath(t, root), id) {
			t.Fatalf("%s: session %s has workspace %v, workdir %v; want managed in %s", what, id, got["workspace"], got["workdir"], root)
		}
	}
	unmanagedIn := func(what, id, dir string) {
		t.Helper()
		got := listedAll(t, c, id)
		if got["workspace"] != "unmanaged" || got["workdir"] != realPath(t, dir) {
			t.Fatalf("%s: session %s has workspace %v, workdir %v; want unmanaged in %s", what, id, got["workspace"], got["workdir"], dir)
		}
	}

	// Jobs.
	runNow := func(params map[string]any) string {
		t.Helper()
		var sched struct {
			JobID string `json:"jobId"`
		}
		if err := c.Call(ctx, "job.schedule", params, &sched); err != nil {
			t.Fatalf("job.schedule %v: %v", params, err)
		}
		var run struct {
			SessionID string `json:"sessionId"`
			Status    string `json:"status"`
		}
		if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": sched.JobID}, &run); err != nil || run.Status != "ok" {
			t.Fatalf("job.runNow: %+v %v", run, err)
		}
		return run.SessionID
	}
	first := runNow(map[string]any{"spec": "@daily", "task": "hello"})
	managedIn("a job without a workdir", first)
	if again := runNow(map[string]any{"spec": "@daily", "task": "hello"}); again == first {
		t.Fatal("two runs share a session")
	} else {
		managedIn("another run", again)
	}
	jobDir := t.TempDir()
	unmanagedIn("a job with a workdir", runNow(map[string]any{"spec": "@daily", "task": "hello", "workdir": jobDir}), jobDir)

	// Gateway conversations: each binding's first message makes its
	// session, the one session.list did not show before.
	if err := c.Call(ctx, "agent.create", map[string]any{"name": "reviewer", "description": "reviews"}, nil); err != nil {
		t.Fatal(err)
	}
	convDir := t.TempDir()
	for _, tc := range []struct {
		what   string
		target map[string]any
		dir    string // "" = managed
	}{
		{"an agent target", map[string]any{"agent": "reviewer"}, ""},
		{"a newSession target without a workdir", map[string]any{"newSession": map[string]any{"workdir": "", "mode": "plan"}}, ""},
		{"a newSession target with a workdir", map[string]any{"newSession": map[string]any{"workdir": convDir, "mode": "plan"}}, convDir},
	} {
		var bound struct {
			BindingID string `json:"bindingId"`
		}
		if err := c.Call(ctx, "gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "secret:hook", "target": tc.target}, &bound); err != nil {
			t.Fatalf("%s: gateway.bind: %v", tc.what, err)
		}
		before := allSessions(t, c)
		if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": "hello", "userId": "u1", "wait": true}); code != http.StatusOK || !strings.Contains(string(body), "Hello from the scripted model") {
			t.Fatalf("%s: post: %d %s", tc.what, code, body)
		}
		var made []string
		for _, id := range allSessions(t, c) {
			if !slices.Contains(before, id) {
				made = append(made, id)
			}
		}
		if len(made) != 1 {
			t.Fatalf("%s: the message made sessions %v, want one", tc.what, made)
		}
		if tc.dir == "" {
			managedIn(tc.what, made[0])
		} else {
			unmanagedIn(tc.what, made[0], tc.dir)
		}
	}
}

// allSessions are the ids session.list on c shows, closed ones included.
func allSessions(t *testing.T, c *grpcClient) []string {
	t.Helper()
	var out []string
	for _, s := range listAll(t, c) {
		out = append(out, s["sessionId"].(string))
	}
	return out
}

// listedAll is session id as session.list {includeClosed} on c shows it.
func listedAll(t *testing.T, c *grpcClient, id string) map[string]any {
	t.Helper()
	for _, s := range listAll(t, c) {
		if s["sessionId"] == id {
			return s
		}
	}
	t.Fatalf("session.list has no session %s", id)
	return nil
}

func listAll(t *testing.T, c *grpcClient) []map[string]any {
	t.Helper()
	var res struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{"includeClosed": true}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Sessions
}

// TestJobAndConversationWorkdirsFollowTheirSessions: the files a job's run
// and a gateway conversation wrote in their managed workdirs are rebuilt
// from their checkpoints by the next daemon on the store, whose workspace
// root is another directory (as on another machine), before their
// sessions' next turn there: a checkpoint event of reason materialise.
func TestJobAndConversationWorkdirsFollowTheirSessions(t *testing.T) {
	home := t.TempDir()
	writeWebhookSecret(t, home)
	ctx := context.Background()
	first, second := t.TempDir(), t.TempDir()
	d := startDaemonHome(t, home, daemon.Config{WorkspaceRoot: first})
	c := dialGRPC(t, d)
	var sched struct {
		JobID string `json:"jobId"`
	}
	if err := c.Call(ctx, "job.schedule", map[string]any{"spec": "@daily", "task": "write", "mode": "auto"}, &sched); err != nil {
		t.Fatal(err)
	}
	var run struct {
		SessionID string `json:"sessionId"`
		Status    string `json:"status"`
	}
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": sched.JobID}, &run); err != nil || run.Status != "ok" {
		t.Fatalf("job.runNow: %+v %v", run, err)
	}
	var bound struct {
		BindingID string `json:"bindingId"`
	}
	if err := c.Call(ctx, "gateway.bind", map[string]any{"platform": "webhook", "credentialsRef": "secret:hook",
		"target": map[string]any{"newSession": map[string]any{"workdir": "", "mode": "auto"}}}, &bound); err != nil {
		t.Fatal(err)
	}
	before := allSessions(t, c)
	post := func(d *daemon.Daemon, text string) {
		t.Helper()
		if code, body := signedPost(t, d, bound.BindingID, webhookSecret, map[string]any{"text": text, "userId": "u1", "wait": true}); code != http.StatusOK {
			t.Fatalf("post %q: %d %s", text, code, body)
		}
	}
	post(d, "write")
	var conv string
	for _, id := range allSessions(t, c) {
		if !slices.Contains(before, id) {
			conv = id
		}
	}
	for _, id := range []string{run.SessionID, conv} {
		if got := readFileString(t, filepath.Join(first, id, "a.txt")); got != "x" {
			t.Fatalf("session %s wrote %q in its managed workdir", id, got)
		}
	}
	d.Stop()

	d2 := startDaemonHome(t, home, daemon.Config{WorkspaceRoot: second})
	c2 := dialGRPC(t, d2)
	if err := c2.Call(ctx, "session.prompt", map[string]any{"sessionId": run.SessionID, "text": "hello"}, nil); err != nil {
		t.Fatalf("prompt the job's session on the next daemon: %v", err)
	}
	collect(t, c2.Events(run.SessionID), "turn.done", 1)
	post(d2, "hello")
	for _, id := range []string{run.SessionID, conv} {
		if got := listedAll(t, c2, id); got["workspace"] != "managed" || got["workdir"] != filepath.Join(realPath(t, second), id) {
			t.Fatalf("session %s on the next daemon: workspace %v, workdir %v", id, got["workspace"], got["workdir"])
		}
		if got := readFileString(t, filepath.Join(second, id, "a.txt")); got != "x" {
			t.Fatalf("session %s's managed workdir on the next daemon holds a.txt %q", id, got)
		}
		var res struct {
			Checkpoints []checkpointRow `json:"checkpoints"`
		}
		if err := c2.Call(ctx, "checkpoint.list", map[string]any{"sessionId": id}, &res); err != nil {
			t.Fatal(err)
		}
		if n := len(res.Checkpoints); n == 0 || res.Checkpoints[n-1].Reason != "materialise" {
			t.Fatalf("session %s's checkpoints %+v, want a materialise last", id, res.Checkpoints)
		}
	}
}
