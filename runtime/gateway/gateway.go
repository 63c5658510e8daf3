package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/trellis-run/trellis/internal/broadcast"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// Namespace is the settings namespace bindings are kept in.
const Namespace = "gateway"

// TelegramAPIEnv overrides the Telegram Bot API base URL (tests).
const TelegramAPIEnv = "TRELLIS_TELEGRAM_API"

// SlackAPIEnv overrides the Slack Web API base URL (tests).
const SlackAPIEnv = "TRELLIS_SLACK_API"

// Platforms and binding states.
const (
	PlatformWebhook  = "webhook"
	PlatformTelegram = "telegram"
	PlatformSlack    = "slack"
	PlatformDiscord  = "discord"

	StateActive = "active"
	StateError  = "error"
)

var (
	// ErrNotFound: no binding has that id.
	ErrNotFound = errors.New("gateway binding not found")
	// ErrLagged: a watcher fell more than its backlog behind and was dropped.
	ErrLagged = broadcast.ErrLagged
	// ErrClosed: the service has stopped.
	ErrClosed = errors.New("gateway service closed")
)

// Sessions is what the gateway needs of runtime/session.
type Sessions interface {
	Create(ctx context.Context, p session.CreateParams) (string, error)
	Prompt(ctx context.Context, id, text string, atts []session.Attachment, origin string) (string, error)
	Get(ctx context.Context, id string) (session.Summary, error)
}

// Events is what the gateway needs of runtime/eventlog.
type Events interface {
	LastSeq(ctx context.Context, sessionID string) (int64, error)
	Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*eventlog.Subscription, error)
}

// Deps are the services the gateway calls.
type Deps struct {
	Settings store.SettingStore
	Sessions Sessions
	Events   Events
	// AgentExists reports whether an agent definition of that name exists
	// (nil accepts every name).
	AgentExists func(name string) error
	// OwnerMayAct checks before each message that the binding's owner
	// (not "") may still have it answered: a deleted or demoted owner's
	// binding answers with its error (nil: no check).
	OwnerMayAct func(ctx context.Context, owner, bindingID string) error
	// Leases, on a store several daemons share, gives each binding's
	// inbound channel (a Telegram poller) to one daemon at a time
	// (runtime/cluster.Node); nil: this daemon alone runs them all.
	Leases Leases
	// Approvals, when set, lets Slack, Discord and Telegram bindings show the
	// approval requests of their conversations' turns as buttons and answer
	// them (approval.Broker); nil: they wait in the unattended queue.
	Approvals Approvals
}

// Leases hands out named leases shared by the daemons of a cluster.
type Leases interface {
	// AcquireResource takes or keeps the lease key; false when another
	// live daemon holds it. onLost runs if it is later taken over.
	AcquireResource(ctx context.Context, key string, onLost func()) (bool, error)
	// Release gives the lease back, if held.
	Release(ctx context.Context, key string)
	// Fence returns the lease this daemon holds on key, judged on its own
	// monotonic clock (ok false when it holds none, or when its last
	// renewal is too old to be sure nobody took it over).
	Fence(key string) (store.Fence, bool)
	// ID is this daemon's id, the owner of the leases it holds.
	ID() string
}

// Options configure the service; zero values mean the defaults.
type Options struct {
	// Home is the daemon's home (secret:NAME files live under it).
	Home string
	// Workdir is the workdir of the sessions of agent targets; "": each
	// conversation's session gets a managed workdir of its own (a session
	// created without a workdir), which follows it to the daemon taking
	// it over (docs/workspaces.md).
	Workdir string
	// ManagedRoot is the session service's managed workdirs' root
	// (session.Deps.ManagedRoot): managed conversations are allowed only
	// when it is set, and a binder's workdir limits are checked against it.
	ManagedRoot string
	// Listen is the webhook receiver's address (default 127.0.0.1:0).
	Listen string
	// Listener, when set, is the webhook receiver's listener, bound by
	// the caller (Listen is then unused); the service closes it.
	Listener net.Listener
	// TelegramAPI is the Bot API base URL (default $TRELLIS_TELEGRAM_API,
	// else https://api.telegram.org).
	TelegramAPI string
	// SlackAPI is the Slack Web API base URL (default $TRELLIS_SLACK_API,
	// else https://slack.com/api).
	SlackAPI string
	// SlackUpdateInterval is the least time between two chat.update calls
	// streaming one answer (default 1 s).
	SlackUpdateInterval time.Duration
	// TelegramEditInterval is the least time between two editMessageText
	// calls streaming one answer (default 1 s; Telegram limits edits).
	TelegramEditInterval time.Duration
	// PollTimeout is the getUpdates long-poll timeout (default 25 s).
	PollTimeout time.Duration
	// Getenv reads env:NAME credentials (default os.Getenv).
	Getenv func(string) string
	// Client makes the outbound requests (default: a 60 s timeout client).
	Client *http.Client
	Log    *slog.Logger
	// Discord configures Discord bindings (discord_rest.go).
	Discord DiscordOptions
	// Refresh, when positive, reads the bindings from the store again that
	// often: bindings made or removed through another daemon of a cluster
	// start and stop here too, and the binding leases (Deps.Leases) are
	// claimed or given up. 0: the bindings are read once, at start.
	Refresh time.Duration
}

// Target is what a binding's messages prompt.
type Target struct {
	Agent      string            `json:"agent,omitempty"`
	Session    string            `json:"session,omitempty"`
	NewSession *NewSessionTarget `json:"newSession,omitempty"`
}

// NewSessionTarget asks for a new session per conversation, in Workdir
// (unmanaged), or in a managed workdir of its own when Workdir is "".
type NewSessionTarget struct {
	Workdir string `json:"workdir"`
	Mode    string `json:"mode,omitempty"`
}

// String renders the target as gateway.list shows it.
func (t Target) String() string {
	switch {
	case t.Agent != "":
		return "agent:" + t.Agent
	case t.Session != "":
		return "session:" + t.Session
	case t.NewSession != nil:
		return "newSession:" + t.NewSession.Workdir
	}
	return ""
}

// BindParams are the params of gateway.bind.
type BindParams struct {
	Platform       string
	CredentialsRef string
	Target         Target
	ChannelID      string
	UserID         string
	// Mode is a Slack binding's inbound side: "socket" (Socket Mode) or
	// "events" (the Events API over HTTP); "" picks socket when the
	// credential has an app-level token, events otherwise.
	Mode string
}

// Binding is one binding as gateway.list shows it.
type Binding struct {
	BindingID string
	Platform  string
	Target    string
	ChannelID string // "" = any
	UserID    string // "" = any
	State     string // StateActive or StateError
	LastError string
	// Owner is the principal that made the binding, which owns the
	// sessions its conversations create ("" = the daemon token);
	// OwnerName is its name then.
	Owner, OwnerName string
}

// record is a binding as stored: the credential's reference, never its value.
type record struct {
	BindingID      string            `json:"bindingId"`
	Platform       string            `json:"platform"`
	CredentialsRef string            `json:"credentialsRef"`
	Target         Target            `json:"target"`
	ChannelID      string            `json:"channelId,omitempty"`
	UserID         string            `json:"userId,omitempty"`
	Conversations  map[string]string `json:"conversations,omitempty"` // conversation key → session id
	CreatedAt      time.Time         `json:"createdAt"`
	Owner          string            `json:"owner,omitempty"` // "" = the daemon token
	OwnerName      string            `json:"ownerName,omitempty"`
	Mode           string            `json:"mode,omitempty"` // a Slack binding's: socket or events
}

// binding is a live binding.
type binding struct {
	rec    record
	secret string          // the resolved credential: never logged, never shown
	slack  *slackState     // a Slack binding's tokens and mode (nil: other platforms)
	ctx    context.Context // ends when the binding stops here
	cancel context.CancelFunc

	mu        sync.Mutex // guards state, lastError, rec.Conversations, polling, refused
	state     string
	lastError string
	convMu    sync.Mutex // serializes conversation creation
	// polling ends the running inbound poller (nil: none runs here).
	polling context.CancelFunc
	// refused: the platform refused the binding for good (Discord's
	// errDiscordFatal) on this daemon, which gave its lease back and does
	// not claim it again until the daemon restarts.
	refused bool
}

// Service keeps the bindings and runs their channels.
type Service struct {
	deps   Deps
	opts   Options
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	watch  broadcast.Hub[Event]
	ln     net.Listener
	srv    *http.Server
	wg     sync.WaitGroup

	mu       sync.Mutex
	bindings map[string]*binding
	closed   bool

	discord sync.Map // bot token → *dcLimits (Discord's REST rate limits)
}

// Listen binds the webhook receiver's address, for Options.Listener.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: webhook receiver on %s: %w", addr, err)
	}
	return ln, nil
}

// New restores the stored bindings, starts the webhook receiver and the
// Telegram pollers. A stored binding whose credential is missing now is
// kept in state error.
func New(ctx context.Context, deps Deps, opts Options) (*Service, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.TelegramAPI == "" {
		opts.TelegramAPI = opts.Getenv(TelegramAPIEnv)
	}
	if opts.TelegramAPI == "" {
		opts.TelegramAPI = "https://api.telegram.org"
	}
	opts.TelegramAPI = strings.TrimRight(opts.TelegramAPI, "/")
	if opts.SlackAPI == "" {
		opts.SlackAPI = opts.Getenv(SlackAPIEnv)
	}
	if opts.SlackAPI == "" {
		opts.SlackAPI = "https://slack.com/api"
	}
	opts.SlackAPI = strings.TrimRight(opts.SlackAPI, "/")
	if opts.SlackUpdateInterval <= 0 {
		opts.SlackUpdateInterval = time.Second
	}
	if opts.TelegramEditInterval <= 0 {
		opts.TelegramEditInterval = time.Second
	}
	if opts.PollTimeout == 0 {
		opts.PollTimeout = 25 * time.Second
	}
	opts.Discord = opts.Discord.withDefaults(opts.Getenv)
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: opts.PollTimeout + 35*time.Second}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	recs, err := deps.Settings.ListSettings(ctx, Namespace)
	if err != nil {
		if opts.Listener != nil {
			opts.Listener.Close()
		}
		return nil, fmt.Errorf("gateway: load bindings: %w", err)
	}
	ln := opts.Listener
	if ln == nil {
		if ln, err = Listen(opts.Listen); err != nil {
			return nil, err
		}
	}
	s := &Service{deps: deps, opts: opts, log: opts.Log.With("component", "gateway"), ln: ln, bindings: map[string]*binding{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.srv = &http.Server{Handler: s.receiver(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("webhook receiver stopped", "err", err)
		}
	}()
	for _, st := range recs {
		if err := s.restore(st); err != nil {
			return nil, err
		}
	}
	if opts.Refresh > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.refreshLoop()
		}()
	}
	s.log.Info("gateway started", "bindings", len(s.bindings), "webhookReceiver", s.Addr())
	return s, nil
}

// restore makes a stored binding live.
func (s *Service) restore(st store.Setting) error {
	var rec record
	if err := json.Unmarshal(st.Value, &rec); err != nil {
		s.log.Warn("skip an unreadable gateway binding", "key", st.Key, "err", err)
		return nil
	}
	b := &binding{rec: rec, state: StateActive}
	var err error
	if b.secret, err = s.resolveCredential(rec.CredentialsRef); err != nil {
		b.state, b.lastError = StateError, err.Error()
	} else if rec.Platform == PlatformSlack {
		if b.slack, err = s.slackBinding(&b.rec, b.secret); err != nil {
			b.state, b.lastError = StateError, err.Error()
		}
	}
	return s.add(b)
}

// Addr is the webhook receiver's address (host:port).
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Count is the number of bindings.
func (s *Service) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bindings)
}

// Bind validates p, stores the binding and starts it. The binding belongs
// to the calling principal (ctx's, the daemon token's if none), and so do
// the sessions its conversations create.
func (s *Service) Bind(ctx context.Context, p BindParams) (string, error) {
	switch p.Platform {
	case PlatformWebhook, PlatformTelegram, PlatformSlack:
	case PlatformDiscord:
		if err := checkDiscordBind(p); err != nil {
			return "", err
		}
	default:
		return "", errs.New(errcode.InvalidParams, "platform %q is not one of telegram, slack, discord, webhook", p.Platform)
	}
	if err := s.checkTarget(ctx, p.Target); err != nil {
		return "", err
	}
	if who, ok := auth.PrincipalFrom(ctx); ok && who.Limited() {
		if err := s.targetMayRun(ctx, who, p.Target); err != nil {
			return "", err
		}
	}
	if p.Mode != "" && p.Platform != PlatformSlack {
		return "", errs.New(errcode.InvalidParams, "mode %q: only slack bindings take a mode", p.Mode)
	}
	secret, err := s.resolveCredential(p.CredentialsRef)
	if err != nil {
		return "", err
	}
	rec := record{
		BindingID: ids.New("b"), Platform: p.Platform, CredentialsRef: p.CredentialsRef,
		Target: p.Target, ChannelID: p.ChannelID, UserID: p.UserID, CreatedAt: time.Now().UTC(), Mode: p.Mode,
	}
	var slack *slackState
	if p.Platform == PlatformSlack {
		if slack, err = s.slackBinding(&rec, secret); err != nil {
			return "", err
		}
	}
	if who, ok := auth.PrincipalFrom(ctx); ok && !who.Builtin {
		rec.Owner, rec.OwnerName = who.ID, who.Name
	}
	if err := s.save(ctx, rec); err != nil {
		return "", err
	}
	if slack != nil {
		// Before any event: daemons record the events they take in it.
		if err := s.deps.Settings.PutSetting(ctx, store.Unfenced(), SlackSeenNamespace, rec.BindingID, json.RawMessage(`{"taken":{}}`)); err != nil {
			_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), Namespace, rec.BindingID)
			return "", fmt.Errorf("gateway: save binding %s: %w", rec.BindingID, err)
		}
	}
	if err := s.add(&binding{rec: rec, secret: secret, slack: slack, state: StateActive}); err != nil {
		_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), Namespace, rec.BindingID)
		return "", err
	}
	s.log.Info("gateway binding added", "bindingId", rec.BindingID, "platform", rec.Platform, "target", rec.Target.String(), "credentialsRef", rec.CredentialsRef)
	return rec.BindingID, nil
}

// BindAgentChannel is agent.bindChannel: channel is "platform:channelId";
// ref "" means env:TRELLIS_<PLATFORM>_TOKEN.
func (s *Service) BindAgentChannel(ctx context.Context, agent, channel, ref string) error {
	platform, channelID, ok := strings.Cut(channel, ":")
	if !ok || platform == "" || channelID == "" {
		return errs.New(errcode.InvalidParams, "channel %q: want platform:channelId, e.g. telegram:12345 or webhook:default", channel)
	}
	if strings.TrimSpace(agent) == "" {
		return errs.New(errcode.InvalidParams, "name is required: the agent the channel's messages go to")
	}
	if ref == "" {
		ref = platform // secret:PLATFORM, else TRELLIS_PLATFORM_TOKEN or PLATFORM_BOT_TOKEN
	}
	_, err := s.Bind(ctx, BindParams{Platform: platform, CredentialsRef: ref, Target: Target{Agent: agent}, ChannelID: channelID})
	return err
}

// AgentChannels lists the "platform:channelId" channels bound to an agent.
func (s *Service) AgentChannels(name string) []string {
	out := []string{}
	for _, b := range s.List(context.Background()) {
		if b.Target == "agent:"+name {
			out = append(out, b.Platform+":"+b.ChannelID)
		}
	}
	return out
}

func (s *Service) checkTarget(ctx context.Context, t Target) error {
	n := 0
	if t.Agent != "" {
		n++
	}
	if t.Session != "" {
		n++
	}
	if t.NewSession != nil {
		n++
	}
	if n != 1 {
		return errs.New(errcode.InvalidParams, "target: want exactly one of {agent: name}, {session: id}, {newSession: {workdir, mode}}")
	}
	switch {
	case t.Agent != "":
		if s.deps.AgentExists != nil {
			if err := s.deps.AgentExists(t.Agent); err != nil {
				return errs.Wrap(unknownCode(err), err, "target agent %q: %v", t.Agent, err)
			}
		}
		if s.opts.Workdir == "" && s.opts.ManagedRoot == "" {
			return errs.New(errcode.InvalidParams, "target agent %q: the daemon has no default workdir for its sessions", t.Agent)
		}
	case t.Session != "":
		if _, err := s.deps.Sessions.Get(ctx, t.Session); err != nil {
			return errs.Wrap(unknownCode(err), err, "target session %q: %v", t.Session, err)
		}
	case t.NewSession != nil:
		if t.NewSession.Workdir == "" {
			if s.opts.ManagedRoot == "" {
				return errs.New(errcode.InvalidParams, "target newSession: workdir is required: this daemon has no workspace root for managed workdirs")
			}
		} else if st, err := os.Stat(t.NewSession.Workdir); err != nil || !st.IsDir() {
			return errs.New(errcode.InvalidParams, "target newSession: workdir %q is not an existing directory", t.NewSession.Workdir)
		}
		switch t.NewSession.Mode {
		case "", "plan", "accept", "auto":
		default:
			return errs.New(errcode.InvalidParams, "target newSession: mode %q is not one of plan, accept, auto", t.NewSession.Mode)
		}
	}
	return nil
}

// unknownCode is the code of a target that cannot be found: not_found when
// it does not exist (as snowpea answers), the error's own code otherwise.
func unknownCode(err error) string {
	if errors.Is(err, store.ErrNotFound) || errs.CodeOf(err) == errcode.NotFound {
		return errcode.NotFound
	}
	if code := errs.CodeOf(err); code != "" && code != errcode.Internal {
		return code
	}
	return errcode.InvalidParams
}

// targetMayRun checks the agent and workdir the target's sessions run
// against the limits of who, the principal binding it (each new
// conversation's session is checked again against its owner's).
func (s *Service) targetMayRun(ctx context.Context, who auth.Principal, t Target) error {
	switch {
	case t.Agent != "":
		return who.MayRun(t.Agent, s.conversationWorkdir(s.opts.Workdir))
	case t.NewSession != nil:
		return who.MayRun("", s.conversationWorkdir(t.NewSession.Workdir))
	}
	sum, err := s.deps.Sessions.Get(ctx, t.Session)
	if err != nil {
		return err
	}
	return who.MayRun(sum.Row.Agent, sum.Row.Workdir)
}

// conversationWorkdir is where the sessions of a target whose workdir is
// dir work, for a limits check: dir, or the managed workdirs' root when
// dir is "" (each session then gets a managed workdir under it).
func (s *Service) conversationWorkdir(dir string) string {
	if dir == "" {
		return s.opts.ManagedRoot
	}
	return dir
}

// List returns the bindings ordered by id.
func (s *Service) List(context.Context) []Binding {
	s.mu.Lock()
	bs := make([]*binding, 0, len(s.bindings))
	for _, b := range s.bindings {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	out := make([]Binding, 0, len(bs))
	for _, b := range bs {
		b.mu.Lock()
		out = append(out, Binding{
			BindingID: b.rec.BindingID, Platform: b.rec.Platform, Target: b.rec.Target.String(),
			ChannelID: b.rec.ChannelID, UserID: b.rec.UserID, State: b.state, LastError: b.lastError,
			Owner: b.rec.Owner, OwnerName: b.rec.OwnerName,
		})
		b.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BindingID < out[j].BindingID })
	return out
}

// Unbind stops and removes a binding.
func (s *Service) Unbind(ctx context.Context, id string) error {
	s.mu.Lock()
	b, ok := s.bindings[id]
	if ok {
		delete(s.bindings, id)
	}
	s.mu.Unlock()
	if !ok {
		return errs.Wrap(errcode.NotFound, ErrNotFound, "gateway binding %q not found (gateway.list shows the bindings)", id)
	}
	if b.cancel != nil {
		b.cancel()
	}
	s.release(b)
	_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), OffsetNamespace, id) // none for other platforms
	_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), PostsNamespace, id)  // none before its first post
	_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), SlackSeenNamespace, id)
	_ = s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), DiscordStateNamespace, id)
	if err := s.deps.Settings.DeleteSetting(ctx, store.Unfenced(), Namespace, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("gateway: delete binding %s: %w", id, err)
	}
	s.log.Info("gateway binding removed", "bindingId", id)
	return nil
}

// Watch streams gateway events until ctx ends.
func (s *Service) Watch(ctx context.Context) *Watch { return s.watch.Add(ctx) }

// Close stops the receiver, the pollers and the watches.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.wg.Wait()
	s.watch.Close()
}

func (s *Service) save(ctx context.Context, rec record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("gateway: encode binding: %w", err)
	}
	if err := s.deps.Settings.PutSetting(ctx, store.Unfenced(), Namespace, rec.BindingID, raw); err != nil {
		return fmt.Errorf("gateway: save binding %s: %w", rec.BindingID, err)
	}
	return nil
}

// add makes b live and starts its inbound side (Telegram polling; webhook
// bindings are served by the receiver). It holds s.mu so that no poller is
// added once Close has begun.
func (s *Service) add(b *binding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errs.Wrap(errcode.Overloaded, ErrClosed, "the gateway is stopping: bind again once the daemon is back").WithData("retryAfterMs", 1000)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	b.ctx, b.cancel = ctx, cancel
	s.bindings[b.rec.BindingID] = b
	if pulls(b) {
		if s.deps.Leases == nil {
			s.startPollerLocked(ctx, b)
		} else {
			// Claimed outside s.mu: the lease is a store call.
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.claim(ctx, b)
			}()
		}
	}
	return nil
}

// startPollerLocked runs b's Telegram poller until ctx ends or the poller
// is stopped; s.mu is held.
func (s *Service) startPollerLocked(ctx context.Context, b *binding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.polling != nil {
		return
	}
	pctx, stop := context.WithCancel(ctx)
	b.polling = stop
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		switch b.rec.Platform {
		case PlatformSlack:
			s.runSlackSocket(pctx, b)
			return
		case PlatformDiscord:
			s.runDiscord(pctx, b)
			return
		}
		s.pollTelegram(pctx, b)
	}()
}

// pulls reports whether b's messages are pulled by a connection of this
// daemon's (a Telegram poller, a Slack Socket Mode session, a Discord
// gateway connection), which runs on the daemon holding the binding's lease.
func pulls(b *binding) bool {
	switch {
	case b.secret == "":
		return false
	case b.rec.Platform == PlatformTelegram, b.rec.Platform == PlatformDiscord:
		return true
	case b.rec.Platform == PlatformSlack:
		return b.slack != nil && b.slack.mode == SlackModeSocket
	}
	return false
}

// setState records a binding's health; errors are scrubbed of the secret.
func (s *Service) setState(b *binding, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.state, b.lastError = StateActive, ""
		return
	}
	b.state, b.lastError = StateError, s.scrub(b, err.Error())
}

// unanswered is the error of a request to a platform's API for b that got
// no answer: what was called and the cause alone, scrubbed of b's
// credential. The URL is left out, as it may carry the credential
// (Telegram's does).
func (s *Service) unanswered(b *binding, what string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%s: %s", what, s.scrub(b, err.Error()))
}

// scrub removes the binding's credential from a message.
func (s *Service) scrub(b *binding, msg string) string {
	if b.secret != "" {
		msg = strings.ReplaceAll(msg, b.secret, "[credential]")
	}
	if b.slack != nil {
		for _, v := range b.slack.tokens() {
			msg = strings.ReplaceAll(msg, v, "[credential]")
		}
	}
	return msg
}

func (s *Service) emit(b *binding, kind string, payload map[string]any) {
	s.watch.Publish(Event{BindingID: b.rec.BindingID, Kind: kind, Payload: payload})
}
