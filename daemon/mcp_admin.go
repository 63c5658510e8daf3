package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
)

// The changes of the daemon's MCP servers (mcp.add, mcp.update,
// mcp.remove, mcp.reload, mcp.test). They rewrite <home>/mcp.json, the file
// every start reads; the servers of --mcp-config are read only.

// Path is the file the changes rewrite.
func (x *mcpServers) Path() string { return x.path }

// Saved returns the configuration of a server of <home>/mcp.json.
func (x *mcpServers) Saved(name string) (mcp.ServerConfig, error) {
	if err := x.editable(name); err != nil {
		return mcp.ServerConfig{}, err
	}
	saved, err := x.load()
	if err != nil {
		return mcp.ServerConfig{}, err
	}
	cfg, ok := saved[name]
	if !ok {
		return mcp.ServerConfig{}, errs.New(errcode.NotFound, "no MCP server %q in %s (mcp.list shows the servers)", name, x.path)
	}
	return cfg, nil
}

// Put writes server name into <home>/mcp.json and (re)starts it; an
// existing entry is replaced only when replace is set.
func (x *mcpServers) Put(ctx context.Context, name string, cfg mcp.ServerConfig, replace bool) error {
	if err := mcp.ValidName(name); err != nil {
		return errs.New(errcode.InvalidParams, "%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return errs.New(errcode.InvalidParams, "MCP server %s: %v", name, err)
	}
	return x.update(name, func(saved mcp.Servers) (*mcp.ServerConfig, error) {
		if _, ok := saved[name]; ok && !replace {
			return nil, errs.New(errcode.InvalidParams, "an MCP server named %s is already configured; pass force to replace it, or use mcp.update", name)
		}
		return &cfg, nil
	})
}

// Delete removes server name from <home>/mcp.json and stops it.
func (x *mcpServers) Delete(ctx context.Context, name string) error {
	return x.update(name, func(saved mcp.Servers) (*mcp.ServerConfig, error) {
		if _, ok := saved[name]; !ok {
			return nil, errs.New(errcode.NotFound, "no MCP server %q in %s (mcp.list shows the servers)", name, x.path)
		}
		return nil, nil
	})
}

// update rewrites server name's entry of <home>/mcp.json under the edit
// lock and applies it: change reads the saved servers and returns the new
// entry (the server is (re)started) or nil (the entry is removed and the
// server stopped).
func (x *mcpServers) update(name string, change func(saved mcp.Servers) (*mcp.ServerConfig, error)) error {
	if err := x.editable(name); err != nil {
		return err
	}
	x.edit.Lock()
	defer x.edit.Unlock()
	saved, err := x.load()
	if err != nil {
		return err
	}
	cfg, err := change(saved)
	if err != nil {
		return err
	}
	if cfg != nil {
		saved[name] = *cfg
	} else {
		delete(saved, name)
	}
	if err := x.save(saved); err != nil {
		return err
	}
	x.swap(name, cfg)
	return nil
}

// Restart reads the configuration files again and restarts server name,
// or every one of the daemon's servers when name is "" (servers gone from
// the files stop, new ones are added); it returns the servers restarted.
func (x *mcpServers) Restart(ctx context.Context, name string) ([]string, error) {
	x.edit.Lock()
	defer x.edit.Unlock()
	home, err := x.load()
	if err != nil {
		return nil, err
	}
	extra := mcp.Servers{}
	if x.extraPath != "" {
		if extra, err = mcp.Load(x.extraPath, false); err != nil {
			return nil, errs.New(errcode.InvalidParams, "cannot read --mcp-config: %v", err)
		}
	}
	all := mcp.Merge(home, extra)
	x.mu.Lock()
	x.extra = extra
	var gone []string
	for n := range x.global {
		if _, ok := all[n]; !ok && name == "" {
			gone = append(gone, n)
		}
	}
	x.mu.Unlock()
	if name != "" {
		cfg, ok := all[name]
		if !ok {
			return nil, errs.New(errcode.NotFound, "no MCP server %q is configured (mcp.list shows the servers)", name)
		}
		x.swap(name, &cfg)
		return []string{name}, nil
	}
	for _, n := range gone {
		x.swap(n, nil)
	}
	names := all.Names()
	for _, n := range names {
		cfg := all[n]
		x.swap(n, &cfg)
	}
	return names, nil
}

// Settle waits until server name, configured as cfg, has started or failed
// once (at most its start timeout, or until ctx ends), and returns its
// state and tools.
func (x *mcpServers) Settle(ctx context.Context, name string, cfg mcp.ServerConfig) (mcp.Status, []mcp.ToolInfo) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout(cfg))
	defer cancel()
	x.mu.Lock()
	m := x.global[name]
	x.mu.Unlock()
	if m == nil {
		return mcp.Status{Name: name, State: mcp.StateIdle}, nil
	}
	m.Ensure(ctx)
	return m.Statuses()[0], m.Tools(name)
}

// Probe starts cfg alone, as server name, and reports what it offers; the
// daemon's servers are not touched.
func (x *mcpServers) Probe(ctx context.Context, name string, cfg mcp.ServerConfig) mcp.ProbeResult {
	return mcp.Probe(ctx, name, cfg, mcp.Options{Log: x.log, Sandbox: x.sandbox})
}

// Configured returns the configuration of a server of either file.
func (x *mcpServers) Configured(name string) (mcp.ServerConfig, error) {
	x.mu.Lock()
	cfg, ok := x.extra[name]
	x.mu.Unlock()
	if ok {
		return cfg, nil
	}
	return x.Saved(name)
}

// editable refuses the servers of --mcp-config, which Trellis never rewrites.
func (x *mcpServers) editable(name string) error {
	x.mu.Lock()
	_, ok := x.extra[name]
	x.mu.Unlock()
	if ok {
		return errs.New(errcode.InvalidParams, "MCP server %s is configured by --mcp-config %s, which the daemon does not rewrite: edit that file, then call mcp.reload", name, x.extraPath)
	}
	return nil
}

func (x *mcpServers) load() (mcp.Servers, error) {
	s, err := mcp.Load(x.path, true)
	if err != nil {
		return nil, fmt.Errorf("read the MCP servers: %w", err)
	}
	return s, nil
}

// save writes servers to <home>/mcp.json, mode 0600 (an entry's env and
// headers may hold credentials), through a temporary file.
func (x *mcpServers) save(servers mcp.Servers) error {
	data, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(x.path), ".mcp.json-")
	if err != nil {
		return fmt.Errorf("write %s: %w", x.path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), x.path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", x.path, werr)
	}
	return nil
}

// swap replaces the manager of server name by one running cfg (nil: none)
// and stops the old one.
func (x *mcpServers) swap(name string, cfg *mcp.ServerConfig) {
	x.mu.Lock()
	old := x.global[name]
	if cfg == nil {
		delete(x.global, name)
	} else if !x.closed {
		x.global[name] = x.manager(name, *cfg)
	}
	x.mu.Unlock()
	if old != nil {
		go old.Close()
	}
}

// settleTimeout bounds how long mcp.add waits for the server it started.
func settleTimeout(cfg mcp.ServerConfig) time.Duration {
	if cfg.StartTimeoutSec > 0 {
		return time.Duration(cfg.StartTimeoutSec*float64(time.Second)) + time.Second
	}
	return mcp.DefaultStartTimeout + time.Second
}
