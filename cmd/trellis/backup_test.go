package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/client"
)

// TestBackupRestore: trellis backup during a running turn, then restore
// into a fresh home: the restored sessions go on with no gap in their
// events, the running turn ends there as interrupted; a corrupt file, a
// home that has a store and a file that exists are refused.
func TestBackupRestore(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "run", "hello"); r.code != 0 {
		t.Fatalf("trellis run hello: exit %d: %s", r.code, r.stderr)
	}
	// A turn that runs while the backup is made.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slow := e.command(ctx, "run", "slow")
	stderr, err := slow.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = slow.Wait() }()
	var slowID string
	for sc := bufio.NewScanner(stderr); sc.Scan(); {
		if m := sessionLine.FindStringSubmatch(sc.Text()); m != nil {
			slowID = m[1]
			break
		}
	}
	if slowID == "" {
		t.Fatal("trellis run slow printed no session id")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := e.run("", "sessions", "ls", "--json")
		var list struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
				Status    string `json:"status"`
			} `json:"sessions"`
		}
		_ = json.Unmarshal([]byte(r.stdout), &list)
		running := false
		for _, s := range list.Sessions {
			running = running || (s.SessionID == slowID && s.Status == "running")
		}
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow turn never ran: %s", r.stdout)
		}
	}

	backup := filepath.Join(t.TempDir(), "trellis.backup")
	r := e.run("", "backup", backup)
	if r.code != 0 || !strings.Contains(r.stdout, "2 sessions") {
		t.Fatalf("trellis backup: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the backup file: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	if r := e.run("", "backup", backup); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("a backup over an existing file: exit %d: %s", r.code, r.stderr)
	}

	// Into a fresh home.
	fresh := newEnv(t)
	if r := fresh.run("", "restore", backup); r.code != 0 || !strings.Contains(r.stdout, "2 sessions") {
		t.Fatalf("trellis restore: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := fresh.run("", "restore", backup); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("a restore into a home with a store: exit %d: %s", r.code, r.stderr)
	}
	// The restored session goes on: a new turn in it, from a new daemon.
	if r := fresh.run("", "run", "--session", slowID, "hello"); r.code != 0 {
		t.Fatalf("a turn in the restored session: exit %d: %s", r.code, r.stderr)
	}
	c, err := client.Dial(t.Context(), fresh.home, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var resumed struct {
		Events []struct {
			Seq     int64          `json:"seq"`
			Kind    string         `json:"kind"`
			Payload map[string]any `json:"payload"`
		} `json:"events"`
	}
	if err := c.Call(t.Context(), "session.resume", map[string]any{"sessionId": slowID}, &resumed); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for i, ev := range resumed.Events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the restored log has a gap", i+1, ev.Seq)
		}
		if ev.Kind == "turn.done" {
			reasons = append(reasons, ev.Payload["reason"].(string))
		}
	}
	if strings.Join(reasons, ",") != "interrupted,complete" {
		t.Fatalf("the restored session's turns ended %v, want the running one interrupted, then the new one complete", reasons)
	}

	// A corrupt backup is refused, and nothing is restored.
	bad := filepath.Join(t.TempDir(), "bad.backup")
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096; i < len(data) && i < 4096*8; i++ {
		data[i] ^= 0x5a
	}
	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}
	third := newEnv(t)
	if r := third.run("", "restore", bad); r.code != 1 || !strings.Contains(r.stderr, "cannot be restored") {
		t.Fatalf("restoring a corrupt backup: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(third.home, "trellis.db")); err == nil {
		t.Fatal("a corrupt backup left a store in the home")
	}
}
