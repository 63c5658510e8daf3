package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/version"
)

// Server states, as mcp.list and mcp.changed report them.
const (
	StateIdle     = "idle"     // configured, not started yet (servers start lazily)
	StateStarting = "starting" // starting or restarting
	StateReady    = "ready"
	StateFailed   = "failed" // see Reason; a crashed server is restarted with backoff
)

// Status is the state of one server.
type Status struct {
	Name      string
	Scope     string // "" for the daemon's servers, "agent:NAME" for an agent's
	Transport string // stdio | http | sse
	State     string
	Reason    string
	ToolCount int
	Restarts  int
}

// Options configures a Manager.
type Options struct {
	Log *slog.Logger
	// Scope is reported in Status (see there).
	Scope string
	// OnChange is called after every state change of a server.
	OnChange func(Status)
	// Backoff is the wait before start attempt n (1, 2, …) after a failure;
	// nil means 1 s doubling up to 60 s.
	Backoff func(n int) time.Duration
	// HTTPClient is used for http and sse servers; nil means a default one.
	HTTPClient *http.Client
	// Sandbox runs the stdio servers (the shell tool's sandbox; nil:
	// unsandboxed, each in a process group of its own).
	Sandbox *tool.ProcessSandbox
}

// Manager runs the MCP servers of one configuration and keeps their tools
// in its Registry.
type Manager struct {
	opts    Options
	reg     *tool.Registry
	servers map[string]*server
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a manager of servers; nothing starts before Ensure.
func New(servers Servers, opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Backoff == nil {
		opts.Backoff = func(n int) time.Duration {
			d := time.Second << min(n-1, 6)
			return min(d, 60*time.Second)
		}
	}
	reg, _ := tool.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, reg: reg, servers: map[string]*server{}, ctx: ctx, cancel: cancel}
	for name, cfg := range servers {
		s := &server{m: m, name: name, cfg: cfg, state: StateIdle, settled: make(chan struct{})}
		if cfg.Disabled {
			s.state, s.reason = StateFailed, "disabled in the configuration"
		}
		m.servers[name] = s
	}
	return m
}

// Registry holds the tools of the servers that are (or were) ready.
func (m *Manager) Registry() *tool.Registry { return m.reg }

// Ensure starts the servers not started yet and waits until each has
// settled once (ready or failed) or ctx ends. Servers start lazily: the
// first turn or tool.list that needs their tools starts them.
func (m *Manager) Ensure(ctx context.Context) {
	var wait []chan struct{}
	for _, s := range m.servers {
		if s.cfg.Disabled {
			continue
		}
		s.mu.Lock()
		if !s.started && m.ctx.Err() == nil {
			s.started = true
			m.wg.Add(1)
			go s.loop()
		}
		s.mu.Unlock()
		wait = append(wait, s.settled)
	}
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// Statuses returns the state of every server, sorted by name.
func (m *Manager) Statuses() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close stops every server and waits for them.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// server is one configured MCP server and its connection.
type server struct {
	m    *Manager
	name string
	cfg  ServerConfig

	mu       sync.Mutex
	started  bool
	state    string
	reason   string
	restarts int
	session  *sdk.ClientSession
	tools    map[string]*mcpTool // by registered name
	settled  chan struct{}       // closed when the first start attempt ends
	settleOK bool
	stderr   *tailBuffer
	// proc is the running stdio server (nil: none).
	proc *tool.SandboxedProcess
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Name: s.name, Scope: s.m.opts.Scope, Transport: s.cfg.Transport(), State: s.state,
		Reason: s.reason, ToolCount: len(s.tools), Restarts: s.restarts}
}

func (s *server) setState(state, reason string) {
	s.mu.Lock()
	s.state, s.reason = state, reason
	if (state == StateReady || state == StateFailed) && !s.settleOK {
		s.settleOK = true
		close(s.settled)
	}
	s.mu.Unlock()
	if state == StateFailed {
		s.m.opts.Log.Warn("MCP server failed", "server", s.name, "reason", reason)
	} else {
		s.m.opts.Log.Info("MCP server "+state, "server", s.name)
	}
	if s.m.opts.OnChange != nil {
		s.m.opts.OnChange(s.status())
	}
}

// loop starts the server, waits for its connection to end and restarts it
// with backoff until the manager closes.
func (s *server) loop() {
	defer s.m.wg.Done()
	ctx := s.m.ctx
	failures := 0
	for ctx.Err() == nil {
		s.setState(StateStarting, "")
		cs, err := s.connect(ctx)
		if err == nil {
			err = s.refreshTools(ctx, cs)
			if err != nil {
				_ = cs.Close()
			}
		}
		if err != nil {
			s.endGroup()
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			s.setState(StateFailed, s.withStderr(fmt.Sprintf("start failed: %v", err)))
		} else {
			readyAt := time.Now()
			s.mu.Lock()
			s.session = cs
			s.mu.Unlock()
			s.setState(StateReady, "")
			go func() {
				<-ctx.Done()
				_ = cs.Close()
			}()
			werr := cs.Wait()
			s.endGroup()
			s.mu.Lock()
			s.session = nil
			s.mu.Unlock()
			if ctx.Err() != nil {
				break
			}
			if time.Since(readyAt) > time.Minute {
				failures = 0
			}
			failures++
			why := "the server closed the connection"
			if werr != nil && !errors.Is(werr, sdk.ErrConnectionClosed) {
				why = "the connection ended: " + werr.Error()
			}
			s.setState(StateFailed, s.withStderr(why+"; restarting"))
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(s.m.opts.Backoff(failures)):
		}
	}
	s.mu.Lock()
	s.state, s.reason = StateFailed, "the daemon is stopping"
	s.mu.Unlock()
}

func (s *server) withStderr(reason string) string {
	s.mu.Lock()
	tb := s.stderr
	s.mu.Unlock()
	if tb == nil {
		return reason
	}
	if tail := strings.TrimSpace(tb.String()); tail != "" {
		return reason + " (stderr: " + tail + ")"
	}
	return reason
}

// defaultEnvKeys are the variables a stdio server inherits from the daemon
// (as the reference MCP clients do); the daemon's secrets are not passed on.
var defaultEnvKeys = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR", "NODE_PATH"}

func (s *server) connect(ctx context.Context) (*sdk.ClientSession, error) {
	client := sdk.NewClient(&sdk.Implementation{Name: "trellis", Version: version.Server}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			go func() {
				s.mu.Lock()
				cs := s.session
				s.mu.Unlock()
				if cs == nil {
					return
				}
				lctx, cancel := context.WithTimeout(s.m.ctx, s.cfg.startTimeout())
				defer cancel()
				if err := s.refreshTools(lctx, cs); err != nil {
					s.m.opts.Log.Warn("MCP tools/list after list_changed", "server", s.name, "err", err)
					return
				}
				if s.m.opts.OnChange != nil {
					s.m.opts.OnChange(s.status())
				}
			}()
		},
	})
	var t sdk.Transport
	httpClient := s.m.opts.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	if len(s.cfg.Headers) > 0 {
		hc := *httpClient
		hc.Transport = headerTransport{base: httpClient.Transport, headers: s.cfg.Headers}
		httpClient = &hc
	}
	switch s.cfg.Transport() {
	case "http":
		t = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: httpClient, MaxRetries: -1}
	case "sse":
		t = &sdk.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: httpClient}
	default:
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Cwd
		for _, k := range defaultEnvKeys {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		for _, k := range sortedKeys(s.cfg.Env) {
			cmd.Env = append(cmd.Env, k+"="+s.cfg.Env[k])
		}
		tb := &tailBuffer{max: 2048}
		cmd.Stderr = tb
		s.mu.Lock()
		s.stderr = tb
		s.mu.Unlock()
		// Started by the sandbox, in a process group (and PID namespace)
		// of its own: signals to the daemon's group (a terminal's ^C) do
		// not reach it, and endGroup ends its whole tree.
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout = inR, outW
		proc, err := s.m.opts.Sandbox.Start(cmd)
		inR.Close() // the server holds its own copies
		outW.Close()
		if err != nil {
			inW.Close()
			outR.Close()
			return nil, fmt.Errorf("start %s: %w", s.cfg.Command, err)
		}
		s.mu.Lock()
		s.proc = proc
		s.mu.Unlock()
		t = &sdk.IOTransport{Reader: outR, Writer: inW}
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.startTimeout())
	defer cancel()
	cs, err := client.Connect(cctx, t, nil)
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("no answer to the handshake within %v: %w", s.cfg.startTimeout(), err)
	}
	return cs, err
}

// refreshTools lists the server's tools and puts them in the registry in
// place of the previous ones.
func (s *server) refreshTools(ctx context.Context, cs *sdk.ClientSession) error {
	var listed []*sdk.Tool
	if cs.InitializeResult() == nil || cs.InitializeResult().Capabilities == nil || cs.InitializeResult().Capabilities.Tools != nil {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return fmt.Errorf("tools/list: %w", err)
			}
			listed = append(listed, t)
		}
	}
	fresh := map[string]*mcpTool{}
	for _, t := range listed {
		mt := newTool(s, t)
		if _, dup := fresh[mt.name]; dup {
			s.m.opts.Log.Warn("MCP tool name clash after sanitising; skipped", "server", s.name, "tool", t.Name)
			continue
		}
		fresh[mt.name] = mt
	}
	s.mu.Lock()
	old := s.tools
	s.tools = fresh
	s.mu.Unlock()
	for name := range old {
		s.m.reg.Unregister(name)
	}
	for name, mt := range fresh {
		if err := s.m.reg.Register(mt); err != nil {
			// The server's schema does not compile here: let the server
			// check the arguments itself.
			mt.schema = json.RawMessage(`{"type":"object"}`)
			if err2 := s.m.reg.Register(mt); err2 != nil {
				s.m.opts.Log.Warn("MCP tool not registered", "server", s.name, "tool", name, "err", err2)
				continue
			}
			s.m.opts.Log.Warn("MCP tool schema refused; arguments are checked by the server", "server", s.name, "tool", name, "err", err)
		}
	}
	return nil
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.b), "?")
}

// stopWait is how long a stdio server has to exit by itself once its
// connection closed (its stdin), before its processes are ended; endGrace
// is how long they then have between SIGTERM and SIGKILL.
const (
	stopWait = 2 * time.Second
	endGrace = 500 * time.Millisecond
)

// endGroup ends the stdio server once its connection ended, and what is
// left of its tree: the server's own children (npx's node, a wrapper
// script's workers) do not die with it.
func (s *server) endGroup() {
	s.mu.Lock()
	proc := s.proc
	s.proc = nil
	s.mu.Unlock()
	if proc == nil {
		return
	}
	if termed, killed := proc.Stop(stopWait, endGrace); termed > 0 {
		s.m.opts.Log.Info("MCP server: ended the processes its server left", "server", s.name,
			"sigterm", termed-killed, "sigkill", killed)
	}
}

// ToolInfo is one tool of a server as the server names it.
type ToolInfo struct {
	Name        string
	Description string
}

// Tools returns the tools of server name that are in the registry, by the
// server's own names.
func (m *Manager) Tools(name string) []ToolInfo {
	prefix := Prefix + name + "__"
	var out []ToolInfo
	for _, t := range m.reg.List() {
		if t.Server == name || strings.HasPrefix(t.Name, prefix) {
			out = append(out, ToolInfo{Name: strings.TrimPrefix(t.Name, prefix), Description: t.Description})
		}
	}
	return out
}

// ProbeResult is what Probe found of a server.
type ProbeResult struct {
	Status  Status
	Tools   []ToolInfo
	Elapsed time.Duration
}

// Probe starts the server cfg alone under name, waits until it is ready or
// failed (at most its start timeout), lists its tools and stops it. opts'
// OnChange is not called.
func Probe(ctx context.Context, name string, cfg ServerConfig, opts Options) ProbeResult {
	opts.OnChange = nil
	start := time.Now()
	m := New(Servers{name: cfg}, opts)
	defer m.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.startTimeout()+time.Second)
	defer cancel()
	m.Ensure(ctx)
	return ProbeResult{Status: m.Statuses()[0], Tools: m.Tools(name), Elapsed: time.Since(start)}
}
