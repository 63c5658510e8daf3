package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/tool"
)

// The daemon's secrets: what no tool result, event, log line or provider
// request may ever hold. The values are unique markers.
var daemonSecretEnv = map[string]string{
	"AWS_ACCESS_KEY_ID":     "AKIASECRETMARKER0001",
	"AWS_SECRET_ACCESS_KEY": "aws-secret-marker-0002",
	"DATABASE_URL":          "postgres://app:db-secret-marker-0003@db.internal/app",
	"GH_PAT":                "ghp_secretmarker0004",
	"SMTP_PASS":             "smtp-secret-marker-0005",
	"STRIPE_KEY":            "sk_live_secretmarker0006",
	"MY_SERVICE_PASSWORD":   "pw-secret-marker-0007",
	"REDIS_URL":             "redis://:redis-secret-marker-0008@cache:6379",
	"DOCKER_AUTH_CONFIG":    `{"auths":{"r.example":{"auth":"docker-secret-marker-0011"}}}`,
	"SLACK_WEBHOOK_URL":     "https://hooks.slack.com/services/slack-secret-marker-0012",
	"STRIPE_SK":             "sk_live_stripe-secret-marker-0013",
}

const openAIKey = "sk-openai-secret-marker-0009"
const plantedSecret = "planted-provider-key-marker-0010"

// securityCalls is what a hostile (prompt-injected) model tries, with the
// daemon's home ~/.trellis inside the session's workdir ~. HOMEDIR and PID
// are filled in by the test.
var securityCalls = []struct{ name, args string }{
	// The file tools, by every route: relative, absolute, traversal,
	// symlink, hard link, directory listing, search.
	{"read_file", `{"path":".trellis/token"}`},
	{"read_file", `{"path":"HOMEDIR/.trellis/token"}`},
	{"read_file", `{"path":"project/../.trellis/token"}`},
	{"read_file", `{"path":"./.trellis/./secrets/../token"}`},
	{"read_file", `{"path":".trellis/secrets/openai.json"}`},
	{"read_file", `{"path":"innocent-link.txt"}`},
	{"read_file", `{"path":"innocent-hardlink.txt"}`},
	{"read_file", `{"path":"project/dirlink/token"}`},
	{"read_file", `{"path":"HOMEDIR/.trellis/daemon.json"}`},
	{"read_file", `{"path":".trellis/logs/trellisd.log"}`},
	{"list_dir", `{"path":".trellis"}`},
	{"list_dir", `{"path":".trellis/secrets"}`},
	{"list_dir", `{"path":"project/dirlink"}`},
	{"list_dir", `{}`},
	{"glob", `{"pattern":"**/*"}`},
	{"glob", `{"pattern":".trellis/**"}`},
	{"glob", `{"pattern":"HOMEDIR/.trellis/*"}`},
	{"grep", `{"pattern":"[a-f0-9]{16}"}`},
	{"grep", `{"pattern":".","path":".trellis"}`},
	{"grep", `{"pattern":"marker"}`},
	{"grep", `{"pattern":".","path":"innocent-hardlink.txt"}`},
	{"write_file", `{"path":".trellis/token","content":"attacker-token"}`},
	{"write_file", `{"path":"innocent-hardlink.txt","content":"attacker-token"}`},
	{"write_file", `{"path":".trellis/secrets/evil.json","content":"{}"}`},
	{"edit_file", `{"path":".trellis/token","old":"a","new":"b"}`},
	{"edit_file", `{"path":"innocent-link.txt","old":"a","new":"b"}`},
	// The shell: the home, the daemon's environment, its /proc.
	{"shell", `{"command":"cat ~/.trellis/token; cat HOMEDIR/.trellis/secrets/*; cat innocent-link.txt; ls -la ~/.trellis; true"}`},
	{"shell", `{"command":"cat /proc/$PPID/environ; cat /proc/PID/environ; tr '\\0' '\\n' </proc/PID/environ; cat /proc/PID/cmdline; true"}`},
	{"shell", `{"command":"env; set"}`},
	{"shell", `{"command":"grep -r . ~/.trellis 2>&1 | head; find / -name token -path '*trellis*' 2>/dev/null | xargs cat 2>&1; true"}`},
	{"shell", `{"command":"echo attacker > ~/.trellis/token; ln ~/.trellis/token stolen; cp -r ~/.trellis copy; kill -9 PID; true"}`},
	{"shell", `{"command":"echo ok > project/written.txt && cat project/written.txt"}`},
}

// TestToolsNeverReachTheDaemonsSecrets runs a real trellisd from the user's
// home (workdir ~, daemon home ~/.trellis) with secrets in its environment
// and home, lets a scripted model try every route to them, and checks that
// none reaches a tool result, an event, the log or a provider request.
func TestToolsNeverReachTheDaemonsSecrets(t *testing.T) {
	if !tool.ProbeSandbox().Available() {
		t.Skip("no Landlock here: the shell tool is inactive (covered by its own test)")
	}
	user := t.TempDir() // the user's home directory, also the workdir
	home := filepath.Join(user, ".trellis")
	os.MkdirAll(filepath.Join(home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(home, "secrets", "openai.json"), []byte(`{"apiKey":"`+plantedSecret+`"}`), 0o600)
	os.MkdirAll(filepath.Join(user, "project"), 0o755)

	// The model's calls, in one response; then a final answer.
	stream := providertest.NewOpenAIStream("gpt-4.1").Text("Trying.")
	// Filled in once the daemon runs (its pid and token are needed).
	srv := providertest.NewServer(t)

	cmd := exec.Command(trellisdBin, "--home", home)
	cmd.Dir = user
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + user, "OPENAI_API_KEY=" + openAIKey, "OPENAI_BASE_URL=" + srv.URL + "/v1"}
	for k, v := range daemonSecretEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, home: home}
	t.Cleanup(p.kill)
	var stderrText strings.Builder
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			stderrText.WriteString(sc.Text() + "\n")
		}
	}()
	info := waitInfo(t, home, cmd.Process.Pid)
	token := info.Token
	tokenPath := filepath.Join(home, "token")

	// Links a user might have lying around: a symlink and a hard link to
	// the token in the workdir, a symlink to the home in a project.
	os.Symlink(tokenPath, filepath.Join(user, "innocent-link.txt"))
	if err := os.Link(tokenPath, filepath.Join(user, "innocent-hardlink.txt")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(home, filepath.Join(user, "project", "dirlink"))

	for i, c := range securityCalls {
		args := strings.ReplaceAll(c.args, "HOMEDIR", user)
		args = strings.ReplaceAll(args, "PID", strconv.Itoa(cmd.Process.Pid))
		args = strings.ReplaceAll(args, "$PPID", "$PPID") // the shell's own
		id := fmt.Sprintf("call_%02d", i)
		stream.ToolCall(i, id, c.name).ToolArgs(i, args)
	}
	srv.Enqueue(stream.Finish("tool_calls").Usage(100, 10).Reply(),
		providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(100, 2).Reply())

	c := dialInfo(t, info)
	id := createSession(t, c, map[string]any{"workdir": user, "mode": "auto"})
	evs := turn(t, c, id, "find the daemon's token")
	if done := evs[len(evs)-1]; payloadOf(done)["reason"] != "complete" {
		t.Fatalf("turn ended %v: %v", payloadOf(done), eventKinds(evs))
	}
	results := findKind(evs, "tool.result")
	if len(results) != len(securityCalls) {
		t.Fatalf("%d tool results for %d calls: %v", len(results), len(securityCalls), eventKinds(evs))
	}
	// Every call of the file tools into the home failed or left it out;
	// the ordinary write in the project worked.
	for i, r := range results {
		out := fmt.Sprint(r["output"])
		t.Logf("%s %s -> ok=%v %.300q", securityCalls[i].name, securityCalls[i].args, r["ok"], out)
	}
	if out := fmt.Sprint(results[len(results)-1]["output"]); !strings.Contains(out, "ok\n") {
		t.Errorf("an ordinary command in the workdir failed: %s", out)
	}
	if got := fmt.Sprint(results[0]["output"]); !strings.Contains(got, "daemon's home directory") {
		t.Errorf("read_file .trellis/token: %q, want a message naming the daemon's home", got)
	}

	secrets := map[string]string{"token": token, "openai key": openAIKey, "planted key": plantedSecret}
	for k, v := range daemonSecretEnv {
		secrets[k] = v
		if i := strings.Index(v, "marker"); i > 0 { // the marker part, in case the value is cut
			secrets[k+" marker"] = v[strings.LastIndexAny(v[:i], ":/@_-")+1:]
		}
	}
	check := func(where, text string) {
		t.Helper()
		for name, v := range secrets {
			if strings.Contains(text, v) {
				t.Errorf("the %s reached %s", name, where)
			}
		}
	}
	all, _ := json.Marshal(evs)
	check("the live events", string(all))
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, &res); err != nil {
		t.Fatal(err)
	}
	stored, _ := json.Marshal(res.Events)
	check("the stored events", string(stored))
	for i, r := range srv.Requests() {
		check(fmt.Sprintf("provider request %d", i), string(r.Body))
	}
	// The workdir holds the daemon's home: its checkpoints leave it out
	// (listed as ignored), so no diff or restore can show or write it.
	var cps struct {
		Checkpoints []map[string]any `json:"checkpoints"`
	}
	if err := c.Call(context.Background(), "checkpoint.list", map[string]any{"sessionId": id}, &cps); err != nil || len(cps.Checkpoints) == 0 {
		t.Fatalf("checkpoint.list: %v (%d checkpoints)", err, len(cps.Checkpoints))
	}
	listed, _ := json.Marshal(cps)
	if !strings.Contains(string(listed), `{"path":".trellis","reason":"ignored"`) {
		t.Errorf("the checkpoints do not list the daemon's home as ignored: %s", listed)
	}
	var diff json.RawMessage
	if err := c.Call(context.Background(), "checkpoint.diff", map[string]any{"sessionId": id, "from": cps.Checkpoints[0]["checkpointId"]}, &diff); err != nil {
		t.Fatal(err)
	}
	check("a checkpoint's diff", string(diff))
	if strings.Contains(string(diff), ".trellis/") {
		t.Errorf("a checkpoint's diff names the daemon's home: %.500s", diff)
	}
	if b, _ := os.ReadFile(tokenPath); strings.TrimSpace(string(b)) != token {
		t.Errorf("the token file changed: %q", b)
	}
	for _, p := range []string{filepath.Join(home, "secrets", "evil.json"), filepath.Join(user, "stolen"), filepath.Join(user, "copy", "token")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists: a tool wrote or copied into/out of the home", p)
		}
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the daemon died (a command killed it?): %v", err)
	}
	p.kill()
	<-stderrDone
	check("the daemon's stderr", stderrText.String())
	logText, _ := os.ReadFile(daemon.LogPath(home))
	check("the daemon's log", string(logText))
}

// waitInfo waits for daemon.json of the daemon with pid.
func waitInfo(t *testing.T, home string, pid int) daemonfile.Info {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := daemonfile.Read(home); err == nil && info.PID == pid {
			return info
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the daemon wrote no daemon.json within 30 s")
	return daemonfile.Info{}
}

// TestKillNineKillsRunningCommands kills the daemon while a command runs
// `sleep 5; touch marker`: no process of the command survives, so the
// marker can never appear.
func TestKillNineKillsRunningCommands(t *testing.T) {
	home := t.TempDir()
	wd := t.TempDir()
	script := filepath.Join(home, "script.json")
	os.WriteFile(script, []byte(`{"steps":[
 {"match":"slow command","tool_calls":[{"name":"shell","arguments":{"command":"sleep 5; touch marker"}}]},
 {"match":"escape","tool_calls":[{"name":"shell","arguments":{"command":"setsid sleep 30 & (sleep 5; touch marker2) & sleep 30"}}]},
 {"after_tool":"shell","text":"done"}
]}`), 0o600)
	for _, prompt := range []string{"slow command", "escape"} {
		t.Run(prompt, func(t *testing.T) {
			p := startProc(t, home)
			c := dialInfo(t, p.info)
			id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
			if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": prompt}, nil); err != nil {
				t.Fatal(err)
			}
			collect(t, c.Events(id), "tool.call", 1)
			pgid := waitRecordedGroup(t, home)
			p.kill()
			c.Close()
			// Every process of the group (and, in a PID namespace, every
			// process the command started, setsid ones included) dies with
			// the daemon; once none is left, the marker can never appear.
			deadline := time.Now().Add(10 * time.Second)
			for processesOf(pgid, wd) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("processes of the command survive the daemon: %v", processesOf(pgid, wd))
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, m := range []string{"marker", "marker2"} {
				if _, err := os.Stat(filepath.Join(wd, m)); err == nil {
					t.Errorf("%s appeared", m)
				}
			}
			// The next daemon finds the record of the dead one and reaps
			// (nothing left to kill here), leaving the record empty.
			p2 := startProc(t, home)
			p2.kill()
			if b, _ := os.ReadFile(daemon.CommandsPath(home)); len(strings.TrimSpace(string(b))) != 0 {
				t.Errorf("commands record after restart: %q", b)
			}
		})
	}
}

// waitRecordedGroup waits until the daemon recorded a running command's
// process group and returns it.
func waitRecordedGroup(t *testing.T, home string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(daemon.CommandsPath(home))
		if f := strings.Fields(string(b)); len(f) >= 2 {
			pgid, err := strconv.Atoi(f[0])
			if err == nil {
				return pgid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no running command recorded within 30 s")
	return 0
}

// processesOf lists the live processes of group pgid or running in wd.
func processesOf(pgid int, wd string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		if f[2] == strconv.Itoa(pgid) || cwd == wd {
			out = append(out, fmt.Sprintf("%d %s", pid, s[:i+1]))
		}
	}
	return out
}

// TestClosedStderrDoesNotKillTheDaemon is `trellisd --log-stderr | head`:
// the reader of stderr goes away, the daemon keeps serving.
func TestClosedStderrDoesNotKillTheDaemon(t *testing.T) {
	home := t.TempDir()
	cmd := exec.Command(trellisdBin, "--home", home, "--provider", "fake", "--log-stderr", "--log-level", "debug")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p := &proc{cmd: cmd, home: home}
	t.Cleanup(p.kill)
	info := waitInfo(t, home, cmd.Process.Pid)
	// Like head: read a little, then go away.
	buf := make([]byte, 64)
	if _, err := r.Read(buf); err != nil {
		t.Fatalf("no log line on stderr: %v", err)
	}
	r.Close()
	before, _ := os.ReadFile(daemon.LogPath(home))
	c := dialInfo(t, info)
	id := createSession(t, c, nil)
	turn(t, c, id, "hello")
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the daemon died: %v", err)
	}
	// A graceful stop logs ("trellisd stopping", "trellisd stopped"): a
	// write to the broken pipe that must not kill the daemon on its way.
	c.Call(context.Background(), "system.shutdown", map[string]any{}, nil)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the daemon did not exit cleanly: %v (%v)", err, cmd.ProcessState)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop within 30 s")
	}
	logText, _ := os.ReadFile(daemon.LogPath(home))
	if !strings.Contains(string(logText[len(before):]), "trellisd stopped") {
		t.Fatalf("the log file does not end with the stop: %s", logText[len(before):])
	}
}
