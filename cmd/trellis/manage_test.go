package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/client"
)

// These tests pin the commands over the daemon's management methods:
// allowlist, jobs and providers (each: the happy path, the --json shape,
// an unknown id, a bad argument), approvals ls listing the requests asked
// of an interactive client, and the warning about an API key the running
// daemon does not use.

// jsonObject decodes stdout as one JSON object.
func jsonObject(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	return m
}

// list returns the JSON array field of a --json result.
func list(t *testing.T, m map[string]any, field string) []map[string]any {
	t.Helper()
	raw, ok := m[field].([]any)
	if !ok {
		t.Fatalf("%q is not an array in %v", field, m)
	}
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		out[i] = v.(map[string]any)
	}
	return out
}

// failure is a command that must fail with an exit status and a message.
type failure struct {
	args     []string
	code     int
	inStderr string
}

func checkFailures(t *testing.T, e *env, cases []failure) {
	t.Helper()
	for _, tc := range cases {
		r := e.run("", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.inStderr) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, and %q on stderr",
				tc.args, r.code, r.stdout, r.stderr, tc.code, tc.inStderr)
		}
	}
}

func TestAllowlistCommands(t *testing.T) {
	e := newEnv(t)
	e.run("", "run", "hello")

	r := e.run("", "allowlist", "add", "shell(git status*)")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "p-") || !strings.Contains(r.stderr, e.dir) {
		t.Fatalf("add: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "allowlist", "add", "read_file", "--scope", "always"); r.code != 0 {
		t.Fatalf("add always: exit %d, stderr %s", r.code, r.stderr)
	}
	r = e.run("", "allowlist", "ls")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+project\s+shell\(git status\*\)\s+`+regexp.QuoteMeta(e.dir)).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^p-\S+\s+always\s+read_file\s+-`).MatchString(r.stdout) {
		t.Fatalf("ls: exit %d, stdout %s", r.code, r.stdout)
	}
	r = e.run("", "allowlist", "ls", "--scope", "project", "--json")
	patterns := list(t, jsonObject(t, r.stdout), "patterns")
	if r.code != 0 || len(patterns) != 1 || patterns[0]["patternId"] != id || patterns[0]["pattern"] != "shell(git status*)" ||
		patterns[0]["workdir"] != e.dir || patterns[0]["principal"] == nil {
		t.Fatalf("ls --scope project --json: exit %d, stdout %s", r.code, r.stdout)
	}
	if r := e.run("", "allowlist", "rm", id); r.code != 0 || !strings.Contains(r.stdout, "removed "+id) {
		t.Fatalf("rm: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "allowlist", "ls", "--scope", "project"); r.code != 0 || strings.Contains(r.stdout, id) {
		t.Fatalf("ls after rm: exit %d, stdout %s", r.code, r.stdout)
	}

	checkFailures(t, e, []failure{
		{[]string{"allowlist", "rm", id}, exitFailed, "not_found"},
		{[]string{"allowlist", "rm"}, exitUsage, "trellis: allowlist rm needs PATTERN-ID...: usage: trellis allowlist rm PATTERN-ID... [flags]"},
		{[]string{"allowlist", "ls", "--scope", "forever"}, exitUsage, "want session, project or always"},
		{[]string{"allowlist", "add", "shell", "--scope", "once"}, exitUsage, "want session, project or always"},
		{[]string{"allowlist", "add", "shell", "--scope", "session"}, exitUsage, "needs --session"},
		{[]string{"allowlist", "add", "shell(", "--scope", "always"}, exitFailed, "invalid_params"},
	})
}

func TestJobsCommands(t *testing.T) {
	e := newEnv(t)
	e.run("", "run", "hello")

	r := e.run("", "jobs", "schedule", "@every 1h", "hello")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "j-") || !strings.Contains(r.stderr, "first run is at") {
		t.Fatalf("schedule: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "jobs", "ls")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+scheduled\s+@every 1h\s+\S+\s+-\s+-\s+hello$`).MatchString(r.stdout) {
		t.Fatalf("ls: exit %d, stdout %s", r.code, r.stdout)
	}

	r = e.run("", "jobs", "run", id)
	fields := strings.Fields(r.stdout)
	if r.code != 0 || len(fields) != 2 || !strings.HasPrefix(fields[0], "s-") || fields[1] != "ok" {
		t.Fatalf("run: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	session := fields[0]
	r = e.run("", "jobs", "run", "--json", id)
	if m := jsonObject(t, r.stdout); r.code != 0 || m["status"] != "ok" || m["ok"] != true {
		t.Fatalf("run --json: exit %d, stdout %s", r.code, r.stdout)
	}

	r = e.run("", "jobs", "ls", "--json")
	jobs := list(t, jsonObject(t, r.stdout), "jobs")
	if r.code != 0 || len(jobs) != 1 || jobs[0]["jobId"] != id || jobs[0]["lastStatus"] != "ok" || jobs[0]["workdir"] != e.dir {
		t.Fatalf("ls --json: exit %d, stdout %s", r.code, r.stdout)
	}
	r = e.run("", "jobs", "history", id)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "SESSION") || !strings.Contains(r.stdout, session) {
		t.Fatalf("history: exit %d, stdout %s", r.code, r.stdout)
	}
	r = e.run("", "jobs", "history", id, "--json")
	m := jsonObject(t, r.stdout)
	runs := list(t, m, "runs")
	if r.code != 0 || m["jobId"] != id || len(runs) != 2 {
		t.Fatalf("history --json: exit %d, stdout %s", r.code, r.stdout)
	}
	outcomes := 0
	for _, run := range runs {
		if !strings.HasPrefix(run["sessionId"].(string), "s-") || run["startedAt"] == "" {
			t.Fatalf("history --json run %v", run)
		}
		if run["outcome"] == "ok" {
			outcomes++
		}
	}
	if outcomes != 1 {
		t.Fatalf("history --json: %d runs with an outcome, want the last one: %s", outcomes, r.stdout)
	}

	if r := e.run("", "jobs", "cancel", id); r.code != 0 || !strings.Contains(r.stdout, "cancelled "+id) {
		t.Fatalf("cancel: exit %d, stderr %s", r.code, r.stderr)
	}
	r = e.run("", "jobs", "ls", "--json")
	if jobs := list(t, jsonObject(t, r.stdout), "jobs"); len(jobs) != 1 || jobs[0]["state"] != "cancelled" {
		t.Fatalf("ls after cancel: %s", r.stdout)
	}
	// --workdir '': the job names none; each run gets a managed workdir.
	r = e.run("", "jobs", "schedule", "@daily", "hello", "--workdir", "")
	managed := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(managed, "j-") {
		t.Fatalf("schedule --workdir '': exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "jobs", "ls", "--json")
	if !slices.ContainsFunc(list(t, jsonObject(t, r.stdout), "jobs"), func(j map[string]any) bool {
		return j["jobId"] == managed && j["workdir"] == ""
	}) {
		t.Fatalf("jobs ls --json lacks %s with an empty workdir: %s", managed, r.stdout)
	}
	if r := e.run("", "jobs", "cancel", managed); r.code != 0 {
		t.Fatalf("cancel: exit %d, stderr %s", r.code, r.stderr)
	}

	checkFailures(t, e, []failure{
		{[]string{"jobs", "run", "j-unknown"}, exitFailed, "not_found"},
		{[]string{"jobs", "cancel", "j-unknown"}, exitFailed, "not_found"},
		{[]string{"jobs", "history", "j-unknown"}, exitFailed, "not_found"},
		{[]string{"jobs", "schedule", "whenever", "hello"}, exitFailed, "invalid_params"},
		{[]string{"jobs", "schedule", "@daily", "hello", "--mode", "yolo"}, exitUsage, "want plan, accept or auto"}, // --mode: --permission-mode's synonym
		{[]string{"jobs", "schedule", "@daily"}, exitUsage, "trellis: jobs schedule needs SPEC and TASK: usage: trellis jobs schedule SPEC TASK [flags]"},
		{[]string{"jobs", "run"}, exitUsage, "trellis: jobs run needs JOB: usage: trellis jobs run JOB [flags]"},
	})
}

func TestProvidersCommands(t *testing.T) {
	e := newEnv(t)
	e.run("", "run", "hello")

	r := e.run("", "providers", "ls")
	if r.code != 0 || !regexp.MustCompile(`(?m)^openai\s+no\s+no\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^fake\s+yes\s+yes\s`).MatchString(r.stdout) {
		t.Fatalf("ls: exit %d, stdout %s", r.code, r.stdout)
	}

	// Each way of giving a key configures the vendor; the key is never
	// printed, logged or returned, and its file is the daemon's alone.
	const secret = "sk-test-7f3a9c-never-shown"
	keyFile := filepath.Join(t.TempDir(), "openai.key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		env   []string
		stdin string
		args  []string
	}{
		{"file", nil, "", []string{"--api-key-file", keyFile}},
		{"env", []string{"MY_OPENAI_KEY=" + secret}, "", []string{"--api-key-env", "MY_OPENAI_KEY"}},
		{"stdin", nil, secret + "\n", []string{"--api-key-stdin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.run("", "providers", "rm", "openai"); r.code != 0 {
				t.Fatalf("rm: exit %d, stderr %s", r.code, r.stderr)
			}
			args := append([]string{"providers", "set", "openai", "--base-url", "http://127.0.0.1:9/v1"}, tc.args...)
			r := e.runEnv(tc.env, tc.stdin, args...)
			if r.code != 0 || !strings.Contains(r.stderr, "configured openai: API key, base URL") || strings.Contains(r.stdout+r.stderr, secret) {
				t.Fatalf("set: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
			}
			r = e.run("", "providers", "ls", "--json")
			for _, p := range list(t, jsonObject(t, r.stdout), "providers") {
				if p["vendor"] == "openai" && (p["configured"] != true || p["baseUrl"] != "http://127.0.0.1:9/v1") {
					t.Fatalf("openai after set: %v", p)
				}
			}
			if strings.Contains(r.stdout, secret) {
				t.Fatal("providers ls --json shows the key")
			}
		})
	}
	st, err := os.Stat(filepath.Join(e.home, "secrets", "openai.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key's file: %v, mode %v; want mode 0600", err, st.Mode())
	}
	logs, err := os.ReadFile(filepath.Join(e.home, "logs", "trellisd.log"))
	if err != nil || bytes.Contains(logs, []byte(secret)) {
		t.Fatalf("the daemon's log holds the key (or cannot be read: %v)", err)
	}

	// The fake vendor answers the test prompt; openai at a closed port
	// fails with the reason, exit 1.
	r = e.run("", "providers", "test", "fake")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ok\tfake\t") {
		t.Fatalf("test fake: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "providers", "test", "fake", "--json")
	if m := jsonObject(t, r.stdout); r.code != 0 || m["ok"] != true || m["provider"] != "fake" || m["reply"] == nil {
		t.Fatalf("test --json: exit %d, stdout %s", r.code, r.stdout)
	}
	if r := e.run("", "providers", "test", "openai"); r.code != exitFailed || !strings.Contains(r.stderr, "openai (model") {
		t.Fatalf("test openai at a closed port: exit %d, stderr %s", r.code, r.stderr)
	}
	r = e.run("", "providers", "models", "fake", "--json")
	m := jsonObject(t, r.stdout)
	if models, _ := m["models"].([]any); r.code != 0 || m["vendor"] != "fake" || len(models) == 0 || m["current"] == "" {
		t.Fatalf("models --json: exit %d, stdout %s", r.code, r.stdout)
	}
	if r := e.run("", "providers", "models", "fake"); r.code != 0 || !strings.HasPrefix(r.stdout, "MODEL") {
		t.Fatalf("models: exit %d, stdout %s", r.code, r.stdout)
	}

	if r := e.run("", "providers", "rm", "openai"); r.code != 0 || !strings.Contains(r.stderr, "removed the configuration of openai") {
		t.Fatalf("rm: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "providers", "ls"); !regexp.MustCompile(`(?m)^openai\s+no\s`).MatchString(r.stdout) {
		t.Fatalf("ls after rm: %s", r.stdout)
	}

	empty := filepath.Join(t.TempDir(), "empty.key")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	checkFailures(t, e, []failure{
		{[]string{"providers", "set", "gemini", "--model", "g-1"}, exitFailed, "not_found"},
		{[]string{"providers", "test", "gemini"}, exitFailed, "not_found"},
		{[]string{"providers", "rm", "gemini"}, exitFailed, "not_found"},
		{[]string{"providers", "models", "gemini"}, exitFailed, "not_found"},
		{[]string{"providers", "set", "openai"}, exitUsage, "nothing to set"},
		{[]string{"providers", "set", "openai", "--api-key-file", keyFile, "--api-key-stdin"}, exitUsage, "give one of"},
		{[]string{"providers", "set", "openai", "--api-key-file", empty}, exitUsage, "no API key in"},
		{[]string{"providers", "set", "openai", "--api-key-env", "TRELLIS_TEST_UNSET_VAR"}, exitUsage, "not set or empty"},
		{[]string{"providers", "set", "openai", "--api-key", "sk-x"}, exitUsage, "unknown flag"},
		{[]string{"providers", "set", "openai", "--base-url", "not a url"}, exitFailed, "invalid_params"},
	})
}

// TestApprovalsListsInteractiveRequests: a request sent to the client that
// runs the session (approval.request) shows in trellis approvals ls, said
// to be asked of that client, beside the unattended queue.
func TestApprovalsListsInteractiveRequests(t *testing.T) {
	e := newEnv(t)
	e.run("", "run", "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	asked := make(chan client.ApprovalRequest, 1)
	answer := make(chan struct{})
	c, err := client.Dial(ctx, e.home, client.Options{Approve: func(ctx context.Context, req client.ApprovalRequest) client.ApprovalAnswer {
		asked <- req
		select {
		case <-answer:
		case <-ctx.Done():
		}
		return client.ApprovalAnswer{Decision: "deny", Reason: "the test is over"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer close(answer)
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prompt(ctx, sub.SessionID(), "run ls"); err != nil {
		t.Fatal(err)
	}
	var req client.ApprovalRequest
	select {
	case req = <-asked:
	case <-ctx.Done():
		t.Fatal("the client was never asked")
	}

	r := e.run("", "approvals", "ls")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+req.RequestID+`\s+`+sub.SessionID()+`\s+session client\s+exec\s+high\s+`).MatchString(r.stdout) {
		t.Fatalf("approvals ls: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "approvals", "ls", "--json", "--session", sub.SessionID())
	m := jsonObject(t, r.stdout)
	reqs := list(t, m, "requests")
	if r.code != 0 || len(reqs) != 1 || reqs[0]["requestId"] != req.RequestID || reqs[0]["interactive"] != true || reqs[0]["tool"] != "shell" {
		t.Fatalf("approvals ls --json: exit %d, stdout %s", r.code, r.stdout)
	}
	// Only its client answers it.
	if r := e.run("", "approvals", "allow", req.RequestID); r.code != exitFailed || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("approvals allow of another client's request: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "approvals", "ls", "--session", "s-unknown"); r.code != exitFailed || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("approvals ls --session unknown: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestUnusedKeyWarning: trellis run says, on one stderr line, that the
// environment has an API key the running daemon was started without; not
// when the daemon has the vendor, nor when the environment has no key.
func TestUnusedKeyWarning(t *testing.T) {
	const warning = "OPENAI_API_KEY is set, but the running daemon"
	withoutKey := newEnv(t)
	withoutKey.run("", "run", "hello") // starts the daemon without a key
	withKey := newEnv(t)
	// A daemon started with the key in its environment uses it (nothing
	// here calls OpenAI: the fake provider stays the default).
	withKey.runEnv([]string{"OPENAI_API_KEY=sk-test-env"}, "", "run", "hello")
	for _, tc := range []struct {
		name string
		e    *env
		env  []string
		want bool
	}{
		{"daemon without the key", withoutKey, []string{"OPENAI_API_KEY=sk-test-env"}, true},
		{"no key here", withoutKey, nil, false},
		{"empty key", withoutKey, []string{"OPENAI_API_KEY="}, false},
		{"daemon with the key", withKey, []string{"OPENAI_API_KEY=sk-test-env"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.e.runEnv(tc.env, "", "run", "hello")
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Hello from the test script") {
				t.Fatalf("run: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
			}
			if got := strings.Count(r.stderr, warning); got != map[bool]int{true: 1, false: 0}[tc.want] {
				t.Fatalf("the warning is there %d times, want it %v:\n%s", got, tc.want, r.stderr)
			}
			if tc.want && !strings.Contains(r.stderr, "trellis providers set openai --api-key-env OPENAI_API_KEY") {
				t.Fatalf("the warning does not say how to use the key:\n%s", r.stderr)
			}
		})
	}
}

// TestCheckpointsCommands: trellis checkpoints ls, diff, restore and rm on
// a session whose turns wrote and edited a file; a restore over a file
// changed outside Trellis is refused until --force.
func TestCheckpointsCommands(t *testing.T) {
	e := newEnv(t)
	r := e.run("", "run", "--approve", "allow", "write notes")
	if r.code != 0 {
		t.Fatalf("write notes: exit %d, stderr %s", r.code, r.stderr)
	}
	id := sessionOf(t, r)
	if r := e.run("", "run", "--session", id, "--approve", "allow", "edit notes"); r.code != 0 {
		t.Fatalf("edit notes: exit %d, stderr %s", r.code, r.stderr)
	}
	r = e.run("", "checkpoints", "ls", id)
	if r.code != 0 || !regexp.MustCompile(`(?m)^c-\S+\s+\d+\s+turn\s+-\s+1\s+14\s+-\s+`).MatchString(r.stdout) {
		t.Fatalf("ls: exit %d, stdout %s", r.code, r.stdout)
	}
	r = e.run("", "checkpoints", "ls", id, "--json")
	cps := list(t, jsonObject(t, r.stdout), "checkpoints")
	if r.code != 0 || len(cps) != 3 {
		t.Fatalf("ls --json: exit %d, want 3 checkpoints (before the write, after each turn): %s", r.code, r.stdout)
	}
	empty, written, edited := cps[0]["checkpointId"].(string), cps[1]["checkpointId"].(string), cps[2]["checkpointId"].(string)
	r = e.run("", "checkpoints", "diff", id, written, edited)
	if r.code != 0 || !strings.Contains(r.stdout, "-two") || !strings.Contains(r.stdout, "+2") {
		t.Fatalf("diff: exit %d, stdout %s", r.code, r.stdout)
	}
	notes := filepath.Join(e.dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("changed by hand\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.run("", "checkpoints", "restore", id, written); r.code != exitFailed || !strings.Contains(r.stderr, "workspace_changed") || r.stdout != "" {
		t.Fatalf("restore over a changed file: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "checkpoints", "restore", id, written, "--force")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "c-") {
		t.Fatalf("restore --force: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("notes.txt after restore: %q (%v)", b, err)
	}
	if r := e.run("", "checkpoints", "rm", id, empty); r.code != 0 || !strings.Contains(r.stdout, "deleted "+empty) {
		t.Fatalf("rm: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	checkFailures(t, e, []failure{
		{[]string{"checkpoints", "rm", id, empty}, exitFailed, "not_found"},
		{[]string{"checkpoints", "ls"}, exitUsage, "trellis: checkpoints ls needs SESSION"},
		{[]string{"checkpoints", "diff", id}, exitUsage, "trellis: checkpoints diff needs SESSION and FROM (TO is optional): usage: trellis checkpoints diff SESSION FROM [TO]"},
		{[]string{"checkpoints", "ls", "s-none"}, exitFailed, `session "s-none" not found`},
		{[]string{"checkpoints", "restore", id, "c-none"}, exitFailed, "not_found"},
	})
}
