package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/job"
	"github.com/trellis-run/trellis/runtime/memory"
	"github.com/trellis-run/trellis/runtime/pricing"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/rpc"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/settings"
	"github.com/trellis-run/trellis/runtime/skill"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/browser"
	"github.com/trellis-run/trellis/runtime/tool/dockerbackend"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

// runtimeServices holds the runtime's domain services and their gRPC adapters.
type runtimeServices struct {
	log       *slog.Logger
	storeKind string
	store     store.Store
	events    *eventlog.Log
	tools     *tool.Registry
	browser   *browser.Tool
	sessions  *session.Service
	broker    *approval.Broker
	allowlist *approval.Allowlist
	approvals *rpc.ApprovalServer
	jobs      *job.Service
	providers *provider.Service
	settings  *settings.Service
	memory    *memory.Service
	skills    *skill.Service
	agents    *agents.Service
	gateway   *gateway.Service
	toolbox   *toolbox.Toolbox
	mcp       *mcpServers
	backends  *backends
	// node is this daemon's membership of the cluster on a PostgreSQL
	// store (nil on SQLite, which is single-node).
	node *cluster.Node
	// lent holds the tools WebSocket clients lent (tool.register).
	lent     *tool.Lent
	pg       clusterStore // the store itself when several daemons share it (PostgreSQL)
	stopTail context.CancelFunc
	// token is the daemon's token: on a shared store, the cluster's
	// (clusterToken).
	token string
	// forward runs calls on sessions other daemons own (nil on SQLite):
	// the gateway's, and the gRPC server's (rpc.Instrumentation).
	forward *rpc.Forwarder
	// closers close what the construction made (close).
	closers closers
}

// edge is what the runtime takes from the daemon's edge, which is made
// first: the token, the listener of the chat gateway's webhook receiver,
// and what commands and the forwarder need to know of the daemon's ports
// and certificates.
type edge struct {
	token string
	// servesTLS: the daemon serves TLS (--tls-cert); clusterTLS is the
	// client side of its cluster certificates (nil: none).
	servesTLS  bool
	clusterTLS *tls.Config
	gatewayLn  net.Listener
	// denyPorts are the TCP ports commands may not connect to
	// (controlPorts).
	denyPorts []int
}

// newRuntimeServices builds the services bottom-up (see the package doc):
// each resource registers its close as it is made, and on an error every
// one made so far is closed, the last first (close).
func newRuntimeServices(ctx context.Context, cfg Config, log *slog.Logger, e edge) (_ *runtimeServices, err error) {
	r := &runtimeServices{log: log, storeKind: cfg.storeKind(), token: e.token}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	var st store.Store
	if r.storeKind == "postgres" {
		st, err = openPostgres(ctx, cfg)
	} else {
		// A corrupt file is refused before anything uses it, with the
		// recovery steps, instead of answering internal to every call.
		db := filepath.Join(cfg.Home, "trellis.db")
		if err := sqlite.QuickCheck(ctx, db); err != nil {
			return nil, err
		}
		var opts []sqlite.Option
		if cfg.Durability == DurabilityBatch {
			opts = append(opts, sqlite.WithBatchDurability())
		}
		st, err = sqlite.Open(db, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	if pg, ok := sharedStore(st); ok {
		r.pg = pg
	}
	st = testStore(cfg.Home, st)
	r.store = st
	r.closers.add(func() error {
		if err := st.Close(); err != nil {
			return fmt.Errorf("close the store: %w", err)
		}
		return nil
	})
	if r.pg != nil && cfg.TokenFile == "" {
		// Daemons behind one load balancer accept the same token.
		if r.token, err = clusterToken(ctx, r.pg, cfg.Home, r.token); err != nil {
			return nil, err
		}
	}
	logOpts := []eventlog.Option{eventlog.WithLinger(max(cfg.CommitLinger, 0)), eventlog.WithPayloadForm(rpc.CanonicalPayload),
		// Once held events are stored, the session re-records its open
		// turns (the record may have failed while the store could not write).
		// A real cycle (the sessions write to the log): the sessions are
		// built later, and nothing is held before they are.
		eventlog.WithHeldStored(func(id string) {
			if r.sessions != nil {
				r.sessions.StoredAgain(id)
			}
		})}
	if cfg.MergeDeltas != 0 {
		logOpts = append(logOpts, eventlog.WithTextMerge(max(cfg.MergeDeltas, 0)))
	}
	if r.storeKind == "postgres" {
		// Before it joins: a daemon without the cluster's certificates
		// stays out of a cluster that uses them.
		if err := clusterMutualTLS(ctx, r.pg, cfg.ClusterCert != ""); err != nil {
			return nil, err
		}
		if r.node, err = r.newNode(cfg); err != nil {
			return nil, err
		}
		// Gives every lease back (another daemon takes the sessions at
		// once) and leaves the registry; idempotent.
		r.closers.add(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r.stopNode(ctx)
			return nil
		})
		// Calls on sessions other daemons own go to them.
		o := rpc.ForwarderOptions{Owners: r.node, SelfID: r.node.ID(), Token: r.token, ClusterTLS: e.clusterTLS}
		if e.clusterTLS == nil && e.servesTLS {
			o.Refuse = "this daemon serves TLS (--tls-cert) but has no cluster certificate: the daemons of a cluster reach each other with mutual TLS; start each with --cluster-ca, --cluster-cert and --cluster-key (docs/security.md)"
		}
		r.forward = rpc.NewForwarder(o)
		r.closers.add(func() error { r.forward.Close(); return nil })
		// A commit that cannot finish within half the lease fails its batch
		// (store_busy) instead of stopping every session's appends.
		logOpts = append(logOpts, eventlog.WithFence(r.node.Fence), eventlog.WithCommitTimeout(cfg.Lease/2))
	}
	r.events = eventlog.New(st, logOpts...)
	r.closers.add(func() error {
		if err := r.events.Close(); err != nil {
			return fmt.Errorf("close the event log: %w", err)
		}
		return nil
	})
	// The agent definitions: the MCP servers, the sessions, the jobs and
	// the gateway look them up; the agents service keeps them.
	defs := agents.NewDefinitions(filepath.Join(cfg.Home, "agents"))
	if r.pg != nil && r.node != nil {
		// Every daemon of the cluster sees the same definitions.
		defs = agents.NewSharedDefinitions(filepath.Join(cfg.Home, "agents"), r.pg)
	}
	agentExists := func(name string) error { _, err := defs.Get(name); return err }
	provs, err := newProviders(ctx, cfg, st, log)
	if err != nil {
		return nil, err
	}
	r.providers = provs
	prices, err := pricing.Open(cfg.Prices, provider.VendorNames(), log)
	if err != nil {
		return nil, fmt.Errorf("prices (--prices): %w", err)
	}
	r.settings = settings.New(st, provs)
	search, err := searchProvider(cfg)
	if err != nil {
		return nil, err
	}
	protect := guard(cfg)
	shellOpts := tool.ShellOptions{
		Unsandboxed: cfg.UnsandboxedCommands,
		EnvAllow:    cfg.ToolEnv,
		Network:     cfg.CommandNetwork,
		Procs:       tool.NewProcTable(CommandsPath(cfg.Home)),
		DenyPorts:   e.denyPorts,
	}
	if r.tools, err = tool.NewBuiltinRegistry(tool.Options{
		Search:               search,
		WebFetchAllowPrivate: cfg.WebFetchAllowPrivate,
		Guard:                protect,
		Shell:                shellOpts,
	}); err != nil {
		return nil, fmt.Errorf("register tools: %w", err)
	}
	// Tools clients lend to sessions (tool.register); the host browser
	// provider is one of them.
	r.lent = tool.NewLent()
	// Before any session runs: New reaps the browsers a killed daemon left.
	if r.browser, err = browser.New(browser.Options{
		Host:         r.lent.HostBrowserOf,
		Provider:     cfg.BrowserProvider,
		Chromium:     cfg.BrowserChromium,
		ProfileRoot:  filepath.Join(cfg.Home, "browser"),
		AllowPrivate: cfg.WebFetchAllowPrivate,
	}); err != nil {
		return nil, fmt.Errorf("browser tool: %w", err)
	}
	r.memory = memory.NewService(st)
	for _, t := range []tool.Tool{r.browser, tool.NewMemoryWrite(r.memory), tool.NewMemorySearch(r.memory)} {
		if err := r.tools.Register(t); err != nil {
			return nil, fmt.Errorf("register tools: %w", err)
		}
	}
	r.skills, err = skill.New(skill.Options{Home: cfg.Home, Catalog: filepath.SplitList(os.Getenv(skill.CatalogEnv)), Log: log})
	if err != nil {
		return nil, fmt.Errorf("load skills: %w", err)
	}
	// The broker routes a request to the session's current origin, which
	// the session service records in origins.
	origins := session.NewOrigins()
	brokerOpts := approval.BrokerOptions{Timeout: cfg.ApprovalTimeout, ScheduledTimeout: cfg.ApprovalTimeout}
	if r.node != nil {
		// Pending requests and approvers live in the shared database.
		brokerOpts.Cluster, brokerOpts.DaemonID, brokerOpts.Liveness = r.pg, r.node.ID(), r.node.Lease()
	}
	r.broker = approval.NewBroker(st, origins.Of, log, brokerOpts)
	r.closers.add(func() error { r.broker.Close(); return nil })
	r.allowlist = approval.NewAllowlist(st, log)
	// The agent's questions travel as approval requests do.
	if err := r.tools.Register(tool.NewAskUser(r.broker)); err != nil {
		return nil, fmt.Errorf("register ask_user: %w", err)
	}
	mcpServers, mcpExtra, err := loadMCPServers(cfg)
	if err != nil {
		return nil, err
	}
	r.mcp = newMCPServers(MCPConfigPath(cfg.Home), cfg.MCPConfig, mcpServers, mcpExtra, func(name string) ([]byte, error) {
		def, err := defs.Get(name)
		return def.MCPServers, err
	}, mcpSandbox(shellOpts, protect), log)
	r.closers.add(func() error { r.mcp.Close(); return nil }) // idempotent
	// Before any session runs: the containers a killed daemon of this
	// home left are removed (their sessions get new ones).
	docker := dockerbackend.New(dockerOwner(cfg.Home), cfg.Home)
	if n, err := docker.Reap(ctx); err != nil {
		log.Warn("docker backend: the containers a killed daemon left were not all removed", "removed", n, "err", err)
	} else if n > 0 {
		log.Info("docker backend: removed the containers a killed daemon left", "removed", n)
	}
	r.backends = newBackends(docker)
	box := toolbox.New(r.tools, OutputsDir(cfg.Home), r.broker, r.allowlist,
		toolbox.WithExtra(r.mcp), toolbox.WithBackend(r.backends), toolbox.WithLent(r.lent))
	r.toolbox = box
	// Sessions, jobs and bindings act as their owners, within what their
	// owners may do (roles, and a service principal's limits).
	owners := &auth.Authenticator{Store: st}
	r.sessions, err = session.NewService(ctx, session.Deps{
		Store: st, Events: r.events, Providers: provs, Prices: pricing.Overlay{Own: provs.Prices, Base: prices}, Toolbox: box, Approvals: r.broker, Origins: origins, Log: log,
		DefaultBudget: defaultBudget(cfg),
		Skills:        skillCommands{r.skills},
		// A real cycle: the agents service runs sessions; it is built
		// next, before any call is served.
		Subagents: subagentsHook{r},
		Backends:  r.backends,
		Leases:    r.leases(),
		Agents: func(name string) (session.AgentDefinition, error) {
			d, err := defs.Get(name)
			if err != nil && errs.Is(err, errcode.NotFound) && name == agents.DefaultName {
				return session.AgentDefinition{Name: name}, nil // the built-in default agent
			}
			return session.AgentDefinition{Name: d.Name, Instructions: d.Instructions, Model: d.Model, Tools: d.Tools,
				Budget: session.Limits{MaxCostMicroUSD: d.MaxCostMicroUSD, MaxTokens: d.MaxTokens}}, err
		},
		WorkspaceRoots: []string{filepath.Join(cfg.Home, "worktrees"), filepath.Join(cfg.Home, "workspaces"), cfg.WorkspaceRoot},
		ManagedRoot:    cfg.WorkspaceRoot,
		OwnerMayRun:    owners.OwnerMayRun,
		Browsers:       r.browser,
		Checkpoints: session.CheckpointSettings{Enabled: !cfg.NoCheckpoints, MaxFile: max(cfg.CheckpointMaxFile, 0),
			Quota: int64(max(cfg.CheckpointQuotaMB, 0)) << 20, Exclude: []string{cfg.Home}},
		Retention: retention.Policy{Within: cfg.Retain, Latest: cfg.RetainLatest, Per: cfg.RetainPer},
	})
	if err != nil {
		return nil, fmt.Errorf("restore sessions: %w", err)
	}
	if r.node != nil {
		if err := r.startNode(ctx); err != nil {
			return nil, err
		}
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("sub-agents' default workdir: %w", err)
	}
	r.agents = agents.New(r.sessions, r.events, agents.Options{Home: cfg.Home, Workdir: cwd, Log: log, Providers: provs, Definitions: defs})
	if err := r.tools.Register(tool.NewDelegateTask(r.agents)); err != nil {
		return nil, fmt.Errorf("register delegate_task: %w", err)
	}
	// The chat gateway: its restored bindings start prompting sessions at
	// once, so it comes after the sessions and the agents.
	gwDeps := gateway.Deps{
		Settings: st, Sessions: gatewaySessions{r.sessions, r.forward}, Events: r.events, Approvals: r.broker,
		AgentExists: agentExists,
		OwnerMayAct: func(ctx context.Context, owner, bindingID string) error {
			return owners.OwnerMayAct(ctx, owner, "gateway binding "+bindingID, store.RoleOperator)
		},
	}
	// The sessions of agent targets' conversations get managed workdirs
	// (Workdir ""), which follow them to the daemon taking them over.
	gwOpts := gateway.Options{Home: cfg.Home, ManagedRoot: cfg.WorkspaceRoot, Listener: e.gatewayLn, Log: log}
	if r.node != nil {
		// Every daemon knows every binding; each poller runs on the one
		// daemon holding the binding's lease.
		gwDeps.Leases, gwOpts.Refresh = r.node, r.node.Lease()/3
	}
	r.gateway, err = gateway.New(ctx, gwDeps, gwOpts)
	if err != nil {
		return nil, fmt.Errorf("start the gateway: %w", err)
	}
	r.closers.add(func() error { r.gateway.Close(); return nil }) // idempotent
	// Jobs and bindings act as their owners, while their owners may.
	jobDeps := job.Deps{Defs: st, Runner: job.NewSessionRunner(r.sessions, r.events), Log: log,
		DefaultWorkdir: cfg.Workdir,
		ManagedRoot:    cfg.WorkspaceRoot,
		AgentExists:    agentExists,
		// A job's channel is checked and posted to through the gateway.
		Channels: r.gateway,
		OwnerMayRun: func(ctx context.Context, owner, jobID string) error {
			return owners.OwnerMayAct(ctx, owner, "job "+jobID, store.RoleMember)
		},
	}
	if r.node != nil {
		// A scheduled run starts, and a run's answer is posted, only under
		// this daemon's leases (the job's, then the run session's).
		jobDeps.Leases = r.node
	}
	var onPostgres bool
	if r.jobs, onPostgres, err = openPostgresJobs(ctx, st, jobDeps); !onPostgres {
		// On SQLite, River keeps its tables in a file of its own (one
		// writer per file).
		r.jobs, err = job.OpenSQLite(ctx, filepath.Join(cfg.Home, "jobs.db"), jobDeps, job.QueueOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("start the job queue: %w", err)
	}
	r.closers.add(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.jobs.Stop(ctx) // a no-op after shutdown
		return nil
	})
	if err := r.jobs.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the job queue: %w", err)
	}
	return r, nil
}

// register puts every service on the gRPC server.
func (r *runtimeServices) register(s grpc.ServiceRegistrar) {
	trellisv1.RegisterSessionServiceServer(s, rpc.NewSessionServer(r.sessions, r.events, r.store, r.log))
	lent := rpc.LentOptions{Lent: r.lent, LastSeq: r.events.LastSeq}
	if r.node != nil {
		lent.Owners = r.node
	}
	trellisv1.RegisterToolServiceServer(s, rpc.NewToolServer(r.sessions, r.toolbox, r.mcp, r.mcp).WithLent(lent))
	r.approvals = rpc.NewApprovalServer(r.broker, r.allowlist, rpc.ApprovalServerOptions{
		Rebind: r.sessions.Rebind, CallerSessions: r.sessions.OriginSessions,
		Access: r.store, Log: r.log,
		// The keys of the facade's WebSocket clients (never the token).
		Keys:    &auth.Authenticator{Store: r.store},
		LastSeq: r.events.LastSeq,
	})
	trellisv1.RegisterApprovalServiceServer(s, r.approvals)
	trellisv1.RegisterJobServiceServer(s, rpc.NewJobServer(r.jobs))
	trellisv1.RegisterProviderServiceServer(s, rpc.NewProviderServer(r.providers))
	trellisv1.RegisterAgentServiceServer(s, rpc.NewAgentServer(r.agents, rpc.AgentServerOptions{
		Channels: r.gateway, CallerSessions: r.sessions.OriginSessions,
	}))
	trellisv1.RegisterGatewayServiceServer(s, rpc.NewGatewayServer(r.gateway, r.store, r.log))
	trellisv1.RegisterMemoryServiceServer(s, rpc.NewMemoryServer(r.memory, r.store))
	trellisv1.RegisterSkillServiceServer(s, rpc.NewSkillServer(r.skills, r.sessions))
	trellisv1.RegisterBackendServiceServer(s, rpc.NewBackendServer(r.sessions))
	trellisv1.RegisterCheckpointServiceServer(s, rpc.NewCheckpointServer(r.sessions))
}

// capabilities lists what this daemon supports (system.hello).
func (r *runtimeServices) capabilities() []string {
	caps := []string{"sessions", "commands", "tools", "backends", "approvals", "jobs", "providers", "agents", "teams", "memory", "skills", "gateway", "mcp", "principals", "checkpoints"}
	sort.Strings(caps)
	return caps
}

func (r *runtimeServices) counters(ctx context.Context) *trellisv1.Counters {
	sessions, running := r.sessions.Counters(ctx)
	return &trellisv1.Counters{Sessions: int32(sessions), RunningTurns: int32(running), Jobs: int32(r.jobs.Count(ctx)), GatewayBindings: int32(r.gateway.Count())}
}

// shutdown ends running turns (interrupted, synthetic) before the store closes.
func (r *runtimeServices) shutdown(ctx context.Context) {
	if r.gateway != nil {
		// First, so that no channel message starts a turn while turns are
		// ending; also ends the gateway watchers.
		r.gateway.Close()
	}
	if r.jobs != nil {
		// First, so that no fire starts a turn while turns are ending.
		if err := r.jobs.Stop(ctx); err != nil {
			r.log.Warn("stop the job queue", "err", err)
		}
	}
	if r.agents != nil {
		// Before the sessions: queued sub-agents end, running ones are
		// interrupted and report subagent.done while the log is open.
		r.agents.Shutdown(ctx)
	}
	if r.sessions != nil {
		r.sessions.Shutdown(ctx)
	}
	if r.mcp != nil {
		// After the turns ended: their calls are done.
		r.mcp.Close()
	}
	if r.backends != nil {
		if err := r.backends.Close(); err != nil {
			r.log.Warn("docker backend: containers were not all removed", "err", err)
		}
	}
	if r.browser != nil {
		// After the turns ended: no call starts a browser any more.
		r.browser.Close()
	}
	// End the long-lived streams (event subscriptions, approvers, queue
	// watchers) so that the gRPC server's graceful stop does not wait on
	// them; both closes are idempotent.
	if r.broker != nil {
		r.broker.Close()
	}
	if r.skills != nil {
		r.skills.Close()
	}
	if r.settings != nil {
		r.settings.Close()
	}
	if r.events != nil {
		if err := r.events.Close(); err != nil {
			r.log.Warn("close event log", "err", err)
		}
	}
	r.stopNode(ctx)
}

// leases is the session service's view of the node (nil on SQLite).
func (r *runtimeServices) leases() session.Leases {
	if r.node == nil {
		return nil
	}
	return r.node
}

// close closes what newRuntimeServices made, the last made first, and
// joins their errors: on a failed start, and at stop after shutdown (each
// close is then a no-op or idempotent).
func (r *runtimeServices) close() error { return r.closers.close() }

// closers are the closes of what the construction made, in the order it
// made them.
type closers []func() error

func (c *closers) add(f func() error) { *c = append(*c, f) }

// close runs them once, the last added first, and joins their errors.
func (c *closers) close() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}

// GatewayAddr is the address (host:port) of the gateway's webhook receiver.
func (d *Daemon) GatewayAddr() string { return d.rt.gateway.Addr() }

// subagentsHook lets the session service reach the agents service, which
// is built after it (it needs the sessions).
type subagentsHook struct{ r *runtimeServices }

func (h subagentsHook) DelegateTask(ctx context.Context, parentID, name, task string) (string, bool, error) {
	if h.r.agents == nil {
		return "", false, errs.New(errcode.ToolInactive, "sub-agents are not running yet: the daemon is starting")
	}
	return h.r.agents.DelegateTask(ctx, parentID, name, task)
}

func (h subagentsHook) InterruptChildren(ctx context.Context, parentID string) {
	if h.r.agents != nil {
		h.r.agents.InterruptChildren(ctx, parentID)
	}
}

// skillCommands gives sessions a /name command for each installed skill.
type skillCommands struct{ skills *skill.Service }

func (c skillCommands) SkillCommands() []session.SkillCommand {
	var out []session.SkillCommand
	for _, sk := range c.skills.List() {
		out = append(out, session.SkillCommand{Name: sk.Name, Summary: sk.Description, Prompt: sk.Instructions})
	}
	return out
}

// gatewaySessions gives the gateway the sessions; a prompt of a session
// another daemon owns (a conversation begun through it) is forwarded there.
type gatewaySessions struct {
	*session.Service
	forward *rpc.Forwarder // nil: a daemon alone on its store
}

func (g gatewaySessions) Prompt(ctx context.Context, id, text string, atts []session.Attachment, origin string) (string, error) {
	turn, err := g.Service.Prompt(ctx, id, text, atts, origin)
	var other *cluster.NotOwnerError
	if errors.As(err, &other) && g.forward != nil && len(atts) == 0 && origin == "" {
		return g.forward.Prompt(ctx, other, id, text)
	}
	return turn, err
}

// defaultBudget is the sessions' default budget (--budget-default-*): a
// figure of 0 limits nothing.
func defaultBudget(cfg Config) session.Limits {
	var lim session.Limits
	if cfg.BudgetDefaultCostMicroUSD > 0 {
		lim.MaxCostMicroUSD = &cfg.BudgetDefaultCostMicroUSD
	}
	if cfg.BudgetDefaultTokens > 0 {
		lim.MaxTokens = &cfg.BudgetDefaultTokens
	}
	return lim
}
