package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// TestSandboxCannotReachTheControlPlane runs a real trellisd on a
// PostgreSQL store, its DSN on its command line, with a secrets key file,
// a ~/.pgpass and another daemon's home beside it, and lets a scripted
// model walk the chain command → DSN / secrets / token → REST from an
// accept-mode session: every step fails at its first command, connecting
// to the database's and the daemon's ports included. Then network probes
// from a plan-mode session (the database port, the daemon's own port, the
// internet) fail too.
func TestSandboxCannotReachTheControlPlane(t *testing.T) {
	if !tool.ProbeSandbox().Available() || !tool.ProbeSandbox().PIDNamespace || !tool.ProbeSandbox().NetNamespace {
		t.Skip("needs Landlock and user, PID and network namespaces")
	}
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	pg, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := t.TempDir() // the daemon user's home directory
	home := filepath.Join(user, ".trellis")
	other := filepath.Join(user, "other-daemon")
	wd := filepath.Join(user, "project")
	const pgpassMarker = "pgpass-marker-0001"
	key := "c2VjcmV0cy1rZXktbWFya2VyLTAwMDMtMzJieXRlcyE=" // 32 bytes, base64
	files := map[string]string{
		".pgpass":          "*:*:*:*:" + pgpassMarker + "\n",
		"keys/secrets.key": key + "\n",
		"project/README":   "a project\n",
	}
	for name, content := range files {
		p := filepath.Join(user, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(user, "keys", "secrets.key")

	// The other daemon: started once (so it registers its home), stopped.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + user}
	o := exec.Command(trellisdBin, "--home", other, "--provider", "fake")
	o.Env = env
	if err := o.Start(); err != nil {
		t.Fatal(err)
	}
	op := &proc{cmd: o, home: other}
	t.Cleanup(op.kill)
	otherToken := waitInfo(t, other, o.Process.Pid).Token
	op.kill()

	port := testbin.FreePort(t, 0)
	calls := []string{
		// 1. The DSN: every process's command line, the daemon's above all.
		`for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done | grep -o 'postgres://[^ ]*'; ps -eo args`,
		// 2. The secrets key.
		`cat ` + keyFile,
		// 3. The database password file.
		`cat ~/.pgpass`,
		// 4. The token.
		`cat ` + home + `/token ` + home + `/daemon.json`,
		// 5. The home, and the other daemon's.
		`ls -la ` + home + ` ` + other + `; cat ` + other + `/token`,
		// 6. The database without a password (it trusts local
		//    connections here), and the daemon's REST port: accept mode has
		//    the host's network, but not those ports.
		`exec 3<>/dev/tcp/127.0.0.1/` + pg.Port() + ` && echo DB-REACHED`,
		`exec 3<>/dev/tcp/127.0.0.1/` + strconv.Itoa(port) + ` && echo REST-REACHED`,
	}
	script := map[string]any{"steps": []any{
		map[string]any{"match": "walk the chain", "tool_calls": shellCalls(calls)},
		map[string]any{"match": "probe the network", "tool_calls": shellCalls([]string{
			`exec 3<>/dev/tcp/127.0.0.1/` + pg.Port() + ` && echo DB-REACHED`,
			`exec 3<>/dev/tcp/127.0.0.1/` + strconv.Itoa(port) + ` && echo REST-REACHED`,
			`getent hosts example.com; exec 3<>/dev/tcp/1.1.1.1/443 && echo NET-REACHED`,
		})},
		map[string]any{"after_tool": "shell", "text": "done"},
	}}
	scriptPath := filepath.Join(user, "script.json")
	b, _ := json.Marshal(script)
	os.WriteFile(scriptPath, b, 0o600)

	cmd, info := startTrellisd(t, home, env, "--provider", "fake:"+scriptPath, "--store", dsn, "--secrets-key-file", keyFile, "--port", strconv.Itoa(port))
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); !strings.Contains(string(cmdline), dsn) {
		t.Fatalf("the daemon's command line does not hold the DSN (the test would prove nothing): %q", cmdline)
	}

	c := dialInfo(t, info)
	ctx := context.Background()
	if err := c.Call(ctx, "permission.allowlist.add", map[string]any{"pattern": "shell", "scope": "project", "workdir": wd}, nil); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"DSN": dsn, "DSN (its schema)": pg.Query().Get("search_path"), "token": info.Token,
		"secrets key": key, ".pgpass": pgpassMarker, "the other daemon's token": otherToken}
	check := func(what, out string) {
		t.Helper()
		for name, v := range secrets {
			if v != "" && strings.Contains(out, v) {
				t.Errorf("%s: the %s reached the output: %q", what, name, out)
			}
		}
	}

	accept := createSession(t, c, map[string]any{"workdir": wd, "mode": "accept"})
	evs := turn(t, c, accept, "walk the chain")
	results := findKind(evs, "tool.result")
	if len(results) != len(calls) {
		t.Fatalf("%d tool results for %d calls: %v", len(results), len(calls), eventKinds(evs))
	}
	for i, r := range results {
		out := fmt.Sprint(r["output"])
		t.Logf("accept %d: ok=%v %.400q", i+1, r["ok"], out)
		check(fmt.Sprintf("step %d", i+1), out)
		switch i {
		case 0:
			// Only the command's own processes (its grep pattern) show.
			if strings.Contains(out, "--store") || strings.Contains(out, "trellisd") || strings.Contains(out, "@127.0.0.1") {
				t.Errorf("step 1: a command line was read: %q", out)
			}
		case 1, 2, 3, 4, 5, 6:
			if i >= 5 && tool.ProbeSandbox().LandlockABI < 4 {
				continue // ports cannot be refused on this kernel (documented)
			}
			if r["ok"] == true || !strings.Contains(out, "Permission denied") {
				t.Errorf("step %d did not fail at its first step: %q", i+1, out)
			}
		}
	}

	plan := createSession(t, c, map[string]any{"workdir": wd, "mode": "plan"})
	evs = turn(t, c, plan, "probe the network")
	results = findKind(evs, "tool.result")
	if len(results) != 3 {
		t.Fatalf("%d tool results for 3 probes: %v", len(results), eventKinds(evs))
	}
	for i, r := range results {
		out := fmt.Sprint(r["output"])
		t.Logf("plan probe %d: ok=%v %.300q", i+1, r["ok"], out)
		// The loopback is the command's own (up, nothing listening); the
		// rest of the world is unreachable.
		if r["ok"] == true || strings.Contains(out, "REACHED") || !strings.Contains(out, "unreachable") && !strings.Contains(out, "refused") {
			t.Errorf("plan probe %d reached the network: %q", i+1, out)
		}
	}
}

// startTrellisd starts trellisd on home with env and args, killed when t
// ends, and waits for its daemon.json.
func startTrellisd(t *testing.T, home string, env []string, args ...string) (*exec.Cmd, daemonfile.Info) {
	t.Helper()
	cmd := exec.Command(trellisdBin, append([]string{"--home", home}, args...)...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, home: home}
	t.Cleanup(p.kill)
	return cmd, waitInfo(t, home, cmd.Process.Pid)
}

// shellCalls is the tool_calls of a fake provider step running commands.
func shellCalls(commands []string) []any {
	var out []any
	for _, c := range commands {
		out = append(out, map[string]any{"name": "shell", "arguments": map[string]any{"command": c}})
	}
	return out
}

// TestPostgresMCPServerCannotReachTheControlPlane runs a real trellisd on a
// PostgreSQL store, its DSN on its command line, a secrets key file and a
// ~/.pgpass beside it, with a stdio MCP server (this test binary) whose
// peek tool reports what the server can read: the secrets key, the
// password file, the token and every process's command line. The server
// runs in the shell tool's sandbox: it sees none of them, and no process
// but its own.
func TestPostgresMCPServerCannotReachTheControlPlane(t *testing.T) {
	if !tool.ProbeSandbox().Available() || !tool.ProbeSandbox().PIDNamespace {
		t.Skip("needs Landlock and user and PID namespaces")
	}
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	user := t.TempDir() // the daemon user's home directory
	home := filepath.Join(user, ".trellis")
	wd := filepath.Join(user, "project")
	const pgpassMarker = "pgpass-marker-0002"
	key := "c2VjcmV0cy1rZXktbWFya2VyLTAwMDQtMzJieXRlcyE=" // 32 bytes, base64
	for name, content := range map[string]string{
		".pgpass": "*:*:*:*:" + pgpassMarker + "\n", "keys/secrets.key": key + "\n", "project/README": "a project\n",
	} {
		p := filepath.Join(user, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(user, "keys", "secrets.key")
	markers := t.TempDir()
	mcpCmd, mcpEnv := mcptest.Command(markers)
	mcpConfig, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{"command": mcpCmd, "env": mcpEnv}}})
	mcpConfigPath := filepath.Join(user, "mcp.json")
	peekPaths := []string{keyFile, filepath.Join(user, ".pgpass"), filepath.Join(home, "token"), filepath.Join(home, "daemon.json"), filepath.Join(wd, "README")}
	script, _ := json.Marshal(map[string]any{"steps": []any{
		map[string]any{"match": "peek", "tool_calls": []any{map[string]any{"name": "mcp__probe__peek", "arguments": map[string]any{"paths": peekPaths}}}},
		map[string]any{"after_tool": "mcp__probe__peek", "text": "done"},
	}})
	scriptPath := filepath.Join(user, "script.json")
	for p, b := range map[string][]byte{mcpConfigPath: mcpConfig, scriptPath: script} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, info := startTrellisd(t, home, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + user}, "--provider", "fake:"+scriptPath, "--store", dsn,
		"--secrets-key-file", keyFile, "--mcp-config", mcpConfigPath, "--port", strconv.Itoa(testbin.FreePort(t, 0)))
	c := dialInfo(t, info)
	s := createSession(t, c, map[string]any{"workdir": wd, "mode": "accept"})
	evs := turn(t, c, s, "peek")
	results := findKind(evs, "tool.result")
	if len(results) != 1 || results[0]["ok"] != true {
		t.Fatalf("the peek call: %v (%v)", results, eventKinds(evs))
	}
	out := fmt.Sprint(results[0]["output"])
	t.Logf("what the MCP server saw: %.1500s", out)
	if !strings.Contains(out, "a project") {
		t.Fatalf("the server could not read the session's workdir either (the test would prove nothing): %q", out)
	}
	for name, v := range map[string]string{"DSN": dsn, "token": info.Token, "secrets key": key, ".pgpass": pgpassMarker} {
		if strings.Contains(out, v) {
			t.Errorf("the %s reached the MCP server", name)
		}
	}
	for _, f := range []string{keyFile, filepath.Join(user, ".pgpass"), filepath.Join(home, "token")} {
		if !strings.Contains(out, "read "+f+": open "+f+": permission denied") {
			t.Errorf("reading %s was not refused", f)
		}
	}
	if !strings.Contains(out, "processes: 1\n") || strings.Contains(out, "trellisd") {
		t.Errorf("the server saw other processes than its own")
	}
}
