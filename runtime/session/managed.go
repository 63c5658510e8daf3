package session

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/workspace"
)

// managedRoot makes the managed workdirs' root (Deps.ManagedRoot) and
// returns it absolute, symlinks resolved, as ResolveWorkdir resolves a
// named workdir.
func managedRoot(root string) (string, error) {
	if root == "" {
		return "", nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("workspace root %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("make the workspace root: %w", err)
	}
	return filepath.EvalSymlinks(abs)
}

// managedDir is session id's managed workdir on this daemon.
func (s *Service) managedDir(id string) string {
	return filepath.Join(s.managedRoot, id)
}

// localize gives a managed session's row this daemon's workdir: the row
// stores the creating daemon's, and each daemon keeps its own copy.
func (s *Service) localize(row store.Session) store.Session {
	if row.Workspace == store.WorkspaceManaged && s.managedRoot != "" {
		row.Workdir = s.managedDir(row.SessionID)
	}
	return row
}

// localWorkdir reports whether row's tools run in a directory of this
// machine (the local and docker backends; not ssh).
func localWorkdir(row store.Session) bool {
	var backend struct{ Kind string }
	return len(row.Backend) == 0 || json.Unmarshal(row.Backend, &backend) != nil || backend.Kind != "ssh"
}

// checkWorkdir refuses a prompt to a session whose named (unmanaged)
// workdir does not exist on this daemon: workdir_missing, rather than a
// turn in the wrong place. A managed workdir is rebuilt instead
// (materialise).
func (s *Service) checkWorkdir(row store.Session) error {
	if row.Workspace == store.WorkspaceManaged && s.managedRoot != "" || !localWorkdir(row) {
		return nil
	}
	st, err := os.Stat(row.Workdir)
	if err == nil && st.IsDir() {
		return nil
	}
	return errs.New(errcode.WorkdirMissing,
		"the workdir %s of session %s does not exist on this daemon (another daemon may have taken the session over, or the directory was removed): the prompt was not run; a session created without a workdir has a managed one that follows it (docs/workspaces.md)",
		row.Workdir, row.SessionID).WithData("workdir", row.Workdir)
}

// materialise makes a managed session's workdir on this daemon hold the
// session's latest checkpoint, once per lease, before the turn turnID
// runs: when the directory is missing or its files differ from that
// checkpoint (another daemon ran the session since), the checkpoint is
// restored and a checkpoint event with reason materialise says so.
func (s *Service) materialise(ctx context.Context, l *live, turnID string) error {
	l.mu.Lock()
	row, done := l.row, l.materialised
	l.mu.Unlock()
	if done || row.Workspace != store.WorkspaceManaged || s.managedRoot == "" || !localWorkdir(row) {
		return nil
	}
	if err := os.MkdirAll(row.Workdir, 0o700); err != nil {
		return fmt.Errorf("make the managed workdir of session %s: %w", row.SessionID, err)
	}
	d, ok, err := s.sinceLatestCheckpoint(ctx, row)
	if err != nil {
		return err
	}
	if ok && d.changed() {
		if _, err := workspace.Restore(ctx, row.Workdir, d.then, blobs{s.deps.Store, row.SessionID}); err != nil {
			return fmt.Errorf("restore checkpoint %s: %w", d.latest.CheckpointID, err)
		}
		r := recording{reason: store.CheckpointMaterialise, turnID: turnID, restoredFrom: d.latest.CheckpointID, force: true}
		if _, _, err := s.record(ctx, row, r); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.materialised = true
	l.mu.Unlock()
	return nil
}

// materialised runs materialise for the turn turnID; when it fails the
// turn ends with an error event instead of running in a workdir that is
// not the session's (false).
func (s *Service) materialised(ctx context.Context, l *live, em emitter, turnID string) bool {
	bg := context.WithoutCancel(ctx)
	err := s.materialise(bg, l, turnID)
	if err == nil {
		return true
	}
	s.deps.Log.WarnContext(ctx, "materialise the managed workdir", "sessionId", em.id, "turnId", turnID, "err", err)
	code, msg := errs.CodeOf(err), err.Error()
	var e *errs.Error
	if !errors.As(err, &e) {
		code, msg = errcode.Internal, "the session's managed workdir could not be rebuilt from its latest checkpoint (the daemon's log says why): the turn did not run"
	}
	_ = em.Emit(bg, eventkind.Error, events.ErrorEvent{Code: code, Message: msg})
	s.closeTurn(bg, em, turnID, events.TurnDoneReasonError)
	return false
}

// managed reports whether wd is session id's managed workdir on this
// daemon.
func (s *Service) managed(id, wd string) bool {
	return s.managedRoot != "" && wd == s.managedDir(id)
}

// removeManaged removes session id's managed workdir on this daemon, once
// the session is gone from the store: it is only a copy of the session's
// checkpoints. A symlink in its place is left as it is, never followed.
func (s *Service) removeManaged(ctx context.Context, id string) error {
	dir := s.managedDir(id)
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && !st.IsDir() {
		return nil
	}
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err != nil {
		s.deps.Log.WarnContext(ctx, "remove the managed workdir of a deleted session", "sessionId", id, "dir", dir, "err", err)
		return err
	}
	s.deps.Log.InfoContext(ctx, "removed the managed workdir of a deleted session", "sessionId", id, "dir", dir)
	return nil
}

// SweepManagedWorkdirs removes the managed workdirs this daemon keeps for
// sessions that no longer exist: each daemon that ran a session keeps its
// own copy, and only the deleting daemon removes its copy at once. Only a
// directory directly under the workspace root named like a session id
// that the store answers not found for is removed; a symlink is never
// followed. A store error stops the sweep: nothing is removed on doubt.
func (s *Service) SweepManagedWorkdirs(ctx context.Context) error {
	if s.managedRoot == "" {
		return nil
	}
	entries, err := os.ReadDir(s.managedRoot)
	if err != nil {
		return fmt.Errorf("read the workspace root: %w", err)
	}
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || !isSessionID(id) {
			continue
		}
		// Listed after Create made it: unless Create is still saving its
		// session, the store has the row.
		s.mu.Lock()
		creating := s.creating[id]
		s.mu.Unlock()
		if creating {
			continue
		}
		_, err := s.deps.Store.GetSession(ctx, id)
		if err == nil {
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("load session %s: %w", id, err)
		}
		_ = s.removeManaged(ctx, id) // logged
	}
	return nil
}

// isSessionID reports whether name has the form of a session id
// (ids.New("s")).
func isSessionID(name string) bool {
	hexPart, ok := strings.CutPrefix(name, "s-")
	if !ok || len(hexPart) != 16 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}
