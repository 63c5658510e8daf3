package agents

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// Sub-agent statuses.
const (
	StatusQueued      = "queued"
	StatusRunning     = "running"
	StatusDone        = "done"
	StatusError       = "error"
	StatusInterrupted = "interrupted"
)

// Defaults of Options.
const (
	DefaultMaxRunning = 4
	// maxSummary bounds the summary a sub-agent reports (and the delegate
	// tool returns to the model).
	maxSummary = 8000
	// maxExcerpt bounds the text of subagent.update.
	maxExcerpt = 200
	// interruptGrace bounds the wait for an interrupted child's end.
	interruptGrace = 15 * time.Second
)

// Sessions is what the service needs of runtime/session.
type Sessions interface {
	Create(ctx context.Context, p session.CreateParams) (string, error)
	Prompt(ctx context.Context, id, text string, atts []session.Attachment, origin string) (string, error)
	Interrupt(ctx context.Context, id string) error
	Get(ctx context.Context, id string) (session.Summary, error)
	Origin(id string) string
}

// Events is what the service needs of runtime/eventlog.
type Events interface {
	Append(ctx context.Context, sessionID, kind string, payload any) (store.Event, error)
	Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*eventlog.Subscription, error)
}

// Options configure the service.
type Options struct {
	// Home is the daemon's home; definitions live in Home/agents.
	Home string
	// Workdir is where a sub-agent without a parent works (the daemon's cwd).
	Workdir string
	// MaxRunning bounds the sub-agents running at once; more wait in a
	// queue. 0 means DefaultMaxRunning.
	MaxRunning int
	Log        *slog.Logger
	// Providers answers team.start's request to split a task; nil means
	// every team has one subtask, the whole task.
	Providers session.Providers
	// Definitions is the definition store, made before the service (the
	// daemon's other services look definitions up in it too): NewDefinitions,
	// or NewSharedDefinitions on a store several daemons share. Nil means
	// NewDefinitions(Home/agents).
	Definitions *Definitions
}

// Service runs sub-agents and keeps agent definitions.
type Service struct {
	defs     *Definitions
	sessions Sessions
	events   Events
	opts     Options
	log      *slog.Logger

	mu       sync.Mutex
	children map[string]*child // queued or running, by agent id
	queue    []*child
	running  int
	closed   bool
	wg       sync.WaitGroup
	teams    []*team // oldest first
}

// child is one sub-agent.
type child struct {
	agentID   string
	name      string
	task      string
	prompt    string
	sessionID string
	parentID  string
	origin    string

	// guarded by Service.mu
	status      string
	interrupted bool

	done   chan struct{} // closed when result is set
	result Result
}

// Result is how a sub-agent ended (subagent.done).
type Result struct {
	AgentID      string
	Name         string
	SessionID    string
	Status       string // done | error | interrupted
	OK           bool
	Summary      string
	InputTokens  int
	OutputTokens int
}

// New returns the service.
func New(sessions Sessions, events Events, opts Options) *Service {
	if opts.MaxRunning <= 0 {
		opts.MaxRunning = DefaultMaxRunning
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	defs := opts.Definitions
	if defs == nil {
		defs = NewDefinitions(opts.Home + "/agents")
	}
	return &Service{
		defs:     defs,
		sessions: sessions, events: events, opts: opts, log: opts.Log,
		children: map[string]*child{},
	}
}

// Definitions returns the definition store.
func (s *Service) Definitions() *Definitions { return s.defs }

// Entry is one row of agent.list: a definition or a live sub-agent.
type Entry struct {
	Name, Description string
	Kind              string // definition | subagent
	Source            string // home | builtin
	Path              string
	AgentID, Status   string
	Task              string
	SessionID         string
	ParentSessionID   string
}

// List returns the definitions, then the sub-agents queued or running now
// (oldest first).
func (s *Service) List(context.Context) ([]Entry, error) {
	defs, err := s.defs.List()
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(defs))
	descr := map[string]string{}
	for _, d := range defs {
		descr[d.Name] = d.Description
		out = append(out, Entry{Name: d.Name, Description: d.Description, Kind: "definition", Source: "home", Path: d.Path})
	}
	s.mu.Lock()
	kids := make([]*child, 0, len(s.children))
	for _, c := range s.children {
		kids = append(kids, c)
	}
	sort.Slice(kids, func(i, j int) bool { return kids[i].agentID < kids[j].agentID })
	for _, c := range kids {
		src := "home"
		if _, ok := descr[c.name]; !ok {
			src = "builtin"
		}
		out = append(out, Entry{Name: c.name, Description: descr[c.name], Kind: "subagent", Source: src,
			AgentID: c.agentID, Status: c.status, Task: c.task, SessionID: c.sessionID, ParentSessionID: c.parentID})
	}
	s.mu.Unlock()
	return out, nil
}

// SpawnParams are the inputs of Spawn.
type SpawnParams struct {
	Name            string // "" = the default agent
	Task            string
	ParentSessionID string // "" = none: no progress events, the daemon's cwd
	Model           string
	// Origin approves the child's tool calls when it has no parent.
	Origin string
	// MayRun, when set, checks the child's agent and workdir for the caller
	// (session.CreateParams.MayRun): the parent's owner is checked anyway.
	MayRun func(agent, workdir string) error
	// workdir, when set, replaces the parent's (a team member's worktree).
	workdir string
}

// Spawn creates the child session and queues the sub-agent; it returns its
// agent id once subagent.spawn is on the parent.
func (s *Service) Spawn(ctx context.Context, p SpawnParams) (string, error) {
	c, err := s.spawn(ctx, p)
	if err != nil {
		return "", err
	}
	return c.agentID, nil
}

func (s *Service) spawn(ctx context.Context, p SpawnParams) (*child, error) {
	if strings.TrimSpace(p.Task) == "" {
		return nil, errs.New(errcode.InvalidParams, "task is required: what the sub-agent should do")
	}
	def := Definition{Name: DefaultName}
	if p.Name == "" {
		if d, err := s.defs.Get(DefaultName); err == nil {
			def = d
		}
	} else {
		d, err := s.defs.Get(p.Name)
		if err != nil {
			return nil, err
		}
		def = d
	}
	cp := session.CreateParams{Workdir: s.opts.Workdir, Mode: session.DefaultMode, Kind: store.KindSubagent,
		Agent: def.Name, Origin: p.Origin, Model: p.Model, MayRun: p.MayRun}
	if cp.Model == "" {
		cp.Model = def.Model
	}
	if p.ParentSessionID != "" {
		parent, err := s.sessions.Get(ctx, p.ParentSessionID)
		if err != nil {
			return nil, err
		}
		if parent.Row.Closed {
			return nil, errs.New(errcode.InvalidParams, "session %s is closed: sub-agents need an open parent", p.ParentSessionID)
		}
		if parent.Row.Kind == store.KindSubagent {
			return nil, errs.Wrap(errcode.InvalidParams, ErrNested, "session %s is a sub-agent: sub-agents cannot start sub-agents", p.ParentSessionID)
		}
		cp.Workdir, cp.Mode, cp.Provider = parent.Row.Workdir, parent.Row.Mode, parent.Row.Provider
		if p.workdir != "" {
			cp.Workdir = p.workdir
		}
		cp.ParentSessionID = p.ParentSessionID
		if cp.Model == "" {
			cp.Model = parent.Row.Model
		}
		// The person approving the parent approves the child.
		cp.Origin = s.sessions.Origin(p.ParentSessionID)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errs.New(errcode.Overloaded, "the daemon is shutting down").WithData("retryAfterMs", 1000)
	}
	childID, err := s.sessions.Create(ctx, cp)
	if err != nil {
		return nil, err
	}
	prompt := p.Task
	if def.Instructions != "" {
		prompt = def.Instructions + "\n\n" + p.Task
	}
	c := &child{agentID: ids.New("a"), name: def.Name, task: p.Task, prompt: prompt, sessionID: childID,
		parentID: p.ParentSessionID, origin: cp.Origin, status: StatusQueued, done: make(chan struct{})}
	s.emit(ctx, c, eventkind.SubagentSpawn, events.SubagentSpawnEvent{AgentID: c.agentID, Name: c.name, Task: c.task, Status: StatusQueued, SessionID: childID})

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.finish(c, Result{Status: StatusInterrupted, Summary: "the daemon stopped before the sub-agent started"})
		return c, nil
	}
	s.children[c.agentID] = c
	s.queue = append(s.queue, c)
	s.pumpLocked()
	s.mu.Unlock()
	return c, nil
}

// pumpLocked starts queued children while there is room.
func (s *Service) pumpLocked() {
	for s.running < s.opts.MaxRunning && len(s.queue) > 0 {
		c := s.queue[0]
		s.queue = s.queue[1:]
		s.running++
		c.status = StatusRunning
		s.wg.Add(1)
		go s.run(c)
	}
}

// run prompts the child's session and follows it to its turn.done.
func (s *Service) run(c *child) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		s.running--
		s.pumpLocked()
		s.mu.Unlock()
	}()
	bg := context.Background()
	res := s.follow(bg, c)
	s.finish(c, res)
}

func (s *Service) follow(ctx context.Context, c *child) Result {
	sub, err := s.events.Subscribe(ctx, c.sessionID, 0)
	if err != nil {
		return Result{Status: StatusError, Summary: "could not follow the sub-agent: " + err.Error()}
	}
	defer sub.Close()
	s.mu.Lock()
	intr := c.interrupted
	s.mu.Unlock()
	if intr {
		return Result{Status: StatusInterrupted, Summary: "interrupted before it started"}
	}
	s.emit(ctx, c, eventkind.SubagentUpdate, events.SubagentUpdateEvent{AgentID: c.agentID, Name: c.name, Status: StatusRunning})
	turnID, err := s.sessions.Prompt(ctx, c.sessionID, c.prompt, nil, c.origin)
	if err != nil {
		return Result{Status: StatusError, Summary: "could not start the sub-agent: " + err.Error()}
	}
	s.mu.Lock()
	intr = c.interrupted
	s.mu.Unlock()
	if intr {
		_ = s.sessions.Interrupt(ctx, c.sessionID)
	}
	var res Result
	var answer, failure string
	for it := range sub.Items() {
		if it.Event == nil {
			continue
		}
		switch it.Event.Kind {
		case eventkind.Usage:
			var u events.UsageEvent
			if json.Unmarshal(it.Event.Payload, &u) == nil {
				res.InputTokens += int(u.InputTokens)
				res.OutputTokens += int(u.OutputTokens)
			}
		case eventkind.MessageDone:
			var m events.MessageDoneEvent
			if json.Unmarshal(it.Event.Payload, &m) == nil {
				answer = m.Text
			}
		case eventkind.Error:
			var e events.ErrorEvent
			if json.Unmarshal(it.Event.Payload, &e) == nil && failure == "" {
				failure = e.Message
			}
		case eventkind.TurnDone:
			var d events.TurnDoneEvent
			if json.Unmarshal(it.Event.Payload, &d) != nil || d.TurnID != turnID {
				continue
			}
			switch d.Reason {
			case events.TurnDoneReasonComplete:
				res.Status, res.OK, res.Summary = StatusDone, true, answer
			case events.TurnDoneReasonInterrupted:
				res.Status, res.Summary = StatusInterrupted, orText(answer, "the sub-agent was interrupted")
			default:
				res.Status = StatusError
				res.Summary = orText(failure, "the sub-agent's turn ended: "+d.Reason)
			}
			return res
		}
	}
	res.Status, res.Summary = StatusError, "the sub-agent's event stream ended before its turn did (the daemon is stopping)"
	return res
}

// finish records c's result, reports it on the parent and forgets c.
func (s *Service) finish(c *child, res Result) {
	res.AgentID, res.Name, res.SessionID = c.agentID, c.name, c.sessionID
	res.Summary = cut(res.Summary, maxSummary)
	// Forgotten first: once subagent.done is out, agent.list no longer
	// shows the child.
	s.mu.Lock()
	c.status = res.Status
	delete(s.children, c.agentID)
	s.mu.Unlock()
	bg := context.Background()
	s.emit(bg, c, eventkind.SubagentUpdate, events.SubagentUpdateEvent{AgentID: c.agentID, Name: c.name, Status: res.Status, Text: cut(res.Summary, maxExcerpt)})
	s.emit(bg, c, eventkind.SubagentDone, events.SubagentDoneEvent{AgentID: c.agentID, Name: c.name, Status: res.Status, OK: res.OK,
		Summary: res.Summary, SessionID: c.sessionID,
		Usage: &events.TokenUsage{InputTokens: int64(res.InputTokens), OutputTokens: int64(res.OutputTokens)}})
	c.result = res
	close(c.done)
}

// emit appends a progress event to c's parent (none without a parent).
func (s *Service) emit(ctx context.Context, c *child, kind string, payload any) {
	if c.parentID == "" {
		return
	}
	if _, err := s.events.Append(context.WithoutCancel(ctx), c.parentID, kind, payload); err != nil {
		s.log.Warn("report sub-agent progress", "sessionId", c.parentID, "agentId", c.agentID, "kind", kind, "err", err)
	}
}

// Delegate runs a sub-agent for parentID and waits for its end. When ctx
// ends first (the parent's turn was interrupted), the child is interrupted
// and ctx's error returned.
func (s *Service) Delegate(ctx context.Context, parentID, name, task string) (Result, error) {
	c, err := s.spawn(ctx, SpawnParams{Name: name, Task: task, ParentSessionID: parentID})
	if err != nil {
		return Result{}, err
	}
	select {
	case <-c.done:
		return c.result, nil
	case <-ctx.Done():
	}
	s.interrupt(context.WithoutCancel(ctx), c)
	select {
	case <-c.done:
	case <-time.After(interruptGrace):
	}
	return Result{}, ctx.Err()
}

// Wait waits for a sub-agent spawned by this service to end; ErrNotFound
// once it has ended and been forgotten.
func (s *Service) Wait(ctx context.Context, agentID string) (Result, error) {
	s.mu.Lock()
	c := s.children[agentID]
	s.mu.Unlock()
	if c == nil {
		return Result{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no sub-agent %s is queued or running", agentID)
	}
	select {
	case <-c.done:
		return c.result, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// InterruptChildren interrupts the sub-agents of parentID: queued ones end
// at once, running ones are interrupted. The session service calls it when
// the parent is interrupted or closed.
func (s *Service) InterruptChildren(ctx context.Context, parentID string) {
	s.mu.Lock()
	var kids []*child
	for _, c := range s.children {
		if c.parentID == parentID {
			kids = append(kids, c)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range kids {
		wg.Add(1)
		go func() { defer wg.Done(); s.interrupt(ctx, c) }()
	}
	wg.Wait()
}

// interrupt ends a queued child or interrupts a running one.
func (s *Service) interrupt(ctx context.Context, c *child) {
	s.mu.Lock()
	c.interrupted = true
	queued := false
	for i, q := range s.queue {
		if q == c {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			queued = true
			break
		}
	}
	s.mu.Unlock()
	if queued {
		s.finish(c, Result{Status: StatusInterrupted, Summary: "interrupted before it started"})
		return
	}
	if err := s.sessions.Interrupt(ctx, c.sessionID); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("interrupt sub-agent", "agentId", c.agentID, "err", err)
	}
}

// Shutdown refuses new sub-agents, ends the queued ones and interrupts the
// running ones; it returns when they have reported their end or ctx ends.
func (s *Service) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	kids := slices.Collect(maps.Values(s.children))
	s.mu.Unlock()
	for _, c := range kids {
		s.interrupt(ctx, c)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func orText(s, d string) string {
	if strings.TrimSpace(s) == "" {
		return d
	}
	return s
}

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// DelegateTask runs a sub-agent for parentID and waits for it (the
// delegate_task tool and the /delegate command): see Delegate.
func (s *Service) DelegateTask(ctx context.Context, parentID, name, task string) (string, bool, error) {
	res, err := s.Delegate(ctx, parentID, name, task)
	if err != nil {
		return "", false, err
	}
	return res.Summary, res.OK, nil
}
