package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/trellis-run/trellis/daemon"
)

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
