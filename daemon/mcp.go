package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/mcp"
	"github.com/trellis-run/trellis/runtime/watch"
)

// MCPConfigPath is the mcpServers file every daemon of a home reads.
func MCPConfigPath(home string) string { return filepath.Join(home, "mcp.json") }

// loadMCPServers reads <home>/mcp.json (optional) and the --mcp-config
// file (required when given); the latter wins on a name in both.
func loadMCPServers(cfg Config) (mcp.Servers, error) {
	home, err := mcp.Load(MCPConfigPath(cfg.Home), true)
	if err != nil {
		return nil, fmt.Errorf("MCP servers: %w", err)
	}
	if cfg.MCPConfig == "" {
		return home, nil
	}
	extra, err := mcp.Load(cfg.MCPConfig, false)
	if err != nil {
		return nil, fmt.Errorf("MCP servers (--mcp-config): %w", err)
	}
	return mcp.Merge(home, extra), nil
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
// and fans their state changes out to mcp.changed watchers.
type mcpServers struct {
	log    *slog.Logger
	global *mcp.Manager
	// agentServers returns the mcpServers JSON of an agent definition.
	agentServers func(name string) ([]byte, error)
	hub          watch.Hub[mcp.Status]
	// sandbox runs the stdio servers (nil: unsandboxed).
	sandbox *tool.ProcessSandbox

	mu     sync.Mutex
	agents map[string]agentMCP
	closed bool
}

type agentMCP struct {
	raw []byte // the definition's mcpServers, to notice edits
	m   *mcp.Manager
}

func newMCPServers(servers mcp.Servers, agentServers func(string) ([]byte, error), sandbox *tool.ProcessSandbox, log *slog.Logger) *mcpServers {
	x := &mcpServers{log: log, agentServers: agentServers, agents: map[string]agentMCP{}, sandbox: sandbox}
	x.global = mcp.New(servers, mcp.Options{Log: log, OnChange: x.hub.Publish, Sandbox: sandbox})
	return x
}

// Registries implements toolbox.Extra: the daemon's servers and those of
// the session's agent, started on first use.
func (x *mcpServers) Registries(ctx context.Context, s session.Info) []*tool.Registry {
	x.global.Ensure(ctx)
	regs := []*tool.Registry{x.global.Registry()}
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
	out := x.global.Statuses()
	x.mu.Lock()
	names := make([]string, 0, len(x.agents))
	for n := range x.agents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, x.agents[n].m.Statuses()...)
	}
	x.mu.Unlock()
	return out
}

// Watch streams state changes until ctx ends.
func (x *mcpServers) Watch(ctx context.Context) *watch.Watch[mcp.Status] { return x.hub.Add(ctx) }

// Close stops every server.
func (x *mcpServers) Close() {
	x.mu.Lock()
	x.closed = true
	agents := x.agents
	x.agents = map[string]agentMCP{}
	x.mu.Unlock()
	x.global.Close()
	for _, a := range agents {
		a.m.Close()
	}
	x.hub.Close()
}
