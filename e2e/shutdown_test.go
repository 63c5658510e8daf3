package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// TestShutdownGraceful: system.shutdown answers first, then the daemon
// stops: the running turn ends interrupted and synthetic, the store is
// flushed, daemon.json is removed, and the session resumes after a restart.
func TestShutdownGraceful(t *testing.T) {
	home := t.TempDir()
	p := startProc(t, home)
	c := dialInfo(t, p.info)
	ctx := context.Background()
	id := createSession(t, c, nil)
	var turn struct {
		TurnID string `json:"turnId"`
	}
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, &turn)
	collect(t, c.Events(id), "message.delta", 2)
	var ok struct {
		Ok bool `json:"ok"`
	}
	if err := c.Call(ctx, "system.shutdown", map[string]any{}, &ok); err != nil || !ok.Ok {
		t.Fatalf("system.shutdown: %v %v", ok, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the daemon exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop within 15 s of system.shutdown")
	}
	if _, err := os.Stat(filepath.Join(home, "daemon.json")); !os.IsNotExist(err) {
		t.Fatalf("daemon.json left behind: %v", err)
	}
	p2 := startProc(t, home)
	c2 := dialInfo(t, p2.info)
	var res struct {
		Events []map[string]any `json:"events"`
	}
	if err := c2.Call(ctx, "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatal(err)
	}
	var done []map[string]any
	for _, ev := range res.Events {
		if ev["kind"] == "turn.done" {
			done = append(done, payloadOf(ev))
		}
	}
	if len(done) != 1 || done[0]["turnId"] != turn.TurnID || done[0]["reason"] != "interrupted" || done[0]["synthetic"] != true {
		t.Fatalf("turn.done after shutdown and restart: %v", done)
	}
}

// TestShutdownReplyReachesWebSocket: the reply to system.shutdown is
// written before the facade closes the connection.
func TestShutdownReplyReachesWebSocket(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	done := make(chan struct{})
	go func() {
		<-d.Stopping()
		d.Stop()
		close(done)
	}()
	var ok struct {
		Ok bool `json:"ok"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Call(ctx, "system.shutdown", nil, &ok); err != nil || !ok.Ok {
		t.Fatalf("system.shutdown over WebSocket: %v %v", ok, err)
	}
	<-done
}

// TestStopLeavesNothingRunning: a daemon with many connections watching a
// session, one of them in a running turn, stops; once Stop has returned no
// handler of its is left to write into its home (its log included): its
// goroutines end, and nothing in its home changed after Stop returned. The
// streams its shutdown ended are logged as a shutdown, not as internal
// errors.
func TestStopLeavesNothingRunning(t *testing.T) {
	earlier := daemonGoroutines()
	d := startDaemon(t)
	home := d.Home()
	id := createSession(t, dialGRPC(t, d), nil)
	for range 50 {
		c := helloWS(t, d)
		if err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := helloWS(t, d)
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "slow"}, nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(id), "message.delta", 2)
	d.Stop()

	sizes := func() map[string]int64 {
		m := map[string]int64{}
		_ = filepath.Walk(home, func(p string, info os.FileInfo, err error) error {
			if info != nil {
				m[p] = info.Size()
			}
			return nil
		})
		return m
	}
	before := sizes()
	// A handler left running is a goroutine of this daemon's: wait for
	// them to end, then look at what they wrote.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var left []string
		for id, stack := range daemonGoroutines() {
			if _, ok := earlier[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the daemon still run 10 s after Stop returned:\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
	for path, size := range sizes() {
		if before[path] != size {
			t.Errorf("%s changed after Stop returned (%d → %d bytes)", path, before[path], size)
		}
	}
	log, err := os.ReadFile(daemon.LogPath(home))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, `"internal error"`) {
			t.Errorf("the daemon's stop logged an internal error: %s", line)
		}
	}
}

// daemonGoroutines returns, by goroutine id, the stacks of this process's
// goroutines that run a daemon's code: a frame of theirs, or the one that
// started them, is in daemon/, runtime/ or facade/.
func daemonGoroutines() map[string]string {
	buf := make([]byte, 16<<20)
	out := map[string]string{}
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if !strings.Contains(g, "trellis/daemon") && !strings.Contains(g, "trellis/runtime/") && !strings.Contains(g, "trellis/facade") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		out[id] = g
	}
	return out
}
