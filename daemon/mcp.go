package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/trellis-run/trellis/internal/broadcast"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
)

// MCPConfigPath is the mcpServers file every daemon of a home reads.
func MCPConfigPath(home string) string { return filepath.Join(home, "mcp.json") }

// loadMCPServers reads <home>/mcp.json (optional) and the --mcp-config
// file (required when given): it returns the servers of both, the latter
// winning on a name in both, and those of the latter.
func loadMCPServers(cfg Config) (all, extra mcp.Servers, err error) {
	home, err := mcp.Load(MCPConfigPath(cfg.Home), true)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP servers: %w", err)
	}
	if cfg.MCPConfig == "" {
		return home, mcp.Servers{}, nil
	}
	extra, err = mcp.Load(cfg.MCPConfig, false)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP servers (--mcp-config): %w", err)
	}
	return mcp.Merge(home, extra), extra, nil
}

// mcpSandbox is the sandbox of stdio MCP servers: the shell tool's, with
// the network of accept mode, writable under the user's home directory
// too (package managers' caches: npx's ~/.npm), never the protected files.
func mcpSandbox(shell tool.ShellOptions, protect *tool.Guard) *tool.ProcessSandbox {
	sb := &tool.ProcessSandbox{ShellOptions: shell, Guard: protect}
	sb.Procs = nil // a server is not a command: the process-group table is the shell's
	if home, err := os.UserHomeDir(); err == nil {
		sb.Writable = []string{home}
	}
	return sb
}

// mcpServers runs the daemon's MCP servers and those of agent definitions,
// and fans their state changes out to mcp.changed watchers. Each of the
// daemon's servers has a manager of its own, so that mcp.add, mcp.update,
// mcp.remove and mcp.reload start, restart or stop it alone.
type mcpServers struct {
	log *slog.Logger
	// path is <home>/mcp.json, which mcp.add, mcp.update and mcp.remove
	// rewrite; extraPath the --mcp-config file ("" = none), read only.
	path, extraPath string
	// agentServers returns the mcpServers JSON of an agent definition.
	agentServers func(name string) ([]byte, error)
	hub          broadcast.Hub[mcp.Status]
	// sandbox runs the stdio servers (nil: unsandboxed).
	sandbox *tool.ProcessSandbox

	edit sync.Mutex // serialises the changes of the daemon's servers

	mu     sync.Mutex
	global map[string]*mcp.Manager // the daemon's servers, one manager each
	extra  mcp.Servers             // the servers of --mcp-config
	agents map[string]agentMCP
	closed bool
}

type agentMCP struct {
	raw []byte // the definition's mcpServers, to notice edits
	m   *mcp.Manager
}

func newMCPServers(path, extraPath string, servers, extra mcp.Servers, agentServers func(string) ([]byte, error), sandbox *tool.ProcessSandbox, log *slog.Logger) *mcpServers {
	x := &mcpServers{log: log, path: path, extraPath: extraPath, agentServers: agentServers, agents: map[string]agentMCP{},
		sandbox: sandbox, global: map[string]*mcp.Manager{}, extra: extra}
	for name, cfg := range servers {
		x.global[name] = x.manager(name, cfg)
	}
	return x
}

// manager returns the (not started) manager of one of the daemon's servers.
func (x *mcpServers) manager(name string, cfg mcp.ServerConfig) *mcp.Manager {
	return mcp.New(mcp.Servers{name: cfg}, mcp.Options{Log: x.log, OnChange: x.hub.Publish, Sandbox: x.sandbox})
}

// globals returns the managers of the daemon's servers, sorted by name.
func (x *mcpServers) globals() []*mcp.Manager {
	x.mu.Lock()
	defer x.mu.Unlock()
	names := slices.Sorted(maps.Keys(x.global))
	out := make([]*mcp.Manager, len(names))
	for i, n := range names {
		out[i] = x.global[n]
	}
	return out
}

// Registries implements toolbox.Extra: the daemon's servers and those of
// the session's agent, started on first use.
func (x *mcpServers) Registries(ctx context.Context, s session.Info) []*tool.Registry {
	ms := x.globals()
	var wg sync.WaitGroup
	regs := make([]*tool.Registry, len(ms))
	for i, m := range ms {
		regs[i] = m.Registry()
		wg.Go(func() { m.Ensure(ctx) })
	}
	wg.Wait()
	if s.Agent != "" {
		if m := x.agent(s.Agent); m != nil {
			m.Ensure(ctx)
			regs = append(regs, m.Registry())
		}
	}
	return regs
}

// agent returns the manager of an agent's servers (nil: it has none),
// replacing it when the definition's servers changed.
func (x *mcpServers) agent(name string) *mcp.Manager {
	raw, err := x.agentServers(name)
	if err != nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	cur, ok := x.agents[name]
	if ok && bytes.Equal(cur.raw, raw) {
		return cur.m
	}
	// The definition is {"NAME": {...}} or {"mcpServers": {...}}.
	servers, perr := mcp.Parse(raw)
	if perr != nil {
		servers, perr = mcp.Parse([]byte(`{"mcpServers":` + string(raw) + `}`))
	}
	if perr != nil {
		x.log.Warn("agent definition's mcpServers are invalid; its servers are not started", "agent", name, "err", perr)
		return nil
	}
	if ok {
		go cur.m.Close()
	}
	m := mcp.New(servers, mcp.Options{Log: x.log, Scope: "agent:" + name, OnChange: x.hub.Publish, Sandbox: x.sandbox})
	x.agents[name] = agentMCP{raw: raw, m: m}
	return m
}

// Statuses lists every configured server: the daemon's, then the agents'
// that were started.
func (x *mcpServers) Statuses() []mcp.Status {
	var out []mcp.Status
	for _, m := range x.globals() {
		out = append(out, m.Statuses()...)
	}
	x.mu.Lock()
	for _, n := range slices.Sorted(maps.Keys(x.agents)) {
		out = append(out, x.agents[n].m.Statuses()...)
	}
	x.mu.Unlock()
	return out
}

// Watch streams state changes until ctx ends.
func (x *mcpServers) Watch(ctx context.Context) *broadcast.Watch[mcp.Status] { return x.hub.Add(ctx) }

// Close stops every server.
func (x *mcpServers) Close() {
	x.mu.Lock()
	x.closed = true
	agents, global := x.agents, x.global
	x.agents, x.global = map[string]agentMCP{}, map[string]*mcp.Manager{}
	x.mu.Unlock()
	for _, m := range global {
		m.Close()
	}
	for _, a := range agents {
		a.m.Close()
	}
	x.hub.Close()
}
