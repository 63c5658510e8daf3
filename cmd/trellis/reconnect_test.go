package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testbin"
)

// daemonProc is `trellis daemon` run as a child process, so that a test can
// kill -9 it.
type daemonProc struct {
	cmd  *exec.Cmd
	info daemonfile.Info
}

func startDaemonProc(t *testing.T, e *env, port int, flags ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"daemon", "--home", e.home, "--provider", "fake:" + e.script, "--port", strconv.Itoa(port)}, flags...)...)
	cmd.Env = cleanEnv()
	cmd.Stderr = os.Stderr
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{cmd: cmd}
	t.Cleanup(p.kill)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := daemonfile.Read(e.home); err == nil && info.PID == cmd.Process.Pid {
			p.info = info
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the daemon wrote no daemon.json within 60 s")
	return nil
}

func (p *daemonProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// freePort returns a loopback port that was free a moment ago and is not
// avoid.
// TestClientReconnectsAfterKillNine pins the Go client's reconnect (issue
// 18): the daemon is killed with SIGKILL mid-turn and restarted on another
// port; the client re-reads daemon.json, reconnects, resumes the session
// from its last seq and delivers every event once, in order, up to the
// turn.done the restarted daemon writes; a call made during the outage
// resolves after the restart.
func TestClientReconnectsAfterKillNine(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() { _ = os.Remove(filepath.Join(e.home, "daemon.json")) }) // no `trellis stop` of a killed daemon
	p1 := startDaemonProc(t, e, 0)

	var mu sync.Mutex
	var states []client.ConnState
	disconnected := make(chan struct{})
	var sawDrop sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, e.home, client.Options{Reconnect: true, OnConnState: func(st client.ConnState, _ error) {
		mu.Lock()
		if st == client.Disconnected {
			sawDrop.Do(func() { close(disconnected) })
		}
		states = append(states, st)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.CreateSession(ctx, client.CreateSessionParams{Workdir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	turnID, err := c.Prompt(ctx, sub.SessionID(), "paced")
	if err != nil {
		t.Fatal(err)
	}
	var got []client.Event
	next := func() client.Event {
		t.Helper()
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		if n := len(got); n > 0 && ev.Seq != got[n-1].Seq+1 {
			t.Fatalf("seq %d follows %d", ev.Seq, got[n-1].Seq)
		}
		got = append(got, ev)
		return ev
	}
	for deltas := 0; deltas < 5; {
		if next().Kind == "message.delta" {
			deltas++
		}
	}

	p1.kill()
	// The outage as the client sees it: a call made before the client has
	// noticed the drop may already be on the dead connection, and fails
	// (it may have run; the client does not send it twice).
	select {
	case <-disconnected:
	case <-ctx.Done():
		t.Fatal("the client never saw the connection drop")
	}
	outage := make(chan error, 1)
	go func() { // a call during the outage waits for the new connection
		_, err := c.ListSessions(ctx, true, "")
		outage <- err
	}()
	p2 := startDaemonProc(t, e, testbin.FreePort(t, p1.info.Port))
	if p2.info.Port == p1.info.Port {
		t.Fatalf("the daemon came back on the same port %d", p2.info.Port)
	}
	for {
		ev := next()
		if ev.Kind == "turn.done" && ev.TurnID() == turnID {
			if !strings.Contains(string(ev.Payload), `"interrupted"`) {
				t.Fatalf("turn.done after the restart: %s", ev.Payload)
			}
			break
		}
	}
	if err := <-outage; err != nil {
		t.Fatalf("the call made during the outage: %v", err)
	}
	if c.Info().Port != p2.info.Port {
		t.Fatalf("client on port %d, daemon on %d", c.Info().Port, p2.info.Port)
	}
	// The session goes on on the new daemon, through the same client.
	turn2, err := c.Prompt(ctx, sub.SessionID(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev := next()
		if ev.Kind == "turn.done" && ev.TurnID() == turn2 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) < 2 || states[0] != client.Disconnected || states[len(states)-1] != client.Reconnected {
		t.Fatalf("connection states %v", states)
	}
	t.Logf("%d events in order across the restart; states %v", len(got), states)
}

// TestClientGivesUp pins that a reconnecting client whose daemon does not
// come back fails its calls with ErrUnreachable once ReconnectFor passed.
func TestClientGivesUp(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() { _ = os.Remove(filepath.Join(e.home, "daemon.json")) })
	p := startDaemonProc(t, e, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, e.home, client.Options{Reconnect: true, ReconnectFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.kill()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the client did not give up")
	}
	_, err = c.ListSessions(ctx, false, "")
	if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "daemon unreachable") {
		t.Fatalf("call after giving up: %v", err)
	}
}
