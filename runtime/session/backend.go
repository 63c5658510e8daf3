package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// SetBackend chooses where the session's tools run and emits
// backend.changed: local, or ssh and docker when Deps.Backends is set. A
// session that leaves docker (or changes its docker config) loses its
// container; the next command runs in a new one.
func (s *Service) SetBackend(ctx context.Context, id, kind string, config map[string]any) error {
	switch kind {
	case "local":
		if len(config) > 0 {
			return errs.New(errcode.InvalidParams, "the local backend takes no config (got %d fields)", len(config))
		}
	case "ssh", "docker":
		if s.deps.Backends == nil {
			return errs.NewUnsupported("kind", kind, "the %s backend is not available in this daemon: tools run on the local machine; nothing changed", kind)
		}
	default:
		return errs.New(errcode.InvalidParams, "backend kind %q is not one of local, ssh, docker", kind)
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	public := map[string]any{"kind": kind}
	raw, _ := json.Marshal(public)
	if kind != "local" {
		// Connects (ssh: known_hosts verified; docker: the engine has the
		// image) before anything changes.
		stored, pub, err := s.deps.Backends.Check(ctx, kind, config)
		if err != nil {
			if e := (*errs.Error)(nil); errors.As(err, &e) {
				return err
			}
			return errs.New(errcode.InvalidParams, "%s backend: %v; nothing changed", kind, err)
		}
		raw, public = stored, pub
	}
	rm := json.RawMessage(raw)
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Backend: &rm}); err != nil {
		return fmt.Errorf("save backend: %w", s.refused(ctx, id, err))
	}
	l.mu.Lock()
	l.row.Backend = rm
	l.mu.Unlock()
	if s.deps.Backends != nil {
		if err := s.deps.Backends.CloseSession(ctx, id); err != nil {
			s.deps.Log.Warn("backend.set: the session's old container was not removed", "session", id, "err", err)
		}
	}
	_, err = s.deps.Events.Append(ctx, id, eventkind.BackendChanged, map[string]any{"backend": public})
	return err
}
