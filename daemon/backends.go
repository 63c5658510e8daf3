package daemon

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/sshbackend"
)

// backends runs the ssh tool backend: it checks backend.set's config and
// gives sessions on it their remote tools.
type backends struct {
	pool *sshbackend.Pool
	mu   sync.Mutex
	regs map[sshbackend.Config]*tool.Registry
}

func newBackends() *backends {
	return &backends{pool: sshbackend.NewPool(), regs: map[sshbackend.Config]*tool.Registry{}}
}

// Check implements session.Backends.
func (b *backends) Check(ctx context.Context, _ string, config map[string]any) (json.RawMessage, map[string]any, error) {
	c, err := sshbackend.ParseConfig(config)
	if err != nil {
		return nil, nil, err
	}
	if err := b.pool.Check(ctx, c); err != nil {
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
	var c sshbackend.Config
	if json.Unmarshal(s.Backend, &c) != nil || c.Kind != "ssh" {
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

func (b *backends) Close() { b.pool.Close() }
