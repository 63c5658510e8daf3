package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// TestManagedWorkdirsOfGoneSessionsSweptAtStart: a daemon starting
// removes what its workspace root keeps of sessions deleted while it was
// down (by another daemon): a directory named like a session id that the
// store does not have. A directory not named like a session id and a
// symlink (never followed) are left.
func TestManagedWorkdirsOfGoneSessionsSweptAtStart(t *testing.T) {
	home, root := t.TempDir(), t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep.txt"), []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stale, notes, link := filepath.Join(root, "s-0123456789abcdef"), filepath.Join(root, "notes"), filepath.Join(root, "s-fedcba9876543210")
	for _, dir := range []string{stale, notes} {
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	startDaemonHome(t, home, daemon.Config{WorkspaceRoot: root})
	if exists(t, stale) {
		t.Fatalf("the daemon started and kept %s, the managed workdir of a session it does not have", stale)
	}
	if !exists(t, notes) || !exists(t, link) || !exists(t, filepath.Join(outside, "keep.txt")) {
		t.Fatalf("the start sweep removed a directory not named like a session id, a symlink or what it points to")
	}
}

// TestManagedWorkdirGoesWithItsSession: on one daemon, session.deleteSaved
// without deleteWorkspace removes the deleted session's managed workdir
// (the daemon's copy of its checkpoints, not a directory of the user's),
// and leaves another session's.
func TestManagedWorkdirGoesWithItsSession(t *testing.T) {
	home, root := t.TempDir(), t.TempDir()
	d := startDaemonHome(t, home, daemon.Config{WorkspaceRoot: root})
	c := dialGRPC(t, d)
	ctx := context.Background()
	gone, kept := createManaged(t, c), createManaged(t, c)
	for _, id := range []string{gone, kept} {
		if !exists(t, filepath.Join(root, id)) {
			t.Fatalf("session %s has no managed workdir in %s", id, root)
		}
	}
	closeSession := func(id string) {
		t.Helper()
		if err := c.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	closeSession(gone)
	var res struct {
		Deleted           int `json:"deleted"`
		WorkspacesDeleted int `json:"workspacesDeleted"`
	}
	if err := c.Call(ctx, "session.deleteSaved", map[string]any{"sessionId": gone}, &res); err != nil || res.Deleted != 1 {
		t.Fatalf("session.deleteSaved: %+v %v", res, err)
	}
	if exists(t, filepath.Join(root, gone)) {
		t.Fatalf("session %s was deleted and its managed workdir is still there", gone)
	}
	if res.WorkspacesDeleted != 0 {
		t.Fatalf("workspacesDeleted %d without deleteWorkspace", res.WorkspacesDeleted)
	}
	if !exists(t, filepath.Join(root, kept)) {
		t.Fatalf("deleting session %s removed session %s's managed workdir", gone, kept)
	}
}

// TestPostgresManagedWorkdirSweptAfterDeleteElsewhere: two daemons on one
// PostgreSQL database, each with its own workspace root. A managed
// session runs on A, moves to B while A restarts (B makes its own copy),
// and is deleted through B, which removes its copy: A's periodic sweep
// then removes A's copy, and leaves the copy of another session that A
// runs.
func TestPostgresManagedWorkdirSweptAfterDeleteElsewhere(t *testing.T) {
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	ctx := context.Background()
	homeA, rootA := t.TempDir(), t.TempDir()
	cfgA := daemon.Config{Store: dsn, Lease: clusterLease, WorkspaceRoot: rootA, WorkspaceSweepEvery: 50 * time.Millisecond}
	da := startDaemonScript(t, homeA, cfgA, managedScript)
	pb, rootB := startMachine(t, dsn)
	a, b := dialGRPC(t, da), dialInfo(t, pb.info)

	id, other := createManaged(t, a), createManaged(t, a)
	db := clusterDB(t, dsn)
	turn := func(c *grpcClient, session, text string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var res struct {
			TurnID string `json:"turnId"`
		}
		for {
			err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": session, "text": text}, &res)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("prompt %q to %s: still refused after 60 s: %v", text, session, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		waitSessionEvents(t, db, session, func(evs []storedEvent) bool {
			for _, e := range evs {
				if e.kind == "turn.done" && e.turnID == res.TurnID {
					if e.reason != "complete" {
						t.Fatalf("turn %q of %s ended %s", text, session, e.reason)
					}
					return true
				}
			}
			return false
		}, "turn.done of "+text)
	}
	turn(a, id, "write turn")
	if got := readFileString(t, filepath.Join(rootA, id, "sub", "b.txt")); got != "beta\n" {
		t.Fatalf("daemon A's managed workdir holds %q", got)
	}

	// A stops (its leases go back at once): B takes the session over and
	// makes its copy. A starts again, while the session still exists.
	da.Stop()
	turn(b, id, "read turn")
	if got := readFileString(t, filepath.Join(rootB, id, "a.txt")); got != "alpha\n" {
		t.Fatalf("daemon B's managed workdir a.txt = %q", got)
	}
	da = startDaemonScript(t, homeA, cfgA, managedScript)
	a = dialGRPC(t, da)
	if !exists(t, filepath.Join(rootA, id)) {
		t.Fatalf("daemon A removed the managed workdir of session %s, which exists", id)
	}
	turn(a, other, "hello")

	if err := b.Call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Deleted int `json:"deleted"`
	}
	if err := b.Call(ctx, "session.deleteSaved", map[string]any{"sessionId": id}, &res); err != nil || res.Deleted != 1 {
		t.Fatalf("session.deleteSaved through B: %+v %v", res, err)
	}
	if exists(t, filepath.Join(rootB, id)) {
		t.Fatalf("daemon B deleted session %s and kept its managed workdir", id)
	}
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for exists(t, filepath.Join(rootA, id)) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon A still keeps the managed workdir of deleted session %s after 60 s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("daemon A removed its copy of deleted session %s after %v", id, time.Since(start).Round(time.Millisecond))
	if !exists(t, filepath.Join(rootA, other)) {
		t.Fatalf("daemon A's sweep removed the managed workdir of session %s, which it runs", other)
	}
}

// createManaged creates a session without a workdir (managed), in mode
// auto.
func createManaged(t *testing.T, c *grpcClient) string {
	t.Helper()
	var res struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(context.Background(), "session.create", map[string]any{"mode": "auto"}, &res); err != nil {
		t.Fatalf("session.create without a workdir: %v", err)
	}
	return res.SessionID
}

// exists reports whether path exists (a symlink counts, not followed).
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}
