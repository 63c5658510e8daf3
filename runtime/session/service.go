package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// Modes a session can be in.
var modes = map[string]bool{"plan": true, "accept": true, "auto": true}

// DefaultMode is the mode of a session created without one.
const DefaultMode = "accept"

// MaxAttachmentBytes bounds the decoded size of a prompt's attachments.
const MaxAttachmentBytes = 20 << 20

// settingsOpenTurns is the settings namespace recording, per session, the
// turns that were started or queued and have not ended, so that a restart
// can close them with a synthetic turn.done.
const settingsOpenTurns = "session.openTurns"

// Service hosts the sessions of a daemon.
type Service struct {
	agents         AgentLookup
	workspaceRoots []string // absolute, symlinks resolved; set at construction
	managedRoot    string   // Deps.ManagedRoot, absolute, symlinks resolved ("" = none)

	deps Deps

	// origins are the live sessions' origins (Deps.Origins), kept beside
	// live: an entry goes with its session.
	origins *Origins

	mu       sync.Mutex
	live     map[string]*live
	shutdown bool
	// creating are the sessions whose managed workdir Create made and
	// whose row it has not saved yet: the workdir sweep leaves them.
	creating map[string]bool
	wg       sync.WaitGroup // running turn goroutines

	keyRuns keyRuns // running sessions per API key (their limit)
	// turns maps a session id to its running turn (*turnState), kept
	// beside live.running so that Lost cancels it without waiting for a
	// lock some call may hold across a slow store.
	turns sync.Map
	// pickUp is set once the daemon is wired (PickUpPaused): from then on a
	// takeover (RecoverOpenTurns) restarts the paused turn it finds.
	pickUp atomic.Bool
	// checkpoints maps a session id to its *checkpointState.
	checkpoints sync.Map
	// watched bounds the workdirs watched between checkpoints.
	watched watchedWorkdirs
}

// live is a session loaded in this daemon run: created, resumed or prompted.
type live struct {
	mu sync.Mutex
	// recordMu orders the writes of the session's record of open turns
	// (recordOpenTurns); taken before mu.
	recordMu sync.Mutex
	// unclosed is a turn whose turn.done could not be stored (the store
	// failed): it is written before the session's next turn starts.
	unclosed string
	row      store.Session
	running  *turnState
	queue    []*pending
	// notices are the lines queued for the model (session.notice) that
	// no model call has taken yet.
	notices []string
	// budgetCh is closed when the session's budget changes, waking a turn
	// its budget paused (nil until a check asks for it).
	budgetCh chan struct{}
	// pauseChecked is set once a prompt found no turn a previous owner
	// left paused (revive): later prompts need not look again.
	pauseChecked bool
	// materialised is set once the session's managed workdir was checked
	// against its latest checkpoint on this daemon (materialise): later
	// turns of this lease trust it.
	materialised bool
}

type turnState struct {
	id string
	// ctx and cancel exist from the moment the turn is registered, so
	// that an interrupt right after the prompt cannot miss the turn.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// ended is set once the turn's turn.done is stored: the session is idle
	// for its clients even while the actor is still winding down.
	ended atomic.Bool
	// closed is set once turn.done is really stored.
	closed atomic.Bool
	// started is when the turn started (turn duration metric).
	started time.Time
	// interruptedBy is who interrupted the turn (session.interrupt), for
	// its turn.done; nil when nobody or no principal did.
	interruptedBy atomic.Pointer[events.PrincipalRef]
	// key is the API key whose prompt started the turn ("" for none): it
	// counts among the key's running sessions until the turn ends.
	key string
	// interrupted is set by an interrupt (whoever asked for it).
	interrupted atomic.Bool
	// rollback is set by whenBusy rollback before it interrupts the turn:
	// once the turn ended, its messages leave the model's history.
	rollback atomic.Bool
	// historyStart is how many history messages came before the turn (-1
	// until its loop read them); only the actor running the turn uses it.
	historyStart int
	// steered are the messages sent into the turn (session.steer) that its
	// loop has not taken yet; steerClosed is set once the turn takes no
	// more. Both are guarded by the live session's mu.
	steered     []agent.Steer
	steerClosed bool
	// pausedRec is set while the store records the turn as paused by its
	// budget (pausedNamespace).
	pausedRec atomic.Bool
	// askMu guards the request that asks a person to raise the budget the
	// turn is paused at (askBudget): asked is set from the first check that
	// finds the budget reached until one that finds it not, withdraw ends
	// the request (nil when none waits).
	askMu    sync.Mutex
	asked    bool
	withdraw context.CancelFunc
}

type pending struct {
	turnID      string
	text        string
	attachments []Attachment
	queued      bool
	started     bool     // its turn.started is already stored
	command     *Command // set when the turn runs a slash command
	args        string   // the command's arguments
	// caller is the trace context of the call that asked for the turn: the
	// turn's span is its child.
	caller     trace.SpanContext
	rejectBusy bool // whenBusy=reject: session_busy instead of queueing
	// key and keyMaxRunning are the API key the prompt came with and its
	// limit of running sessions (0: none).
	key           string
	keyMaxRunning int
	// principal sent the prompt (message.user names it); nil: none did.
	principal *events.PrincipalRef
	// resume: the turn is one a previous owner of the session left paused
	// by its budget; it goes on where it stopped (agent.Turn.Resume).
	resume bool
}

// Attachment is a file, image or text given with a prompt.
type Attachment struct {
	Kind     string
	Name     string
	Path     string
	Data     string // base64
	MimeType string
	Text     string
}

// NewService restores the saved sessions' open turns (each gets a synthetic
// turn.done{interrupted}) and returns the service.
func NewService(ctx context.Context, deps Deps) (*Service, error) {
	managed, err := managedRoot(deps.ManagedRoot)
	if err != nil {
		return nil, err
	}
	s := &Service{deps: deps, live: map[string]*live{}, creating: map[string]bool{}, agents: deps.Agents, workspaceRoots: absRoots(deps.WorkspaceRoots), origins: deps.Origins, managedRoot: managed}
	if s.origins == nil {
		s.origins = NewOrigins()
	}
	if deps.Leases != nil {
		return s, nil // the daemon calls RecoverOpenTurns once leases work
	}
	if err := s.closeOpenTurns(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// CreateParams are the inputs of Create.
type CreateParams struct {
	Workdir         string
	Mode            string
	Provider        string
	Model           string
	Agent           string
	Origin          string
	Kind            string // "" = chat
	ParentSessionID string
	JobID           string
	// Effort is the reasoning effort of the session's model calls
	// (minimal, low, medium, high, max; "" = the provider's default).
	Effort string
	// DenyExec: the session runs no exec tools; a call to one is
	// mode_denied without asking, whatever the mode and allowlist.
	DenyExec bool
	// Owner is the principal creating the session ("" = the daemon token
	// or the daemon itself); roles below operator see only what they own
	// or were granted (docs/security.md).
	Owner string
	// Budget, when set, is the session's own budget (session.setBudget):
	// a job's runs get the job's.
	Budget Limits
	// MayRun, when set, checks the agent ("" = the default agent) and the
	// resolved workdir for the caller too, when the caller is not the
	// owner (agent.spawn into a shared session); Deps.OwnerMayRun checks
	// the owner.
	MayRun func(agent, workdir string) error
}

// efforts are the accepted reasoning efforts.
var efforts = map[string]bool{"": true, "minimal": true, "low": true, "medium": true, "high": true, "max": true}

// effortNamespace and denyExecNamespace keep each session's effort and
// denyExec in the settings table (by session id), so that they survive
// restarts without a column of their own.
const (
	effortNamespace   = "session.effort"
	denyExecNamespace = "session.denyExec"
)

// AgentDefinition is what a session takes from an agent definition.
type AgentDefinition struct {
	Name         string
	Instructions string
	Model        string
	// Tools, when not empty, are the only tools the session may use.
	Tools []string
	// Budget limits each session of the definition that has no budget of
	// its own (session.setBudget).
	Budget Limits
}

// AgentLookup finds a definition by name; an unknown name is not_found.
type AgentLookup func(name string) (AgentDefinition, error)

// Create validates p, saves the session and makes it live.
func (s *Service) Create(ctx context.Context, p CreateParams) (string, error) {
	id, workspace := ids.New("s"), ""
	var wd string
	if p.Workdir == "" && s.managedRoot != "" {
		// No workdir named: the daemon manages one (made below, once the
		// session is valid).
		wd, workspace = s.managedDir(id), store.WorkspaceManaged
	} else {
		var err error
		if wd, err = ResolveWorkdir(p.Workdir); err != nil {
			return "", err
		}
	}
	if p.Mode == "" {
		p.Mode = DefaultMode
	}
	if !modes[p.Mode] {
		return "", errs.New(errcode.InvalidParams, "mode %q is not one of plan, accept, auto", p.Mode)
	}
	if p.Kind == "" {
		p.Kind = store.KindChat
	}
	if !efforts[p.Effort] {
		return "", errs.New(errcode.InvalidParams, "effort %q is not one of minimal, low, medium, high, max", p.Effort)
	}
	if err := p.Budget.Validate(); err != nil {
		return "", err
	}
	// A definition applies to chat and scheduled sessions here; the
	// sub-agent service has already applied it to its children.
	if p.Agent != "" && p.Kind != store.KindSubagent {
		if s.agents == nil {
			return "", errs.NewUnsupported("agent", p.Agent, "agent definitions are not available in this daemon")
		}
		def, err := s.agents(p.Agent)
		if err != nil {
			return "", err
		}
		if p.Model == "" {
			p.Model = def.Model
		}
	}
	if p.Provider == "" {
		p.Provider = s.deps.Providers.Default()
	}
	prov, err := s.deps.Providers.Open(p.Provider)
	if err != nil {
		return "", err
	}
	if p.Model == "" {
		p.Model = defaultModel(prov)
	}
	if p.Owner == "" && p.ParentSessionID != "" {
		// A sub-agent's or team worker's session belongs to whoever owns
		// its parent, who sees and steers it.
		if parent, err := s.deps.Store.GetSession(ctx, p.ParentSessionID); err == nil {
			p.Owner = parent.Owner
		}
	}
	if p.Owner != "" && s.deps.OwnerMayRun != nil {
		if err := s.deps.OwnerMayRun(ctx, p.Owner, p.Agent, wd); err != nil {
			return "", err
		}
	}
	if p.MayRun != nil {
		if err := p.MayRun(p.Agent, wd); err != nil {
			return "", err
		}
	}
	row := store.Session{
		SessionID: id, Workdir: wd, Mode: p.Mode, Provider: p.Provider, Model: p.Model,
		Agent: p.Agent, Kind: p.Kind, ParentSessionID: p.ParentSessionID, JobID: p.JobID,
		CreatedAt: time.Now().UTC(), Owner: p.Owner, Workspace: workspace,
	}
	if workspace == store.WorkspaceManaged {
		s.mu.Lock()
		s.creating[id] = true
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.creating, id)
			s.mu.Unlock()
		}()
		if err := os.MkdirAll(wd, 0o700); err != nil {
			return "", fmt.Errorf("make the managed workdir of session %s: %w", id, err)
		}
	}
	if err := s.deps.Store.CreateSession(ctx, row); err != nil {
		return "", fmt.Errorf("save session: %w", err)
	}
	if p.Effort != "" {
		raw, _ := json.Marshal(p.Effort)
		if err := s.deps.Store.PutSetting(ctx, store.Unfenced(), effortNamespace, row.SessionID, raw); err != nil {
			return "", fmt.Errorf("save session effort: %w", err)
		}
	}
	if p.DenyExec {
		if err := s.deps.Store.PutSetting(ctx, store.Unfenced(), denyExecNamespace, row.SessionID, []byte("true")); err != nil {
			return "", fmt.Errorf("save session denyExec: %w", err)
		}
	}
	if p.Budget.Set() {
		raw, _ := json.Marshal(p.Budget)
		if err := s.deps.Store.PutSetting(ctx, store.Unfenced(), budgetNamespace, row.SessionID, raw); err != nil {
			return "", fmt.Errorf("save session budget: %w", err)
		}
	}
	if s.deps.Leases != nil {
		if err := s.deps.Leases.Acquire(ctx, row.SessionID); err != nil {
			return "", err
		}
	}
	s.mu.Lock()
	s.live[row.SessionID] = &live{row: row}
	s.origins.set(row.SessionID, p.Origin)
	s.mu.Unlock()
	return row.SessionID, nil
}

// maxPathBytes is Linux's PATH_MAX (with its NUL): no longer path names
// a file, so a longer workdir is refused before anything uses it (or
// echoes it back in an error).
const maxPathBytes = 4096

// checkPathLen refuses a path that cannot exist for its length.
func checkPathLen(field, p string) error {
	if len(p) >= maxPathBytes {
		return errs.New(errcode.InvalidParams, "%s is %d bytes long; a path is at most %d bytes", field, len(p), maxPathBytes-1)
	}
	return nil
}

// ResolveWorkdir returns dir as the absolute path, symlinks resolved, of
// an existing directory, or an InvalidParams error saying why it is not
// one (a blank dir is refused).
func ResolveWorkdir(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", errs.New(errcode.InvalidParams, "workdir is required: the directory the session's tools work in")
	}
	if err := checkPathLen("workdir", dir); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", errs.New(errcode.InvalidParams, "workdir %q: %v", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", errs.New(errcode.InvalidParams, "workdir %s does not exist", abs)
	}
	if !st.IsDir() {
		return "", errs.New(errcode.InvalidParams, "workdir %s is not a directory", abs)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return abs, nil
}

// Summary describes one session (session.list).
type Summary struct {
	Row              store.Session
	Status           string
	Running          bool
	PendingApprovals int
}

// List returns the matching sessions, newest first.
func (s *Service) List(ctx context.Context, includeClosed bool, workdir string) ([]Summary, error) {
	return s.ListVisible(ctx, includeClosed, false, workdir, "")
}

// ListVisible is List keeping only the sessions the principal visibleTo
// owns or was granted ("" = every session), and listing the archived ones
// only when archived is set (none of them otherwise).
func (s *Service) ListVisible(ctx context.Context, includeClosed, archived bool, workdir, visibleTo string) ([]Summary, error) {
	if err := checkPathLen("workdir", workdir); err != nil {
		return nil, err
	}
	if workdir != "" {
		if abs, err := filepath.Abs(workdir); err == nil {
			workdir = abs
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				workdir = real
			}
		}
	}
	rows, err := s.deps.Store.ListSessions(ctx, store.SessionFilter{IncludeClosed: includeClosed, Archived: archived, Workdir: workdir, VisibleTo: visibleTo})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	elsewhere, paused := s.runningElsewhere(ctx, ""), s.pausedSessions(ctx, "")
	out := make([]Summary, 0, len(rows))
	for _, r := range rows {
		out = append(out, s.summarize(s.localize(r), elsewhere, paused))
	}
	return out, nil
}

// Get returns one session's summary.
func (s *Service) Get(ctx context.Context, id string) (Summary, error) {
	row, err := s.row(ctx, id)
	if err != nil {
		return Summary{}, err
	}
	return s.summarize(row, s.runningElsewhere(ctx, id), s.pausedSessions(ctx, id)), nil
}

// runningElsewhere returns, with several daemons on one store, the sessions
// (only id, when given) whose turns are open according to the store: on a
// daemon that does not own them they are running on their owner. Nil for a
// daemon alone on its store.
func (s *Service) runningElsewhere(ctx context.Context, id string) map[string]bool {
	if s.deps.Leases == nil {
		return nil
	}
	out := map[string]bool{}
	var rows []store.Setting
	if id != "" {
		raw, err := s.deps.Store.GetSetting(ctx, settingsOpenTurns, id)
		if err == nil {
			rows = []store.Setting{{Key: id, Value: raw}}
		}
	} else if all, err := s.deps.Store.ListSettings(ctx, settingsOpenTurns); err == nil {
		rows = all
	}
	for _, r := range rows {
		var turns []string
		if json.Unmarshal(r.Value, &turns) == nil && len(turns) > 0 && !s.deps.Leases.Holds(r.Key) {
			out[r.Key] = true
		}
	}
	return out
}

func (s *Service) summarize(r store.Session, elsewhere, paused map[string]bool) Summary {
	sum := Summary{Row: r, Status: "idle"}
	if l := s.liveSession(r.SessionID); l != nil {
		l.mu.Lock()
		sum.Row.Mode, sum.Row.Provider, sum.Row.Model = l.row.Mode, l.row.Provider, l.row.Model
		sum.Running = l.running != nil && !l.running.ended.Load()
		l.mu.Unlock()
	} else if elsewhere[r.SessionID] {
		sum.Running = true // on the daemon that owns it
	}
	if s.deps.Approvals != nil {
		sum.PendingApprovals = s.deps.Approvals.Pending(r.SessionID)
	}
	switch {
	case r.Closed:
		sum.Status = "closed"
	case paused[r.SessionID]:
		// Its turn waits for a larger budget, here or (after a restart,
		// or on the daemon that took the session over) in the store only;
		// the request that asks for it is among its pending approvals.
		sum.Status = "paused"
		sum.Running = true
	case sum.PendingApprovals > 0:
		sum.Status = "awaiting_approval"
	case sum.Running:
		sum.Status = "running"
	}
	return sum
}

func (s *Service) row(ctx context.Context, id string) (store.Session, error) {
	if strings.TrimSpace(id) == "" {
		return store.Session{}, errs.New(errcode.InvalidParams, "sessionId is required")
	}
	if l := s.liveSession(id); l != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.row, nil
	}
	row, err := s.deps.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return row, errs.New(errcode.NotFound, "session %s not found", id)
	}
	if err != nil {
		return row, fmt.Errorf("load session %s: %w", id, err)
	}
	row.Mode = orDefault(row.Mode, DefaultMode)
	return s.localize(row), nil
}

func (s *Service) liveSession(id string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[id]
}

// load returns the live session id, loading a saved one. Closed sessions
// are refused: they are kept for replay only.
func (s *Service) load(ctx context.Context, id string) (*live, error) {
	if l := s.liveSession(id); l != nil {
		l.mu.Lock()
		closed, isArchived := l.row.Closed, l.row.Archived
		l.mu.Unlock()
		if isArchived {
			return nil, archived(id)
		}
		if closed {
			return nil, errs.New(errcode.InvalidParams, "session %s is closed: it can be resumed for replay only", id)
		}
		// Live here only while this daemon holds the lease: once it is
		// lost, Lost forgets the session a moment later (not in the
		// caller's path), and a call meanwhile asks the lease below, so
		// that it finds the new owner instead of writing unfenced.
		if s.deps.Leases == nil || s.deps.Leases.Holds(id) {
			return l, nil
		}
	}
	if s.deps.Leases != nil && strings.TrimSpace(id) != "" {
		// The session's state is read from the store under the lease: a
		// previous owner's cached mode or closed flag is never used.
		if _, err := s.deps.Store.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
			return nil, errs.New(errcode.NotFound, "session %s not found", id)
		}
		if err := s.deps.Leases.Acquire(ctx, id); err != nil {
			return nil, err
		}
	}
	row, err := s.row(ctx, id)
	if err != nil {
		return nil, err
	}
	if row.Archived {
		return nil, archived(id)
	}
	if row.Closed {
		return nil, errs.New(errcode.InvalidParams, "session %s is closed: it can be resumed for replay only", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.live[id]; l != nil {
		return l, nil
	}
	l := &live{row: row}
	s.live[id] = l
	s.origins.set(id, "")
	return l, nil
}

// Resumed is the state session.resume reports.
type Resumed struct {
	Row store.Session
}

// Resume makes a saved session live (closed ones stay read-only) and makes
// origin the session's origin when its own is gone.
func (s *Service) Resume(ctx context.Context, id, origin string) (store.Session, error) {
	row, err := s.row(ctx, id)
	if err != nil {
		return row, err
	}
	if row.Closed {
		return row, nil
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return row, err
	}
	if cur := s.origins.Of(id); origin != "" && (cur == "" || !s.originAttached(cur)) {
		s.mu.Lock()
		if s.live[id] == l {
			s.origins.replace(id, cur, origin)
		}
		s.mu.Unlock()
	}
	l.mu.Lock()
	row = l.row
	l.mu.Unlock()
	return row, nil
}

func (s *Service) originAttached(origin string) bool {
	return s.deps.Approvals == nil || s.deps.Approvals.OriginAttached(origin)
}

// Origin returns the origin of a live session ("" when none).
func (s *Service) Origin(id string) string {
	return s.origins.Of(id)
}

// Rebind makes newOrigin the origin of every live session whose origin is
// oldOrigin or detached and was created by the same client.
func (s *Service) Rebind(oldOrigins []string, newOrigin string) int {
	old := map[string]bool{}
	for _, o := range oldOrigins {
		old[o] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id := range s.live {
		if o := s.origins.Of(id); old[o] && !s.originAttached(o) {
			s.origins.set(id, newOrigin)
			n++
		}
	}
	return n
}

// Close interrupts a running turn and marks the session closed.
func (s *Service) Close(ctx context.Context, id string) error {
	row, err := s.row(ctx, id)
	if err != nil {
		return err
	}
	if row.Closed {
		return nil
	}
	if l := s.liveSession(id); l != nil {
		s.interrupt(ctx, l, actorOf(ctx))
		l.mu.Lock()
		l.row.Closed = true
		l.mu.Unlock()
	}
	if s.deps.Subagents != nil {
		s.deps.Subagents.InterruptChildren(ctx, id)
	}
	closed := true
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Closed: &closed}); err != nil {
		return fmt.Errorf("close session %s: %w", id, s.refused(ctx, id, err))
	}
	if s.deps.Leases != nil {
		s.deps.Leases.Release(ctx, id)
	}
	if s.deps.Browsers != nil {
		s.deps.Browsers.CloseSession(id)
	}
	if s.deps.Backends != nil {
		if err := s.deps.Backends.CloseSession(ctx, id); err != nil {
			s.deps.Log.Warn("session.close: the session's container was not removed", "session", id, "err", err)
		}
	}
	return nil
}

// SetMode changes the session's mode and emits mode.changed.
func (s *Service) SetMode(ctx context.Context, id, mode string) (string, error) {
	if !modes[mode] {
		return "", errs.New(errcode.InvalidParams, "mode %q is not one of plan, accept, auto", mode)
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return "", err
	}
	if err := s.deps.Store.UpdateSession(ctx, s.writer(id), id, store.SessionUpdate{Mode: &mode}); err != nil {
		return "", fmt.Errorf("save mode: %w", s.refused(ctx, id, err))
	}
	l.mu.Lock()
	l.row.Mode = mode
	l.mu.Unlock()
	if _, err := s.deps.Events.Append(ctx, id, eventkind.ModeChanged, events.ModeChangedEvent{Mode: mode, Principal: actorOf(ctx)}); err != nil {
		return "", err
	}
	return mode, nil
}

// DeleteSelector chooses saved sessions for DeleteSaved: exactly one field.
type DeleteSelector struct {
	SessionID string
	Workdir   string
	All       bool
	// DeleteWorkspace also removes the deleted sessions' workdirs that the
	// daemon made (inside one of Deps.WorkspaceRoots); a user's own
	// directory is never removed.
	DeleteWorkspace bool
}

// absRoots makes workspace roots (Deps.WorkspaceRoots) absolute, with
// symlinks resolved where they exist.
func absRoots(roots []string) []string {
	var out []string
	for _, r := range roots {
		if abs, err := filepath.Abs(r); err == nil {
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				abs = real
			}
			out = append(out, abs)
		}
	}
	return out
}

// daemonWorkspace reports whether dir lies strictly inside a workspace root.
func (s *Service) daemonWorkspace(dir string) bool {
	for _, root := range s.workspaceRoots {
		rel, err := filepath.Rel(root, dir)
		if err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}

// DeleteSaved deletes saved sessions that are not live, in one transaction.
func (s *Service) DeleteSaved(ctx context.Context, sel DeleteSelector) (int, error) {
	n, _, err := s.DeleteSavedWorkspaces(ctx, sel)
	return n, err
}

// DeleteSavedWorkspaces is DeleteSaved that also reports how many
// workspaces sel.DeleteWorkspace removed.
func (s *Service) DeleteSavedWorkspaces(ctx context.Context, sel DeleteSelector) (int, int, error) {
	n, workdirs, err := s.deleteSaved(ctx, sel)
	if err != nil {
		return n, 0, err
	}
	removed := 0
	for id, wd := range workdirs {
		switch {
		case s.managed(id, wd):
			// This daemon's copy of the session's checkpoints goes with
			// the session, whether or not its workspace was asked for.
			if err := s.removeManaged(ctx, id); err == nil && sel.DeleteWorkspace {
				removed++
			}
		case sel.DeleteWorkspace && s.daemonWorkspace(wd):
			if err := os.RemoveAll(wd); err != nil {
				s.deps.Log.Warn("delete a session's workspace", "dir", wd, "err", err)
				continue
			}
			removed++
		}
	}
	return n, removed, nil
}

// deleteSaved deletes the sessions sel chooses and returns how many, with
// the workdir on this daemon of each deleted one.
func (s *Service) deleteSaved(ctx context.Context, sel DeleteSelector) (int, map[string]string, error) {
	n := 0
	for _, set := range []bool{sel.SessionID != "", sel.Workdir != "", sel.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return 0, nil, errs.New(errcode.InvalidParams, "give exactly one of sessionId, workdir or all=true (got %d)", n)
	}
	if err := checkPathLen("workdir", sel.Workdir); err != nil {
		return 0, nil, err
	}
	var candidates []string
	workdirs := map[string]string{}
	switch {
	case sel.SessionID != "":
		row, err := s.row(ctx, sel.SessionID)
		if err != nil {
			return 0, nil, err
		}
		candidates = []string{sel.SessionID}
		workdirs[row.SessionID] = row.Workdir
	default:
		wd := ""
		if sel.Workdir != "" {
			wd = sel.Workdir
			if abs, err := filepath.Abs(wd); err == nil {
				wd = abs
				if real, err := filepath.EvalSymlinks(abs); err == nil {
					wd = real
				}
			}
		}
		rows, err := s.deps.Store.ListSessions(ctx, store.SessionFilter{IncludeClosed: true, Workdir: wd})
		if err != nil {
			return 0, nil, fmt.Errorf("list sessions: %w", err)
		}
		for _, r := range rows {
			candidates = append(candidates, r.SessionID)
			workdirs[r.SessionID] = s.localize(r).Workdir
		}
	}
	// With several daemons, a session is deleted only under this daemon's
	// lease: one live on another daemon is skipped like one live here, and
	// the delete is fenced, so that a session another daemon takes over
	// meanwhile is not deleted under it (nothing is then deleted).
	taken, candidates, err := s.leasesToDelete(ctx, candidates)
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		for _, id := range taken {
			s.deps.Leases.Release(context.WithoutCancel(ctx), id)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	var fences []store.Fence
	for _, id := range candidates {
		if l := s.live[id]; l != nil && !l.closedLocked() {
			continue
		}
		ids = append(ids, id)
		if s.deps.Leases != nil {
			fences = append(fences, s.fence(id)) // none held: matches no lease, refused
		}
	}
	if len(ids) == 0 {
		return 0, nil, nil
	}
	w := store.Unfenced()
	if s.deps.Leases != nil {
		w = store.Under(fences...)
	}
	deleted, err := s.deps.Store.DeleteSessions(ctx, w, ids)
	if errors.Is(err, store.ErrLeaseLost) {
		return 0, nil, errs.Wrap(errcode.Overloaded, err, "another daemon took one of the %d session(s) over while they were being deleted; nothing was deleted, try again", len(ids)).
			WithData("retryAfterMs", 1000)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("delete sessions: %w", err)
	}
	gone := map[string]string{}
	for _, id := range ids {
		s.forget(id)
		if wd := workdirs[id]; wd != "" {
			gone[id] = wd
		}
		s.dropSettings(ctx, id)
	}
	return deleted, gone, nil
}

// dropSettings deletes what a deleted session kept in the settings table.
func (s *Service) dropSettings(ctx context.Context, id string) {
	for _, ns := range []string{effortNamespace, denyExecNamespace, budgetNamespace, pausedNamespace} {
		if err := s.deps.Store.DeleteSetting(ctx, store.Unfenced(), ns, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.deps.Log.WarnContext(ctx, "delete a deleted session's setting", "sessionId", id, "namespace", ns, "err", err)
		}
	}
}

// leasesToDelete takes, with several daemons, the lease of each candidate
// that is not live here, so that it is deleted under this daemon's fence.
// It returns the leases it took (to give back once the delete is done) and
// the candidates left: those another live daemon owns are dropped. Alone
// on its store it returns the candidates as they are.
func (s *Service) leasesToDelete(ctx context.Context, candidates []string) (taken, left []string, err error) {
	if s.deps.Leases == nil {
		return nil, candidates, nil
	}
	for _, id := range candidates {
		if s.deps.Leases.Holds(id) {
			left = append(left, id)
			continue
		}
		err := s.deps.Leases.Acquire(ctx, id)
		var other *cluster.NotOwnerError
		switch {
		case errors.As(err, &other) || errs.CodeOf(err) == errcode.Overloaded:
			continue // live on another daemon
		case err != nil:
			for _, t := range taken {
				s.deps.Leases.Release(context.WithoutCancel(ctx), t)
			}
			return nil, nil, err
		}
		taken = append(taken, id)
		left = append(left, id)
	}
	return taken, left, nil
}

func (l *live) closedLocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.row.Closed
}

// Counters reports the live sessions and running turns.
func (s *Service) Counters(ctx context.Context) (sessions, running int) {
	rows, err := s.deps.Store.ListSessions(ctx, store.SessionFilter{})
	if err == nil {
		sessions = len(rows)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.live {
		l.mu.Lock()
		if l.running != nil && !l.running.ended.Load() {
			running++
		}
		l.mu.Unlock()
	}
	return sessions, running
}

// Shutdown interrupts every running turn; their turn.done says
// interrupted and synthetic. It returns when the turns have ended or ctx ends.
func (s *Service) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.shutdown = true
	all := slices.Collect(maps.Values(s.live))
	s.mu.Unlock()
	for _, l := range all {
		s.interrupt(ctx, l, nil) // the daemon's own shutdown
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.watched.closeAll()
	case <-ctx.Done():
	}
}

func (s *Service) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func validateAttachments(atts []Attachment) error {
	total := 0
	for i, a := range atts {
		switch a.Kind {
		case "file", "image", "text":
		default:
			return errs.New(errcode.InvalidParams, "attachments[%d].kind %q is not one of file, image, text", i, a.Kind)
		}
		if a.Data != "" {
			n := base64.StdEncoding.DecodedLen(len(a.Data))
			if _, err := base64.StdEncoding.DecodeString(a.Data); err != nil {
				return errs.New(errcode.InvalidParams, "attachments[%d].data is not valid base64", i)
			}
			total += n
		}
		total += len(a.Text)
		if total > MaxAttachmentBytes {
			return errs.New(errcode.InvalidParams, "attachments exceed %d MB decoded", MaxAttachmentBytes>>20)
		}
	}
	return nil
}

func attachmentRefs(atts []Attachment) []events.AttachmentRef {
	refs := make([]events.AttachmentRef, 0, len(atts))
	for _, a := range atts {
		// Always a string, "" for none: name is never null on the wire.
		refs = append(refs, events.AttachmentRef{Kind: a.Kind, Name: &a.Name})
	}
	return refs
}

// writer returns the writer of session id's rows (store.Writer): this
// daemon's lease on it, so that the store makes the session's writes only
// while the lease is still this daemon's, and refuses them with
// store.ErrLeaseLost, changing nothing, once another daemon took the
// session over. A daemon that holds no lease on it writes under a fence
// that matches none. Alone on its store (no Leases), store.Unfenced.
func (s *Service) writer(id string) store.Writer {
	if s.deps.Leases == nil {
		return store.Unfenced()
	}
	return store.Under(s.fence(id))
}

// fence returns this daemon's fence on session id, or one that matches no
// lease when it holds none (Leases is set).
func (s *Service) fence(id string) store.Fence {
	f, ok := s.deps.Leases.Fence(id)
	if !ok {
		return store.Fence{Key: id}
	}
	return f
}

// refused turns a write the store refused because another daemon took
// session id over into the error a fenced event append gets (code
// overloaded: the client tries again and reaches the new owner), and drops
// the session here at once rather than at the next renewal. Other errors
// are returned as they are.
func (s *Service) refused(ctx context.Context, id string, err error) error {
	if !errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	if s.deps.Leases != nil {
		s.deps.Leases.Release(context.WithoutCancel(ctx), id)
		s.Lost(id)
	}
	return leaseLost(id, err)
}

// leaseLost is the error of a write refused by the fence of session id.
func leaseLost(id string, err error) error {
	return errs.Wrap(errcode.Overloaded, err, "another daemon took session %s over; this daemon's change was not recorded, try again", id).
		WithData("retryAfterMs", 1000)
}

// openTurns records the unfinished turns of a session in the settings table.
func (s *Service) setOpenTurns(ctx context.Context, id string, turns []string) {
	if s.deps.Leases != nil && !s.deps.Leases.Holds(id) {
		return // the session's new owner keeps its record now
	}
	// Fenced: a daemon that lost the lease after the check above cannot
	// overwrite the new owner's record.
	w := s.writer(id)
	if len(turns) == 0 {
		err := s.deps.Store.DeleteSetting(ctx, w, settingsOpenTurns, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.deps.Log.Warn("record open turns", "sessionId", id, "err", err)
		}
		return
	}
	b, _ := json.Marshal(turns)
	if err := s.deps.Store.PutSetting(ctx, w, settingsOpenTurns, id, b); err != nil {
		s.deps.Log.Warn("record open turns", "sessionId", id, "err", err)
	}
}

// recordOpenTurns records the unfinished turns of the live session l: its
// running turn and its queued prompts, or else the turn whose turn.done the
// store did not take (a restart closes it if nothing else does). Every
// change of them is followed by a call. The calls of a session are
// serialized and each records the state of its moment, so the record is
// the latest state: two calls' writes cannot land in the other order, which
// would leave a queued prompt out of it, never closed if the daemon stops.
func (s *Service) recordOpenTurns(ctx context.Context, l *live) {
	l.recordMu.Lock()
	defer l.recordMu.Unlock()
	l.mu.Lock()
	id := l.row.SessionID
	open := l.openTurnIDs()
	if len(open) == 0 && l.unclosed != "" {
		open = []string{l.unclosed}
	}
	l.mu.Unlock()
	s.setOpenTurns(ctx, id, open)
}

// StoredAgain re-records the open turns of session id after the event log
// stored the events it held while the store could not write: the record
// written meanwhile (a turn that ended) may have failed, and a restart
// would then close that turn a second time.
func (s *Service) StoredAgain(id string) {
	if l := s.liveSession(id); l != nil {
		s.recordOpenTurns(context.Background(), l)
		return
	}
	s.setOpenTurns(context.Background(), id, nil)
}

func (l *live) openTurnIDs() []string {
	var out []string
	if l.running != nil {
		out = append(out, l.running.id)
	}
	for _, p := range l.queue {
		out = append(out, p.turnID)
	}
	return out
}

// closeOpenTurns ends, with a synthetic turn.done{interrupted}, every turn a
// previous daemon run left open (a crash, a kill -9).
func (s *Service) closeOpenTurns(ctx context.Context) error {
	settings, err := s.deps.Store.ListSettings(ctx, settingsOpenTurns)
	if err != nil {
		return fmt.Errorf("read open turns: %w", err)
	}
	for _, st := range settings {
		if err := s.closeOpenTurnsOf(ctx, st.Key, st.Value); err != nil {
			return err
		}
	}
	return nil
}

// closeOpenTurnsOf ends the turns recorded as open in raw for session id.
func (s *Service) closeOpenTurnsOf(ctx context.Context, id string, raw json.RawMessage) error {
	var turns []string
	_ = json.Unmarshal(raw, &turns)
	if len(turns) == 0 {
		return nil
	}
	row, err := s.deps.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		s.setOpenTurns(ctx, id, nil)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read session %s: %w", id, err)
	}
	ended, err := s.endedTurns(ctx, id, row.LastSeq, turns)
	if err != nil {
		return fmt.Errorf("read the log of session %s: %w", id, err)
	}
	// A turn its budget paused stays open, and paused: the session's next
	// owner picks it up where it stopped once the budget is raised
	// (revive). The prompts queued behind it are dropped, like any.
	paused, isPaused, err := s.pausedTurn(ctx, id)
	if err != nil {
		return err
	}
	var keep []string
	for i, t := range turns {
		if isPaused && t == paused.TurnID {
			if ended[t] { // ended after its pause: the record is stale
				if err := s.clearPaused(ctx, id); err != nil {
					return err
				}
			} else {
				keep = append(keep, t)
			}
			continue
		}
		if ended[t] {
			continue
		}
		if i > 0 { // queued, never started
			if _, err := s.deps.Events.Append(ctx, id, eventkind.TurnDequeued, events.TurnDequeuedEvent{TurnID: t, Reason: events.TurnDequeuedReasonDropped}); err != nil {
				return err
			}
		}
		if _, err := s.deps.Events.Append(ctx, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: t, Reason: events.TurnDoneReasonInterrupted, Synthetic: true}); err != nil {
			return err
		}
	}
	if err := repairHistory(ctx, s.deps.Store, s.writer, id); err != nil {
		return err
	}
	s.setOpenTurns(ctx, id, keep)
	s.deps.Log.Info("closed turns left open by the session's previous owner", "sessionId", id, "turns", len(turns)-len(keep), "paused", len(keep))
	return nil
}

// endedTurns returns which of turns, recorded open, already have their
// turn.done in the log of session id (last: its latest seq): the daemon
// that recorded them may have stored a turn's turn.done and stopped before
// it recorded the turn closed. The log is read backwards a page at a time
// until each turn's end or start is found, so a recovery reads about the
// open turns' events only.
func (s *Service) endedTurns(ctx context.Context, id string, last int64, turns []string) (map[string]bool, error) {
	const page = 256
	unseen := map[string]bool{} // neither its end nor its start read yet
	for _, t := range turns {
		unseen[t] = true
	}
	ended := map[string]bool{}
	for hi := last; hi > 0 && len(unseen) > 0; hi -= page {
		lo := max(hi-page, 0)
		evs, err := s.deps.Store.ReadEvents(ctx, id, lo, int(hi-lo))
		if err != nil {
			return nil, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			ev := evs[i]
			if ev.Kind != eventkind.TurnDone && ev.Kind != eventkind.TurnStarted && ev.Kind != eventkind.TurnQueued {
				continue
			}
			var p struct {
				TurnID string `json:"turnId"`
			}
			if json.Unmarshal(ev.Payload, &p) != nil || !unseen[p.TurnID] {
				continue
			}
			if ev.Kind == eventkind.TurnDone {
				ended[p.TurnID] = true
			}
			delete(unseen, p.TurnID)
		}
	}
	return ended, nil
}

// Recover closes the turns the session's previous owner left open (it
// crashed, or lost the lease). The cluster calls it right after this daemon
// took the session's lease, before any call is served under it; any state
// this daemon kept of an earlier ownership is dropped.
func (s *Service) Recover(ctx context.Context, id string) error {
	s.drop(id)
	raw, err := s.deps.Store.GetSetting(ctx, settingsOpenTurns, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the open turns of session %s: %w", id, err)
	}
	return s.closeOpenTurnsOf(ctx, id, raw)
}

// RecoverOpenTurns closes the open turns of the sessions whose lease has
// expired (their owner died) or was this daemon's before a restart;
// sessions another live daemon owns are left to it. Leases taken only for
// this are given back. The daemon runs it at start-up and then every third
// of a lease, so that a crashed daemon's turns are closed within a lease
// even when no client calls on their sessions.
func (s *Service) RecoverOpenTurns(ctx context.Context) error {
	settings, err := s.deps.Store.ListSettings(ctx, settingsOpenTurns)
	if err != nil {
		return fmt.Errorf("read open turns: %w", err)
	}
	for _, st := range settings {
		if s.deps.Leases.Holds(st.Key) {
			continue // running here
		}
		err := s.deps.Leases.Acquire(ctx, st.Key)
		var other *cluster.NotOwnerError
		switch {
		case errors.As(err, &other) || errs.CodeOf(err) == errcode.Overloaded:
			s.deps.Log.Debug("open turns left to the session's owner", "sessionId", st.Key, "reason", err.Error())
			continue
		case err != nil:
			return err
		}
		if _, paused, _ := s.pausedTurn(ctx, st.Key); paused && s.pickUp.Load() {
			// Its turn waits for a larger budget: picked up here, so that
			// a person is asked for it again (askBudget).
			if err := s.revive(ctx, st.Key, nil); err != nil {
				s.deps.Log.Info("budget: a paused turn was not picked up", "sessionId", st.Key, "err", err)
			}
		}
		if s.liveSession(st.Key) == nil {
			s.deps.Leases.Release(ctx, st.Key)
		}
	}
	return nil
}

// Lost forgets a session whose lease this daemon lost (another daemon took
// it over, or this one deposed itself for not renewing it in time): its
// running turn is cancelled at once, which kills its commands, and its
// queue dropped; nothing of it is written here any more (the event log
// and the store refuse it) and the new owner closes the turns. Once the
// turn stopped (or after interruptWait), the session's watching clients
// get the lease_lost notice (eventlog.Log.Retract): error{lease_lost} and
// the turn's turn.done{error}, sent from memory and marked retracted.
//
// Lost never blocks: the turn is cancelled at once, taking no lock (a call
// may hold the session's while it waits for a store this daemon cannot
// reach), and the rest happens on a goroutine of its own.
func (s *Service) Lost(id string) {
	var ts *turnState
	running := false
	if v, ok := s.turns.Load(id); ok {
		ts = v.(*turnState)
		// Whether it ran is read before the cancel: the cancelled turn
		// may end before the goroutine below looks.
		running = !ts.ended.Load()
		ts.cancel()
	}
	go func() {
		if dropped := s.dropLost(id); ts == nil && dropped != nil {
			ts, running = dropped, true
		}
		if !running && s.heldEvents(id) == 0 {
			return // nothing ran and nothing was sent from memory: nothing to tell
		}
		s.tellLost(id, ts)
	}()
}

// dropLost is drop for a session whose lease was lost, unless this daemon
// took the lease again meanwhile (its Recover then dropped the old state,
// and what is live now is the new ownership's).
func (s *Service) dropLost(id string) *turnState {
	s.mu.Lock()
	if s.deps.Leases != nil && s.deps.Leases.Holds(id) {
		s.mu.Unlock()
		return nil
	}
	l := s.live[id]
	s.forget(id)
	s.mu.Unlock()
	return l.stop()
}

// forget removes session id from the live sessions (s.mu held).
func (s *Service) forget(id string) {
	delete(s.live, id)
	s.origins.set(id, "")
	if st, ok := s.checkpoints.LoadAndDelete(id); ok {
		s.watched.drop(st.(*checkpointState).watch)
	}
}

// drop forgets the live state of session id, cancelling its running turn
// and dropping its queue; it returns the running turn, if any.
func (s *Service) drop(id string) *turnState {
	s.mu.Lock()
	l := s.live[id]
	s.forget(id)
	s.mu.Unlock()
	return l.stop()
}

// stop cancels the running turn of a session no longer live here and drops
// its queue; it returns that turn (nil for a nil l or no turn).
func (l *live) stop() *turnState {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = nil
	if l.running != nil {
		l.running.cancel()
	}
	return l.running
}

// retracter is the event log's Retract (runtime/eventlog).
type retracter interface {
	Retract(sessionID string, notice ...eventlog.Notice) error
}

// tellLost waits for the stopped turn ts (nil: none) to wind down, its
// commands killed, and then sends the session's clients the lease_lost
// notice.
func (s *Service) tellLost(id string, ts *turnState) {
	r, ok := s.deps.Events.(retracter)
	if !ok {
		return
	}
	notice := []eventlog.Notice{{Kind: eventkind.Error, Payload: events.ErrorEvent{Code: errcode.LeaseLost,
		Message: "this daemon lost the lease of session " + id + " (it could not renew it in time, or another daemon took the session over): " +
			"the turn was stopped and its commands killed before anything more ran. This notice and the events received unstored from its seq on are void: " +
			"read on after seq - 1 for what the session's new owner stores there, and prompt again to continue"}}}
	if ts != nil {
		select {
		case <-ts.done:
		case <-time.After(interruptWait):
		}
		notice = append(notice, eventlog.Notice{Kind: eventkind.TurnDone, Payload: events.TurnDoneEvent{TurnID: ts.id, Reason: events.TurnDoneReasonError}})
	}
	if err := r.Retract(id, notice...); err != nil {
		s.deps.Log.Error("tell the clients that the session's lease was lost", "sessionId", id, "err", err)
	}
}

// heldEvents is how many events of session id the event log holds in
// memory (sent unstored) because the store could not take them.
func (s *Service) heldEvents(id string) int {
	if h, ok := s.deps.Events.(interface{ Held(string) int }); ok {
		return h.Held(id)
	}
	return 0
}

// OriginSession is a live chat session of one origin (see OriginSessions).
type OriginSession struct {
	SessionID string
	Workdir   string
}

// OriginSessions lists the live, open chat sessions whose origin is origin,
// sorted by id: "the caller's sessions" that protocol 1.x calls without a
// sessionId (agent.spawn, permission.allowlist.add) resolve against.
func (s *Service) OriginSessions(origin string) []OriginSession {
	if origin == "" {
		return nil
	}
	s.mu.Lock()
	ls := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var out []OriginSession
	for _, l := range ls {
		l.mu.Lock()
		if s.origins.Of(l.row.SessionID) == origin && !l.row.Closed && l.row.Kind == store.KindChat {
			out = append(out, OriginSession{SessionID: l.row.SessionID, Workdir: l.row.Workdir})
		}
		l.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b OriginSession) int { return strings.Compare(a.SessionID, b.SessionID) })
	return out
}
