package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/sessionfile"
	"github.com/trellis-run/trellis/runtime/store"
)

// archived is the error of a change to an archived session.
func archived(id string) error {
	return errs.New(errcode.SessionArchived, "session %s is archived: it is read-only until session.unarchive", id)
}

// Archive makes the session read-only (docs/export.md): a running turn is
// interrupted, the session leaves this daemon's live sessions, and
// changes are refused with session_archived until Unarchive.
func (s *Service) Archive(ctx context.Context, id string) error {
	return s.setArchived(ctx, id, true)
}

// Unarchive makes an archived session writable again.
func (s *Service) Unarchive(ctx context.Context, id string) error {
	return s.setArchived(ctx, id, false)
}

func (s *Service) setArchived(ctx context.Context, id string, on bool) error {
	row, err := s.row(ctx, id)
	if err != nil {
		return err
	}
	if row.Archived == on {
		return nil
	}
	if l := s.liveSession(id); l != nil && on {
		s.interrupt(ctx, l, actorOf(ctx))
		l.mu.Lock()
		l.row.Archived = true
		l.mu.Unlock()
	}
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Archived: &on}); err != nil {
		return fmt.Errorf("archive session %s: %w", id, s.refused(ctx, id, err))
	}
	if l := s.liveSession(id); l != nil && !on {
		l.mu.Lock()
		l.row.Archived = false
		l.mu.Unlock()
	}
	return nil
}

// Export writes the session's portable file to w as the store is read
// (runtime/sessionfile).
func (s *Service) Export(ctx context.Context, id string, w io.Writer) (sessionfile.Counts, error) {
	if _, err := s.row(ctx, id); err != nil {
		return sessionfile.Counts{}, err
	}
	n, err := sessionfile.Export(ctx, s.deps.Store, id, w)
	if err != nil {
		return n, fmt.Errorf("export session %s: %w", id, err)
	}
	return n, nil
}

// Import creates a session, owned by owner, from the portable file r
// reads: under newID, or the file's id when newID is "". The whole file is
// checked before anything is written; a damaged one, or an id that
// exists, is invalid_params and imports nothing.
func (s *Service) Import(ctx context.Context, r io.Reader, newID, owner string) (store.Session, sessionfile.Counts, error) {
	if newID != "" {
		if len(newID) > 128 || strings.IndexFunc(newID, func(r rune) bool { return r <= ' ' || r == '/' || r == 0x7f }) >= 0 {
			return store.Session{}, sessionfile.Counts{}, errs.New(errcode.InvalidParams, "sessionId %q: at most 128 characters, no spaces, controls or slashes", newID)
		}
	}
	sess, n, err := sessionfile.Import(ctx, s.deps.Store, r, sessionfile.Options{SessionID: newID, Owner: owner})
	switch {
	case errors.Is(err, sessionfile.ErrCorrupt):
		return sess, n, errs.New(errcode.InvalidParams, "the file was not imported: %v", err)
	case errors.Is(err, store.ErrConflict):
		return sess, n, errs.New(errcode.InvalidParams, "session %s exists: nothing was imported; import under a new id (sessionId)", sess.SessionID).
			WithData("sessionId", sess.SessionID)
	case errors.Is(err, store.ErrInvalid):
		return sess, n, errs.New(errcode.InvalidParams, "the file was not imported: %v", err)
	case err != nil:
		return sess, n, fmt.Errorf("import a session: %w", err)
	}
	return sess, n, nil
}
