package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/tool"
)

// treeForms are commands that would write marker 3 s after they start, in
// the ways a command can keep running: the next step of its shell, a
// background job, a subshell, a process in a session of its own.
var treeForms = []struct {
	name, command string
	needsNS       bool // it leaves the process group: only a PID namespace holds it
}{
	{name: "plain", command: `echo started; sleep 3; touch marker`},
	{name: "background", command: `(sleep 3; touch marker) & echo started; wait`},
	{name: "subshell", command: `echo started; (sleep 3; touch marker)`},
	{name: "setsid", command: `setsid sh -c 'sleep 3; touch marker' & echo started; wait`, needsNS: true},
}

// treeScript is a fake model that runs each form on the prompt
// "<how> <form>"; "timeout" calls give the command timeoutSec timeout, and
// the marker is written sleep seconds after the command starts.
func treeScript(sleep, timeout int) string {
	var steps []string
	for _, f := range treeForms {
		for _, how := range []string{"interrupt", "timeout", "sigterm"} {
			args := map[string]any{"command": strings.ReplaceAll(f.command, "sleep 3", fmt.Sprintf("sleep %d", sleep))}
			if how == "timeout" {
				args["timeoutSec"] = timeout
			}
			step := map[string]any{"match": how + " " + f.name,
				"tool_calls": []any{map[string]any{"name": "shell", "arguments": args}}}
			b, err := json.Marshal(step)
			if err != nil {
				panic(err)
			}
			steps = append(steps, string(b))
		}
	}
	steps = append(steps, `{"after_tool":"shell","text":"done"}`)
	return `{"steps":[` + strings.Join(steps, ",\n") + `],"repeat":true}`
}

// waitStarted reads a session's events until its command printed
// "started", and returns them.
func waitStarted(t *testing.T, ch <-chan map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-ch:
			out = append(out, ev)
			if ev["kind"] == "tool.progress" && strings.Contains(fmt.Sprint(payloadOf(ev)["chunk"]), "started") {
				return out
			}
			if ev["kind"] == "turn.done" {
				var results []any
				for _, e := range out {
					if e["kind"] == "tool.result" {
						results = append(results, payloadOf(e))
					}
				}
				t.Fatalf("the turn ended before its command started: %v; tool results %v", eventKinds(out), results)
			}
		case <-timeout:
			t.Fatalf("the command printed nothing within 30 s: %v", eventKinds(out))
		}
	}
}

// assertNothingLeft checks that no process runs in wd and that marker is
// not there: with nothing of the command left, it can never appear.
func assertNothingLeft(t *testing.T, wd string) {
	t.Helper()
	if left := processesOf(-1, wd); left != nil {
		t.Errorf("processes of the command are left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(wd, "marker")); err == nil {
		t.Error("the command went on after it was stopped: marker appeared")
	}
}

// TestInterruptTimeoutAndSigtermStopTheWholeCommand: session.interrupt, a
// command's timeoutSec and SIGTERM to the daemon end every process of a
// running `sleep 3; touch marker` — plain, in the background, in a
// subshell, under setsid — before the turn ends: once its tool.result
// (interrupt, timeout) is out, or the daemon has exited (SIGTERM), no
// process of the command is left and the marker never appears; the result
// says how the processes were ended.
func TestInterruptTimeoutAndSigtermStopTheWholeCommand(t *testing.T) {
	ns := tool.ProbeSandbox().PIDNamespace
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "script.json"), []byte(treeScript(3, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	for _, f := range treeForms {
		for _, how := range []string{"interrupt", "timeout"} {
			t.Run(how+"/"+f.name, func(t *testing.T) {
				if f.needsNS && !ns {
					t.Skip("commands get no PID namespace here: a setsid process leaves the process group")
				}
				wd := t.TempDir()
				id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
				if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": how + " " + f.name}, nil); err != nil {
					t.Fatal(err)
				}
				waitStarted(t, c.Events(id))
				if how == "interrupt" {
					if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
						t.Fatal(err)
					}
				}
				evs := collect(t, c.Events(id), "tool.result", 1)
				res := payloadOf(evs[len(evs)-1])
				want := map[string]string{"interrupt": "the command was interrupted; ", "timeout": "the command timed out after 1s; "}[how]
				msg := fmt.Sprint(res["error"])
				if res["ok"] != false || !strings.HasPrefix(msg, want) || !strings.Contains(msg, "none") {
					t.Errorf("tool.result %v: want a failure starting %q and saying none of the command is left", res, want)
				}
				// The tool.result is sent once the command's processes are
				// gone: nothing is left that could write the marker later.
				assertNothingLeft(t, wd)
				collect(t, c.Events(id), "turn.done", 1)
			})
		}
	}
	c.Close()
	p.kill()

	// SIGTERM: the daemon interrupts every running turn before it exits.
	t.Run("sigterm", func(t *testing.T) {
		home := t.TempDir()
		if err := os.WriteFile(filepath.Join(home, "script.json"), []byte(treeScript(3, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startProc(t, home)
		c := dialInfo(t, p.info)
		defer c.Close()
		var wds []string
		for _, f := range treeForms {
			if f.needsNS && !ns {
				continue
			}
			wd := t.TempDir()
			wds = append(wds, wd)
			id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
			if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "sigterm " + f.name}, nil); err != nil {
				t.Fatal(err)
			}
			waitStarted(t, c.Events(id))
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- p.cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Fatal("the daemon did not exit within 60 s of SIGTERM")
		}
		// The daemon stopped its commands before it exited (it waits for
		// the turns it interrupted).
		for _, wd := range wds {
			assertNothingLeft(t, wd)
		}
	})
}

// The ssh commands sleep longer and time out later than the local ones: the
// timeout counts from the tool's start, ssh's connection and remote shell
// included, which took over a second on a loaded CI machine.
const sshSleep, sshTimeout = 8, 4

// TestSSHInterruptAndTimeoutStopTheRemoteCommand: on an ssh backend,
// session.interrupt and timeoutSec end the remote command's whole process
// group — the shell that would run the next step, background jobs,
// subshells — before its tool.result: then no process of it runs in the
// remote workdir and the marker never appears.
func TestSSHInterruptAndTimeoutStopTheRemoteCommand(t *testing.T) {
	port, key, known := startSSHD(t)
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	if err := os.WriteFile(script, []byte(treeScript(sshSleep, sshTimeout)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	ctx := context.Background()
	for _, f := range treeForms {
		if f.needsNS {
			continue // setsid leaves the remote process group: out of reach (docs/security.md)
		}
		for _, how := range []string{"interrupt", "timeout"} {
			t.Run(how+"/"+f.name, func(t *testing.T) {
				remote := t.TempDir()
				id := createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "auto"})
				cfg := map[string]any{"host": "127.0.0.1", "port": port, "user": "root", "keyPath": key, "knownHostsPath": known, "workdir": remote}
				if err := c.Call(ctx, "backend.set", map[string]any{"sessionId": id, "kind": "ssh", "config": cfg}, nil); err != nil {
					t.Fatalf("backend.set ssh: %v", err)
				}
				if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": how + " " + f.name}, nil); err != nil {
					t.Fatal(err)
				}
				waitStarted(t, c.Events(id))
				if how == "interrupt" {
					if err := c.Call(ctx, "session.interrupt", map[string]any{"sessionId": id}, nil); err != nil {
						t.Fatal(err)
					}
				}
				evs := collect(t, c.Events(id), "tool.result", 1)
				res := payloadOf(evs[len(evs)-1])
				msg := fmt.Sprint(res["error"])
				want := map[string]string{"interrupt": "the command was interrupted; ", "timeout": fmt.Sprintf("the command timed out after %ds; ", sshTimeout)}[how]
				if res["ok"] != false || !strings.HasPrefix(msg, want) || !strings.Contains(msg, "none of it is left") {
					t.Errorf("tool.result %v: want a failure starting %q saying none of the command is left", res, want)
				}
				if strings.Contains(fmt.Sprint(res["output"]), "trellis-pgid") {
					t.Errorf("the output shows the process-group line: %v", res["output"])
				}
				assertNothingLeft(t, remote)
				collect(t, c.Events(id), "turn.done", 1)
			})
		}
	}
}
