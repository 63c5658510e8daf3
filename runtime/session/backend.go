package session

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// SetBackend chooses where the session's tools run and emits
// backend.changed. local and ssh (when Deps.Backends is set) exist; docker
// is refused with unsupported, and nothing changes.
func (s *Service) SetBackend(ctx context.Context, id, kind string, config map[string]any) error {
	switch kind {
	case "local":
		if len(config) > 0 {
			return errs.New(errcode.InvalidParams, "the local backend takes no config (got %d fields)", len(config))
		}
	case "ssh":
		if s.deps.Backends == nil {
			return errs.NewUnsupported("kind", kind, "the ssh backend is not available in this daemon: tools run on the local machine; nothing changed")
		}
	case "docker":
		return errs.NewUnsupported("kind", kind, "the docker backend is not available in this daemon (no Docker Engine support is built in): tools run on the local machine; nothing changed")
	default:
		return errs.New(errcode.InvalidParams, "backend kind %q is not one of local, ssh, docker", kind)
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	public := map[string]any{"kind": kind}
	raw, _ := json.Marshal(public)
	if kind == "ssh" {
		// Connects (known_hosts verified) before anything changes.
		stored, pub, err := s.deps.Backends.Check(ctx, kind, config)
		if err != nil {
			return errs.New(errcode.InvalidParams, "ssh backend: %v; nothing changed", err)
		}
		raw, public = stored, pub
	}
	rm := json.RawMessage(raw)
	if err := s.deps.Store.UpdateSession(s.fenced(ctx, id), id, store.SessionUpdate{Backend: &rm}); err != nil {
		return fmt.Errorf("save backend: %w", s.refused(ctx, id, err))
	}
	l.mu.Lock()
	l.row.Backend = rm
	l.mu.Unlock()
	_, err = s.deps.Events.Append(ctx, id, eventkind.BackendChanged, map[string]any{"backend": public})
	return err
}
