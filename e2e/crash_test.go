package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

var trellisdBin string

func TestMain(m *testing.M) {
	mcptest.MaybeServe() // the MCP tests run this binary as their stdio MCP server
	// One build per test run, shared with the other packages (testbin).
	var err error
	if trellisdBin, err = testbin.Path(testbin.Trellisd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// proc is a daemon running as a child process.
type proc struct {
	cmd  *exec.Cmd
	home string
	info daemonfile.Info
}

func startProc(t *testing.T, home string, extra ...string) *proc {
	t.Helper()
	return startProcBin(t, trellisdBin, home, extra...)
}

// startProcBin runs the trellisd binary bin (another build than this
// test's, for an upgrade) on home.
func startProcBin(t *testing.T, bin, home string, extra ...string) *proc {
	t.Helper()
	script := filepath.Join(home, "script.json")
	if _, err := os.Stat(script); err != nil {
		text := strings.ReplaceAll(testScript, "SLOWTEXT", strings.Repeat("slow ", 600))
		text = strings.ReplaceAll(text, "MANYTEXT", strings.Repeat("many ", 3000))
		os.WriteFile(script, []byte(text), 0o600)
	}
	cmd := exec.Command(bin, append([]string{"--home", home, "--provider", "fake:" + script}, extra...)...)
	cmd.Stderr = os.Stderr
	logOnFailure(t, home)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, home: home}
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := daemonfile.Read(home); err == nil && info.PID == cmd.Process.Pid {
			p.info = info
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the daemon wrote no daemon.json within 60 s")
	return nil
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

func TestKillNineMidTurnThenResume(t *testing.T) {
	home := t.TempDir()
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	id := createSession(t, c, nil)
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)
	collect(t, c.Events(id), "turn.done", 1)
	var turn struct {
		TurnID string `json:"turnId"`
	}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, &turn)
	evs := collect(t, c.Events(id), "message.delta", 5)
	seen := seqOf(evs[len(evs)-1])
	p.kill()
	// Resume from before the kill: the stored events after k come back
	// (at least those this client saw live), then the synthetic turn.done.
	k := seen - 3
	c.Close()

	p2 := startProc(t, home)
	c2 := dialInfo(t, p2.info)
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c2.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": k}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Events) == 0 {
		t.Fatal("resume returned nothing, not even the synthetic turn.done")
	}
	for i, ev := range res.Events {
		if seqOf(ev) != k+1+int64(i) {
			t.Fatalf("resume: seq %d at position %d (afterSeq %d)", seqOf(ev), i, k)
		}
	}
	if got := seqOf(res.Events[len(res.Events)-1]); got <= seen {
		t.Fatalf("resume ended at seq %d, before the seq %d seen live", got, seen)
	}
	last := res.Events[len(res.Events)-1]
	lp := payloadOf(last)
	if last["kind"] != "turn.done" || lp["reason"] != "interrupted" || lp["synthetic"] != true || lp["turnId"] != turn.TurnID {
		t.Fatalf("last resumed event: %v", last)
	}
	t.Logf("killed at seq %d; resume returned %d events, the last a synthetic turn.done", k, len(res.Events))

	// The next prompt continues the earlier conversation: its model input
	// is larger than the same prompt's in a fresh session.
	c2.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil)
	after := collect(t, c2.Events(id), "turn.done", 1)
	fresh := createSession(t, c2, nil)
	c2.Call(ctx, "session.prompt", map[string]any{"sessionId": fresh, "text": "hello"}, nil)
	freshEvs := collect(t, c2.Events(fresh), "turn.done", 1)
	if in, freshIn := inputTokens(after), inputTokens(freshEvs); in <= freshIn {
		t.Fatalf("restored session's input %v tokens, fresh session's %v: the history was not carried over", in, freshIn)
	}
	if payloadOf(after[len(after)-1])["reason"] != "complete" {
		t.Fatalf("turn after restart: %v", eventKinds(after))
	}
}

func inputTokens(evs []map[string]any) float64 {
	for _, ev := range evs {
		if ev["kind"] == "usage" {
			return payloadOf(ev)["inputTokens"].(float64)
		}
	}
	return -1
}

// dialInfo connects the gRPC test client to a daemon described by daemon.json.
func dialInfo(t *testing.T, info daemonfile.Info) *grpcClient {
	t.Helper()
	return dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", info.GRPCPort), info.Token)
}
