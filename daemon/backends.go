package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/dockerbackend"
	"github.com/trellis-run/trellis/runtime/tool/sshbackend"
)

// backends runs the remote tool backends (ssh, docker): it checks
// backend.set's config and gives sessions on them their tools.
type backends struct {
	pool   *sshbackend.Pool
	docker *dockerbackend.Engine
	mu     sync.Mutex
	regs   map[sshbackend.Config]*tool.Registry
}

func newBackends(docker *dockerbackend.Engine) *backends {
	return &backends{pool: sshbackend.NewPool(), docker: docker, regs: map[sshbackend.Config]*tool.Registry{}}
}

// Check implements session.Backends.
func (b *backends) Check(ctx context.Context, kind string, config map[string]any) (json.RawMessage, map[string]any, error) {
	if kind == "docker" {
		c, err := dockerbackend.ParseConfig(config)
		if err != nil {
			return nil, nil, err
		}
		if err := b.docker.Check(ctx, c); err != nil {
			if dockerbackend.ErrLeftOut(err) {
				return nil, nil, errs.NewUnsupported("kind", kind, "%s; nothing changed", err)
			}
			return nil, nil, err
		}
		raw, _ := json.Marshal(c)
		return raw, c.Public(), nil
	}
	c, err := sshbackend.ParseConfig(config)
	if err != nil {
		return nil, nil, err
	}
	if err := b.pool.Check(ctx, c); err != nil {
		if sshbackend.ErrLeftOut(err) {
			return nil, nil, errs.NewUnsupported("kind", kind, "%s; nothing changed", err)
		}
		return nil, nil, err
	}
	raw, _ := json.Marshal(c)
	return raw, c.Public(), nil
}

// Registry implements toolbox.Backend.
func (b *backends) Registry(_ context.Context, s session.Info) *tool.Registry {
	if len(s.Backend) == 0 {
		return nil
	}
	var kind struct{ Kind string }
	if json.Unmarshal(s.Backend, &kind) != nil {
		return nil
	}
	switch kind.Kind {
	case "docker":
		var c dockerbackend.Config
		if err := json.Unmarshal(s.Backend, &c); err != nil {
			return dockerbackend.Unavailable(fmt.Errorf("its stored config does not parse: %v", err))
		}
		r, err := b.docker.Registry(s.SessionID, s.Workdir, c)
		if err != nil {
			return dockerbackend.Unavailable(err)
		}
		return r
	case "ssh":
	default:
		return nil
	}
	var c sshbackend.Config
	if json.Unmarshal(s.Backend, &c) != nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.regs[c]; r != nil {
		return r
	}
	r, err := b.pool.Registry(c)
	if err != nil {
		return nil
	}
	b.regs[c] = r
	return r
}

// CloseSession implements session.Backends: the session's container, if it
// has one, is removed.
func (b *backends) CloseSession(ctx context.Context, id string) error {
	return b.docker.CloseSession(ctx, id)
}

// Close closes the ssh connections and removes every container.
func (b *backends) Close() error {
	b.pool.Close()
	return b.docker.Close()
}

// dockerOwner names this daemon on a Docker Engine (its containers' owner
// label): its host and its home, which a restart keeps.
func dockerOwner(home string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	return host + ":" + home
}
