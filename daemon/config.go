package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/browser"
)

// The values of Config.Durability.
const (
	DurabilitySync  = "sync"
	DurabilityBatch = "batch"
)

// Config is the daemon's configuration; zero values mean the defaults.
type Config struct {
	// Home holds the token, daemon.json, the database and logs.
	Home string
	// Host is the address both listeners bind (loopback by default). A
	// non-loopback host needs TLS (TLSCert, TLSKey) or InsecureNoTLS.
	Host string
	// TLSCert and TLSKey are PEM files (the certificate chain and its
	// key): the WebSocket/REST and gRPC listeners then serve TLS only. The
	// files are read again when they change (a renewed certificate is
	// served from the next handshake on).
	TLSCert, TLSKey string
	// ClusterCA, ClusterCert and ClusterKey are PEM files: the CAs of the
	// cluster's daemon certificates, and this daemon's certificate (for
	// serving and client authentication) and key. With them the daemons of
	// a cluster authenticate each other with mutual TLS: a forwarded call
	// runs as the principal the forwarding daemon names only when that
	// daemon presented a certificate of ClusterCA. Needs TLSCert. The files
	// are read again when they change.
	ClusterCA, ClusterCert, ClusterKey string
	// InsecureNoTLS lets a non-loopback Host serve without TLS: keys and
	// the token then cross the network in clear (logged at start).
	InsecureNoTLS bool
	// Port is the HTTP/WebSocket port; 0 picks a free port.
	Port int
	// GRPCPort is the gRPC port; 0 picks a free port.
	GRPCPort int
	// GatewayPort is the loopback port of the gateway's webhook receiver
	// (POST /v1/gateway/webhook/{bindingId}); 0 picks a free port.
	GatewayPort int
	// Provider selects the model provider, e.g. "fake:/path/script.json".
	Provider string
	// Store selects where state is kept: "" or "sqlite" = the embedded
	// SQLite file in Home; a postgres:// (or postgresql://) DSN = that
	// PostgreSQL database, which several daemons can share. Unset, it is
	// $TRELLIS_STORE: a DSN kept off the command line, where /proc shows
	// it to every process on the machine (docs/security.md).
	Store string
	// AllowOrigins lists web origins allowed to open a WebSocket.
	AllowOrigins []string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogToStderr also writes the logs to stderr.
	LogToStderr bool
	// LogMaxSizeMB is the size at which the log file is rotated (default 100).
	LogMaxSizeMB int
	// LogMaxFiles is how many rotated log files are kept (default 5).
	LogMaxFiles int
	// SearchProvider answers web_search: "searxng=URL" (a SearXNG
	// instance with the json format enabled), "brave" (key from
	// BRAVE_API_KEY or <home>/secrets/brave.json) or "brave=ENDPOINT";
	// "" means $TRELLIS_SEARCH_PROVIDER, else web_search is inactive.
	SearchProvider string
	// WebFetchAllowPrivate lets web_fetch reach loopback and private
	// addresses (refused by default).
	WebFetchAllowPrivate bool
	// Prices is a price file (pricing's TOML format, docs/operations.md)
	// whose entries replace the embedded price table's, model by model;
	// "" = the embedded table alone. The file is read again when it
	// changes; a change that does not parse is logged and ignored.
	Prices string
	// BrowserProvider is the sessions' default browser provider: "local"
	// (Chromium on this machine, the default) or "none"; a session may
	// change its own with session.setBrowserProvider.
	BrowserProvider string
	// BrowserChromium is the browser tool's Chromium, a path or a name on
	// PATH; "" looks up chromium, chromium-browser and google-chrome.
	BrowserChromium string
	// MCPConfig is an mcpServers file (Claude Desktop format) whose servers
	// are added to those of <home>/mcp.json.
	MCPConfig string
	// ApprovalTimeout is how long an approval request waits for an answer
	// (default 300 s).
	ApprovalTimeout time.Duration
	// CommitLinger is how long the event log waits for more streaming
	// chunks before committing them (0 = eventlog.DefaultLinger, negative =
	// commit every event at once).
	CommitLinger time.Duration
	// MergeDeltas is the most bytes of text that consecutive answer (or
	// reasoning) chunks of a session are merged into, as one message.delta
	// (message.reasoning) event, while the first of them still waits for
	// its commit (0 = eventlog.DefaultMergeMax, negative = every chunk is
	// its own event).
	MergeDeltas int
	// Durability is how a commit of the store reaches its disk: "sync"
	// (every commit fsynced: SQLite synchronous=FULL, PostgreSQL
	// synchronous_commit as the server has it) or "batch" (SQLite
	// synchronous=NORMAL, PostgreSQL synchronous_commit=off: a commit
	// survives the daemon's crash, a power loss may roll back the last
	// ones). Default sync.
	Durability string
	// ProviderConcurrency and ProviderRPM bound the requests each real
	// model provider (openai, anthropic) gets from all the daemon's
	// sessions together: at most ProviderConcurrency in flight, at most
	// ProviderRPM started a minute (0 = no bound). A call waits for its
	// turn, and an interrupt ends the wait.
	ProviderConcurrency int
	ProviderRPM         int
	// BudgetDefaultCostMicroUSD and BudgetDefaultTokens are the budget of
	// every session with none of its own or of its agent definition: its
	// model calls' cost in micro-US-dollars, their input + output tokens
	// (0 = no default limit). At the limit a turn pauses (turn.paused).
	BudgetDefaultCostMicroUSD int64
	BudgetDefaultTokens       int64
	// MaxConnections, MaxWatchedSessions and MaxInFlight bound the
	// authenticated WebSocket connections (0 = facade.DefaultLimits).
	MaxConnections     int
	MaxWatchedSessions int
	MaxInFlight        int
	// HelloTimeout is how long a WebSocket connection may take to complete
	// system.hello before it is closed (0 = facade.DefaultHelloTimeout, 10 s).
	HelloTimeout time.Duration
	// OperationWindow is how long the receipt of a call made with an
	// operation id is kept: a repeat within it answers the first call's
	// outcome (0 = rpc.DefaultOperationWindow).
	OperationWindow time.Duration
	// MaxUnauthenticated bounds the WebSocket connections that have not
	// completed system.hello; more are refused with 503 before the upgrade
	// (0 = facade.DefaultMaxUnauthenticated, 256).
	MaxUnauthenticated int
	// UnsandboxedCommands runs shell commands without the Landlock
	// sandbox. Without it, where no sandbox can be had the shell tool is
	// inactive and says why (docs/security.md).
	UnsandboxedCommands bool
	// ToolEnv, when not empty, lists the only environment variables
	// (besides PATH, HOME, LANG and the like) that commands get from the
	// daemon; when empty, every variable that looks like a secret is left
	// out.
	ToolEnv []string
	// CommandAllowPorts are TCP ports commands may connect to although
	// they are the database's or the daemon's (refused by default).
	CommandAllowPorts []int
	// OutputMaxAge and OutputMaxMB bound the full command outputs kept
	// for the model (<home>/outputs, up to 64 MiB per command): older files
	// go, then the oldest until the rest fit; applied at start and every
	// OutputPruneEvery (0 = the defaults: 7 days, 1024 MB, 10 minutes;
	// negative = that rule off).
	OutputMaxAge     time.Duration
	OutputMaxMB      int
	OutputPruneEvery time.Duration
	// NoCheckpoints: turns record no checkpoints of their workdirs
	// (docs/workspaces.md); stored ones can still be read and restored.
	NoCheckpoints bool
	// CheckpointMaxFile is the largest file a checkpoint records, in
	// bytes, and CheckpointQuotaMB the most MB one session's checkpoints
	// keep in the store (0 = the defaults: 10 MiB, 1024 MB; negative = no
	// bound).
	CheckpointMaxFile int64
	CheckpointQuotaMB int
	// Retain, RetainLatest and RetainPer are the retention policy of saved
	// sessions (docs/export.md, "Retention"): a session is kept when its
	// last activity is at most Retain old, or when it is among the
	// RetainLatest most recently active of its group (RetainPer: workdir,
	// the default, or agent); the others are deleted with their
	// checkpoints at start and every RetentionEvery (0 = hourly). With
	// neither rule (0, the default) no session is ever deleted.
	Retain         time.Duration
	RetainLatest   int
	RetainPer      string
	RetentionEvery time.Duration
	// CommandNetwork is the network shell commands get: "" (none in plan
	// mode, the host's otherwise), "none" (none in every mode) or "host"
	// (the host's in every mode). See docs/security.md.
	CommandNetwork string
	// Lease is how long a session's lease lasts when its owner stops
	// renewing it (it crashed): another daemon on the same PostgreSQL
	// store takes the session over after that (default 10 s).
	Lease time.Duration
	// TokenFile is a token file every daemon of a cluster shares; "" =
	// <home>/token, which on a PostgreSQL store is replaced by the token
	// the first daemon stored in the database.
	TokenFile string
	// SecretsKeyFile holds the key (32 bytes, base64 or hex) with which the
	// daemons sharing a PostgreSQL store encrypt the provider API keys they
	// keep in it; "" = $TRELLIS_SECRETS_KEY, else none (no API key can be
	// stored; keys from the environment still work).
	SecretsKeyFile string
	// Advertise is the gRPC address other daemons reach this one at
	// (host:port); "" = the bound gRPC address.
	Advertise string
	// WorkspaceRoot is where the managed workdirs of sessions created
	// without a workdir are kept, one per session ("" =
	// <home>/workspaces; docs/workspaces.md).
	WorkspaceRoot string
	// WorkspaceSweepEvery is how often the daemon removes the managed
	// workdirs it keeps for sessions deleted since (by another daemon, or
	// while it was down), besides once at start (0 = every 10 minutes).
	WorkspaceSweepEvery time.Duration
	// Workdir is the default workdir of jobs scheduled without one ("" =
	// none: each run of such a job gets a managed workdir under
	// WorkspaceRoot; docs/workspaces.md); never the daemon's cwd.
	Workdir string
}

// DefaultHome returns $TRELLIS_HOME, else ~/.trellis.
func DefaultHome() string {
	if h := os.Getenv("TRELLIS_HOME"); h != "" {
		return h
	}
	if u, err := os.UserHomeDir(); err == nil {
		return filepath.Join(u, ".trellis")
	}
	return ".trellis"
}

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.Home == "" {
		c.Home = DefaultHome()
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Provider == "" {
		c.Provider = os.Getenv("TRELLIS_PROVIDER")
	}
	if c.Store == "" {
		c.Store = os.Getenv("TRELLIS_STORE")
	}
	if c.SearchProvider == "" {
		c.SearchProvider = os.Getenv("TRELLIS_SEARCH_PROVIDER")
	}
	if c.ApprovalTimeout == 0 {
		c.ApprovalTimeout = 300 * time.Second
	}
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Durability == "" {
		c.Durability = DurabilitySync
	}
	if c.CommitLinger == 0 {
		c.CommitLinger = eventlog.DefaultLinger
	}
	if c.OutputMaxAge == 0 {
		c.OutputMaxAge = tool.DefaultOutputMaxAge
	}
	if c.OutputMaxMB == 0 {
		c.OutputMaxMB = tool.DefaultOutputMaxBytes >> 20
	}
	if c.CheckpointMaxFile == 0 {
		c.CheckpointMaxFile = 10 << 20
	}
	if c.CheckpointQuotaMB == 0 {
		c.CheckpointQuotaMB = 1024
	}
	if c.OutputPruneEvery <= 0 {
		c.OutputPruneEvery = 10 * time.Minute
	}
	if c.WorkspaceSweepEvery <= 0 {
		c.WorkspaceSweepEvery = 10 * time.Minute
	}
	if c.RetainPer == "" {
		c.RetainPer = retention.PerWorkdir
	}
	if c.RetentionEvery <= 0 {
		c.RetentionEvery = time.Hour
	}
	if c.LogMaxSizeMB == 0 {
		c.LogMaxSizeMB = 100
	}
	if c.LogMaxFiles == 0 {
		c.LogMaxFiles = 5
	}
	if abs, err := filepath.Abs(c.Home); err == nil {
		c.Home = abs
	}
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = filepath.Join(c.Home, "workspaces")
	}
	if abs, err := filepath.Abs(c.WorkspaceRoot); err == nil {
		c.WorkspaceRoot = abs
	}
	if c.Workdir != "" {
		if abs, err := filepath.Abs(c.Workdir); err == nil {
			c.Workdir = abs
		}
	}
	return c
}

// Validate reports every problem of c at once, one line each.
func (c Config) Validate() error {
	return joinProblems(c.problems())
}

// problems lists what is wrong with c, each with the keys it is about.
func (c Config) problems() []Problem {
	var problems []Problem
	add := func(err error, keys ...string) { problems = append(problems, Problem{Keys: keys, Err: err}) }
	if c.Home == "" {
		add(errors.New("home: empty"), "home")
	}
	if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		add(fmt.Errorf("host %q: not an IP address", c.Host), "host")
	}
	type named struct {
		key string
		n   int
	}
	ports := []named{{"port", c.Port}, {"grpc-port", c.GRPCPort}, {"gateway-port", c.GatewayPort}}
	for i, p := range ports {
		if p.n < 0 || p.n > 65535 {
			add(fmt.Errorf("%s %d: out of range 0-65535", p.key, p.n), p.key)
		}
		for _, q := range ports[i+1:] {
			if p.n != 0 && p.n == q.n {
				add(fmt.Errorf("%s and %s are both %d", p.key, q.key, p.n), p.key, q.key)
			}
		}
	}
	for _, p := range c.CommandAllowPorts {
		if p < 1 || p > 65535 {
			add(fmt.Errorf("command-allow-ports %d: want port numbers 1-65535", p), "command-allow-ports")
		}
	}
	for _, l := range []named{{"max-connections", c.MaxConnections}, {"max-watched-sessions", c.MaxWatchedSessions}, {"max-in-flight", c.MaxInFlight}, {"max-unauthenticated", c.MaxUnauthenticated},
		{"provider-concurrency", c.ProviderConcurrency}, {"provider-rpm", c.ProviderRPM}} {
		if l.n < 0 {
			add(fmt.Errorf("%s %d: want 0 (the default) or more", l.key, l.n), l.key)
		}
	}
	for _, l := range []struct {
		key string
		n   int64
	}{{"budget-default-cost-micro-usd", c.BudgetDefaultCostMicroUSD}, {"budget-default-tokens", c.BudgetDefaultTokens}} {
		if l.n < 0 {
			add(fmt.Errorf("%s %d: want 0 (no default budget) or more", l.key, l.n), l.key)
		}
	}
	if c.HelloTimeout < 0 || c.HelloTimeout > 0 && c.HelloTimeout < 100*time.Millisecond || c.HelloTimeout > 10*time.Minute {
		add(fmt.Errorf("hello-timeout %v: want 0 (the default, 10s) or 100ms to 10m", c.HelloTimeout), "hello-timeout")
	}
	if c.OperationWindow < 0 || c.OperationWindow > 0 && c.OperationWindow < 10*time.Millisecond || c.OperationWindow > 30*24*time.Hour {
		add(fmt.Errorf("operation-window %v: want 0 (the default, 24h) or 10ms to 720h", c.OperationWindow), "operation-window")
	}
	if c.MergeDeltas > 1<<20 {
		add(fmt.Errorf("merge-deltas %d: want at most 1048576 bytes (a few KiB is plenty)", c.MergeDeltas), "merge-deltas")
	}
	if c.Retain < 0 {
		add(fmt.Errorf("retain %v: want a positive duration such as 720h (30 days), or 0 for no age rule", c.Retain), "retain")
	}
	if c.RetainLatest < 0 {
		add(fmt.Errorf("retain-latest %d: want 1 or more, or 0 for no such rule", c.RetainLatest), "retain-latest")
	}
	if c.RetainPer != "" && c.RetainPer != retention.PerWorkdir && c.RetainPer != retention.PerAgent {
		add(fmt.Errorf("retain-per %q: want workdir or agent", c.RetainPer), "retain-per")
	}
	if c.CommitLinger > time.Second {
		add(fmt.Errorf("commit-linger %v: want at most 1s (a few ms is plenty)", c.CommitLinger), "commit-linger")
	}
	if c.Lease < time.Second {
		add(fmt.Errorf("lease %v: want at least 1s", c.Lease), "lease")
	}
	if c.Advertise != "" {
		if host, _, err := net.SplitHostPort(c.Advertise); err != nil {
			add(fmt.Errorf("advertise %q: want host:port", c.Advertise), "advertise")
		} else if wildcard(host) {
			add(fmt.Errorf("advertise %q: want an address the other daemons can dial (this daemon's DNS name or IP address), not a wildcard", c.Advertise), "advertise")
		}
	} else if c.storeKind() == "postgres" && wildcard(c.Host) {
		// The default, the bound gRPC address, would be [::]:PORT: the
		// other daemons could not forward calls to this one.
		add(fmt.Errorf("advertise: a daemon of a cluster (a postgres store) bound to every interface (host %q) must say where the other daemons reach its gRPC port: --advertise host:port, its DNS name or IP address", c.Host), "advertise", "host")
	}
	if c.ApprovalTimeout < time.Second {
		add(fmt.Errorf("approval-timeout %v: want at least 1s", c.ApprovalTimeout), "approval-timeout")
	}
	if c.LogMaxSizeMB < 1 {
		add(fmt.Errorf("log-max-size %d: want at least 1 (MB)", c.LogMaxSizeMB), "log-max-size")
	}
	if c.LogMaxFiles < 1 {
		add(fmt.Errorf("log-max-files %d: want at least 1", c.LogMaxFiles), "log-max-files")
	}
	switch c.CommandNetwork {
	case tool.NetworkDefault, tool.NetworkNone, tool.NetworkHost:
	default:
		add(fmt.Errorf("command-network %q: want none or host (or nothing: none in plan mode, the host's otherwise)", c.CommandNetwork), "command-network")
	}
	switch c.BrowserProvider {
	case "", browser.ProviderLocal, browser.ProviderNone:
	default:
		add(fmt.Errorf("browser-provider %q: want local or none", c.BrowserProvider), "browser-provider")
	}
	if c.Durability != "" && c.Durability != DurabilitySync && c.Durability != DurabilityBatch {
		add(fmt.Errorf("durability %q: want sync (every commit fsynced) or batch (commits survive a crash of the daemon, a power loss may roll back the last ones)", c.Durability), "durability")
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		add(fmt.Errorf("log-level %q: want debug, info, warn or error", c.LogLevel), "log-level")
	}
	switch c.storeKind() {
	case "":
		shown := c.Store
		if i := strings.Index(shown, "://"); i >= 0 {
			shown = shown[:i+3] + "…" // the rest may hold a password
		}
		add(fmt.Errorf("store %q: want sqlite or a DSN such as postgres://user@host:5432/db", shown), "store")
	case "postgres":
		if err := checkPostgresDSN(c.Store); err != nil {
			add(fmt.Errorf("store: %w", err), "store")
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		add(errors.New("tls-cert and tls-key: give both (the certificate chain and its key) or neither"), "tls-cert", "tls-key")
	}
	if n := countSet(c.ClusterCA, c.ClusterCert, c.ClusterKey); n != 0 && n != 3 {
		add(errors.New("cluster-ca, cluster-cert and cluster-key: give all three (the cluster's CA, this daemon's certificate signed by it, and its key) or none"), "cluster-ca", "cluster-cert", "cluster-key")
	} else if n == 3 && c.TLSCert == "" {
		add(errors.New("cluster-ca, cluster-cert and cluster-key: only with tls-cert and tls-key (the gRPC port then serves TLS, to clients with --tls-cert, to the other daemons with --cluster-cert)"), "cluster-ca", "cluster-cert", "cluster-key", "tls-cert")
	}
	if c.TLSCert == "" && !c.InsecureNoTLS && !loopbackHost(c.Host) {
		add(fmt.Errorf("host %s is not a loopback address, and without TLS the token, API keys and every call would cross the network in clear: "+
			"serve TLS with --tls-cert and --tls-key, or (on a network you trust) start with --insecure-no-tls", c.Host), "host", "insecure-no-tls")
	}
	for _, o := range c.AllowOrigins {
		if !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			add(fmt.Errorf("allow-origin %q: want an origin such as https://app.example.com", o), "allow-origin")
		}
	}
	return problems
}

// countSet is how many of values are not "".
func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// storeKind is "sqlite" or "postgres" for the backend c.Store selects, ""
// for a value naming neither.
// wildcard reports whether host is no address in particular ("", 0.0.0.0,
// ::): what binds every interface, and what no other machine can dial.
func wildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func (c Config) storeKind() string {
	switch {
	case c.Store == "" || c.Store == "sqlite":
		return "sqlite"
	case strings.HasPrefix(c.Store, "postgres://") || strings.HasPrefix(c.Store, "postgresql://"):
		return "postgres"
	}
	return ""
}

// loopbackHost reports whether host is a loopback address (or localhost).
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
