package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/store"
)

// Store is the part of the store the session service uses: the sessions'
// rows, events and model history, the settings it keeps per session, the
// usage its budgets sum, and the deletion of saved sessions.
type Store interface {
	store.SessionStore
	store.EventStore
	store.HistoryStore
	store.SettingStore
	store.UsageStore
	store.CheckpointStore
	store.SessionImporter
	// DeleteSessions deletes the sessions' rows, events, history and
	// leases at once under w (store.Store's).
	DeleteSessions(ctx context.Context, w store.Writer, ids []string) (int, error)
}

// EventLog is the part of runtime/eventlog a session writes to.
type EventLog interface {
	Append(ctx context.Context, sessionID, kind string, payload any) (store.Event, error)
	// Enqueue queues an event without waiting for its commit (see
	// eventlog.Log.Enqueue); streaming chunks use it.
	Enqueue(ctx context.Context, sessionID, kind string, payload any) (func() (store.Event, error), error)
	// EnqueueText is Enqueue for a text chunk ({"text": text}) that may be
	// merged into the session's previous chunk while that one still waits
	// for its commit (see eventlog.Log.EnqueueText); answer text and
	// reasoning use it.
	EnqueueText(ctx context.Context, sessionID, kind, text string) (func() (store.Event, error), error)
	LastSeq(ctx context.Context, sessionID string) (int64, error)
}

// Providers resolves the provider of a session.
type Providers interface {
	// Open returns the provider of a vendor ("" = the default one).
	Open(vendor string) (llm.Provider, error)
	// Default names the default vendor.
	Default() string
}

// Info is what tool and approval factories know of a session.
type Info struct {
	SessionID string
	Workdir   string
	Mode      string
	Kind      string
	JobID     string
	Origin    string
	// Agent is the agent definition the session runs ("" = none); its
	// MCP servers add tools.
	Agent string
	// Backend is the session's backend config (nil = local).
	Backend json.RawMessage
	// DenyExec: the session was created with denyExec; the gate denies
	// every exec tool call.
	DenyExec bool
}

// Backends checks remote tool backends for backend.set.
type Backends interface {
	// Check validates config of kind and connects to it; it returns the
	// config to store and its public form (for backend.changed).
	Check(ctx context.Context, kind string, config map[string]any) (stored json.RawMessage, public map[string]any, err error)
	// CloseSession ends what the backend keeps for the session (its
	// container): the session closed or changed backend.
	CloseSession(ctx context.Context, sessionID string) error
}

// Toolbox builds the tools and the approval gate of one turn.
type Toolbox interface {
	Tools(ctx context.Context, s Info) agent.Tools
	Gate(ctx context.Context, s Info, turnID string) agent.Gate
}

// Approvals is what the session service asks of the approval broker.
type Approvals interface {
	// Pending counts the undecided requests of a session.
	Pending(sessionID string) int
	// OriginAttached reports whether an approver is attached for origin.
	OriginAttached(origin string) bool
	// AskBudget asks, through the unattended approval queue, to raise the
	// budget a turn is paused at, and waits for the answer, the timeout or
	// ctx ending (approval.Broker.AskBudget).
	AskBudget(ctx context.Context, q approval.Question, args approval.BudgetArgs) (approval.Resolution, error)
}

// Skills lists the slash commands installed skills add (source "skill").
type Skills interface {
	// SkillCommands returns one command per installed skill.
	SkillCommands() []SkillCommand
}

// SkillCommand is a command a skill adds: /Name runs a turn whose prompt
// is Prompt (the skill's instructions) followed by the command's arguments.
type SkillCommand struct {
	Name    string
	Summary string
	Prompt  string
}

// Subagents runs sub-agents for a session (the /delegate command) and
// stops them when their parent is interrupted or closed.
type Subagents interface {
	// DelegateTask runs a sub-agent of agent name ("" = the default one)
	// on task for parentID and waits for its end: ok reports whether it
	// completed, summary is its answer (or why it failed). err means the
	// sub-agent could not be started, or ctx ended first.
	DelegateTask(ctx context.Context, parentID, name, task string) (summary string, ok bool, err error)
	// InterruptChildren interrupts the sub-agents of parentID.
	InterruptChildren(ctx context.Context, parentID string)
}

// Leases is this daemon's share of a cluster of daemons on one store
// (runtime/cluster.Node): a session's turns run, and its events are
// written, only on the daemon holding its lease.
type Leases interface {
	// Acquire returns nil when this daemon holds the session's lease,
	// taking it if it is free or expired (the taker closes the turns the
	// previous owner left open before Acquire returns), and an error
	// naming the owner when another live daemon holds it.
	Acquire(ctx context.Context, sessionID string) error
	// Release gives the lease back, if held.
	Release(ctx context.Context, sessionID string)
	// Holds reports whether this daemon holds the session's lease.
	Holds(sessionID string) bool
	// Fence returns the lease this daemon holds on the session (ok false
	// when none): the session's writes are made under it, so that the
	// store refuses them once another daemon took the session over.
	Fence(sessionID string) (f store.Fence, ok bool)
}

// Deps are the session service's collaborators.
type Deps struct {
	Store     Store
	Events    EventLog
	Providers Providers
	// Prices prices each provider call for its usage event (nil: every
	// call is unpriced).
	Prices    agent.Pricer
	Toolbox   Toolbox
	Approvals Approvals // nil: no approvals (every origin is treated as attached)
	// Origins records the live sessions' origins, which the approval
	// broker reads too (nil: the service keeps its own).
	Origins   *Origins
	Skills    Skills    // nil: no skill commands
	Subagents Subagents // nil: /delegate is refused (tool_inactive)
	Backends  Backends  // nil: only the local backend
	// Leases is nil for a daemon alone on its store: every session is its
	// own and start-up closes every open turn. Otherwise only the turns of
	// sessions whose lease this daemon takes are closed (RecoverOpenTurns).
	Leases Leases
	Log    *slog.Logger
	// Agents finds agent definitions for session.create {agent} (and job
	// runs with an agent); nil: a session naming an agent is refused.
	Agents AgentLookup
	// WorkspaceRoots name the directories under which the daemon makes
	// workspaces (team worktrees): session.deleteSaved {deleteWorkspace}
	// may remove a deleted session's workdir only when it lies strictly
	// inside one.
	WorkspaceRoots []string
	// ManagedRoot is where the daemon keeps managed workdirs, one per
	// session named by its id (trellisd --workspace-root): a session
	// created without a workdir gets one, and every daemon running the
	// session rebuilds it from the session's latest checkpoint
	// (docs/workspaces.md). "": a session must name its workdir.
	ManagedRoot string
	// OwnerMayRun checks every new session with an owner (the creating
	// principal, a job's or binding's owner, a sub-agent's parent's) against
	// the owner's agent and workdir limits, with the agent ("" = the default
	// agent) and the resolved workdir, before anything is saved (nil: no
	// check). The daemon's is auth.Authenticator.OwnerMayRun.
	OwnerMayRun func(ctx context.Context, owner, agent, workdir string) error
	// DefaultBudget limits every session with no budget of its own or of
	// its agent definition (trellisd --budget-default-*); unset: none.
	DefaultBudget Limits
	// PrincipalRecheck is how often a turn paused by its principal's
	// budget checks it again unprompted (0: DefaultPrincipalRecheck).
	PrincipalRecheck time.Duration
	// Browsers is the browser tool's per-session state (nil: no browser
	// tool, and session.setBrowserProvider is unsupported).
	Browsers Browsers
	// Checkpoints bound the checkpoints of the sessions' workdirs; the
	// zero value records none.
	Checkpoints CheckpointSettings
	// Retention is the daemon's retention policy (trellisd --retain,
	// --retain-latest, --retain-per): what Prune applies for the rules its
	// caller leaves out. The zero value has none.
	Retention retention.Policy
}

// Browsers keeps the sessions' browsers (runtime/tool/browser.Tool).
type Browsers interface {
	// SetProvider chooses the provider of the session's browser; it fails
	// with the protocol's code (invalid_params, browser_provider_unavailable).
	SetProvider(sessionID, provider string) error
	// CloseSession ends the session's browser: the session closed.
	CloseSession(sessionID string)
}
