package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-run/trellis/internal/duration"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/tool/browser"
)

// ErrVersion is what ParseFlags returns for --version: the caller prints
// the version (version.Server) and exits 0.
var ErrVersion = errors.New("the version was asked for")

// ParseFlags parses trellisd's command line into a Config. name is how the
// command is called ("trellisd"). It prints the usage on stderr for
// --help (and returns flag.ErrHelp), returns ErrVersion for --version,
// and prints nothing for a bad command line: the error it returns is one
// line naming the bad flag and pointing at name --help. With --config FILE
// the flags not given on the command line (nor by their environment
// variable) take their values from FILE; every problem of the file is
// returned at once, one line each.
func ParseFlags(name string, args []string) (Config, error) {
	cfg, src, problems, err := load(name, args, os.Getenv)
	if err != nil {
		return cfg, err
	}
	if src.path != "" {
		// Checked here too (Start checks again) so that each problem
		// names the line of the file that gave the value.
		problems = append(problems, src.locate(cfg.WithDefaults().problems())...)
	}
	return cfg, joinProblems(sortProblems(problems))
}

// ConfigSubcommand reports whether a daemon command line asks for
// "config check" or "config print" (after flags or not: "trellis --home H
// daemon config check"), and returns the arguments for ConfigCommand: what
// follows "config", then the flags given before it.
func ConfigSubcommand(args []string) ([]string, bool) {
	fs := newCommandLine("").fs
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.Arg(0) != "config" {
		return nil, false
	}
	before := args[:len(args)-fs.NArg()]
	return append(slices.Clone(fs.Args()[1:]), before...), true
}

// commandLine is trellisd's flag set, bound to cfg, with the flags that
// need work after parsing.
type commandLine struct {
	fs                           *flag.FlagSet
	cfg                          Config
	origins, toolEnv, allowPorts string
	configFile                   string
	showVersion                  bool
	checkpoints                  bool
}

// newCommandLine defines the flags; name is how the command is called.
func newCommandLine(name string) *commandLine {
	cl := &commandLine{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs, cfg := cl.fs, &cl.cfg
	fs.BoolVar(&cl.showVersion, "version", false, "print the version and exit")
	fs.StringVar(&cl.configFile, "config", "", "TOML configuration file: a key per flag, named like it; flags and environment variables beat it (docs/operations.md)")
	fs.StringVar(&cfg.Home, "home", "", "home directory (default $TRELLIS_HOME, else ~/.trellis)")
	fs.StringVar(&cfg.Host, "host", "127.0.0.1", "address to bind; keep loopback unless you know why")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate chain: the WebSocket/REST and gRPC ports serve TLS only (reloaded when the file changes)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&cfg.ClusterCA, "cluster-ca", "", "PEM CAs of the cluster's daemon certificates: the daemons on one PostgreSQL store authenticate each other with mutual TLS (with --cluster-cert, --cluster-key and --tls-cert; reloaded when the file changes)")
	fs.StringVar(&cfg.ClusterCert, "cluster-cert", "", "PEM certificate of this daemon, signed by --cluster-ca for server and client authentication (reloaded when the file changes)")
	fs.StringVar(&cfg.ClusterKey, "cluster-key", "", "PEM private key of --cluster-cert")
	fs.BoolVar(&cfg.InsecureNoTLS, "insecure-no-tls", false, "let a non-loopback --host serve without TLS (tokens and keys then cross the network in clear)")
	fs.IntVar(&cfg.Port, "port", 0, "HTTP/WebSocket port (0 = any free port)")
	fs.IntVar(&cfg.GRPCPort, "grpc-port", 0, "gRPC port (0 = any free port)")
	fs.IntVar(&cfg.GatewayPort, "gateway-port", 0, "loopback port of the gateway webhook receiver (0 = any free port)")
	fs.StringVar(&cfg.Provider, "provider", "", "model provider, e.g. fake:/path/script.json (default $TRELLIS_PROVIDER, else detected)")
	fs.IntVar(&cfg.ProviderConcurrency, "provider-concurrency", 0, "most requests in flight at once to each real model provider (openai, anthropic), all sessions together; more wait their turn (0 = no bound)")
	fs.IntVar(&cfg.ProviderRPM, "provider-rpm", 0, "most requests started a minute to each real model provider, all sessions together, spread evenly over the minute (0 = no bound)")
	fs.Int64Var(&cfg.BudgetDefaultCostMicroUSD, "budget-default-cost-micro-usd", 0, "budget of every session without its own or its agent's: the cost of its model calls in millionths of a US dollar; at it the turn pauses until session.setBudget raises it (0 = none)")
	fs.Int64Var(&cfg.BudgetDefaultTokens, "budget-default-tokens", 0, "budget of every session without its own or its agent's: the input + output tokens of its model calls; at it the turn pauses until session.setBudget raises it (0 = none)")
	fs.StringVar(&cfg.Store, "store", "", "sqlite (default: a file in the home directory) or a postgres:// DSN several daemons can share (default $TRELLIS_STORE, which keeps it off the command line); keep the password in PGPASSWORD or ~/.pgpass")
	fs.StringVar(&cl.origins, "allow-origin", "", "comma-separated web origins allowed to open a WebSocket")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	durationVar(fs, &cfg.ApprovalTimeout, "approval-timeout", 300*time.Second, "how long an approval request waits for an answer")
	durationVar(fs, &cfg.CommitLinger, "commit-linger", 2*time.Millisecond, "how long streaming chunks (deltas, tool output) wait to share a commit, when another came within it before them (a lonely chunk commits at once); 0 commits each at once")
	fs.StringVar(&cfg.Durability, "durability", DurabilitySync, "how a commit reaches the disk: sync (every commit fsynced) or batch (commits survive a crash of the daemon; a power loss may roll back the last ones: SQLite synchronous=NORMAL, PostgreSQL synchronous_commit=off)")
	fs.IntVar(&cfg.MergeDeltas, "merge-deltas", eventlog.DefaultMergeMax, "most bytes of answer text that consecutive chunks merge into, as one message.delta, while they wait for a commit; 0 = every chunk its own event")
	fs.IntVar(&cfg.MaxConnections, "max-connections", 0, "most authenticated WebSocket connections at once (0 = 20000)")
	fs.IntVar(&cfg.MaxWatchedSessions, "max-watched-sessions", 0, "most sessions one connection receives events for (0 = 4096)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", 0, "most requests one connection has running (0 = 1024)")
	durationVar(fs, &cfg.HelloTimeout, "hello-timeout", 10*time.Second, "how long a new WebSocket connection may take to send system.hello before it is closed")
	durationVar(fs, &cfg.OperationWindow, "operation-window", 24*time.Hour, "how long the outcome of a call made with an operation id is kept: a retry within it answers that outcome, one after it acts again")
	fs.IntVar(&cfg.MaxUnauthenticated, "max-unauthenticated", 256, "most WebSocket connections waiting for system.hello at once; more are refused with 503")
	fs.StringVar(&cfg.Prices, "prices", "", "TOML price file whose models' prices (US dollars per million tokens) replace the built-in table's; read again when it changes (docs/operations.md)")
	fs.StringVar(&cfg.MCPConfig, "mcp-config", "", `an mcpServers JSON file ({"mcpServers": {...}}, as Claude Desktop writes it) whose servers add tools; <home>/mcp.json is always read`)
	fs.StringVar(&cfg.SearchProvider, "search-provider", "", "web_search provider: searxng=URL (self-hosted, json format on) or brave (key in BRAVE_API_KEY or <home>/secrets/brave.json); default $TRELLIS_SEARCH_PROVIDER")
	fs.BoolVar(&cfg.WebFetchAllowPrivate, "web-fetch-allow-private", false, "let web_fetch and the browser tool's pages reach loopback, private and link-local addresses")
	fs.StringVar(&cfg.BrowserProvider, "browser-provider", browser.ProviderLocal, "the browser tool's provider for sessions that choose none: local (headless Chromium on this machine) or none")
	fs.StringVar(&cfg.BrowserChromium, "browser-chromium", "", "the browser tool's Chromium, a path or a name on PATH (default: the first of chromium, chromium-browser, google-chrome, google-chrome-stable on PATH)")
	fs.BoolVar(&cfg.LogToStderr, "log-stderr", false, "also write logs to stderr")
	fs.IntVar(&cfg.LogMaxSizeMB, "log-max-size", 100, "rotate the log file when it reaches this many MB")
	fs.IntVar(&cfg.LogMaxFiles, "log-max-files", 5, "how many rotated log files to keep")
	fs.BoolVar(&cfg.UnsandboxedCommands, "unsandboxed-commands", false, "run shell commands without the Landlock sandbox (only where it is unavailable and you accept the risk)")
	fs.StringVar(&cl.toolEnv, "tool-env", "", "comma-separated names: the only environment variables commands get (besides PATH, HOME, LANG...); default: all but secret-looking ones")
	fs.StringVar(&cl.allowPorts, "command-allow-ports", "", "comma-separated TCP ports commands may connect to although they are the database's or the daemon's own (refused by default, on every address)")
	durationVar(fs, &cfg.OutputMaxAge, "output-max-age", 7*24*time.Hour, "delete kept full command outputs (<home>/outputs) older than this; 0 = never by age")
	fs.IntVar(&cfg.OutputMaxMB, "output-max-size", 1024, "most MB of kept full command outputs; the oldest go first; 0 = no size bound")
	fs.StringVar(&cfg.CommandNetwork, "command-network", "", "network of shell commands: none (in every mode) or host (in every mode, plan included); default none in plan mode; in accept and auto, outbound network without the host's loopback (slirp4netns), or the host's where slirp4netns is missing")
	durationVar(fs, &cfg.Lease, "lease", 10*time.Second, "with a postgres:// store: how long a session, or a model request's provider slot (--provider-concurrency), stays with a daemon that stopped renewing it before another daemon takes it over")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "token file shared by every daemon of a cluster (default <home>/token; with a postgres:// store, the token kept in the database)")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "with a postgres:// store: file holding the key (32 bytes, base64 or hex) every daemon shares to encrypt provider API keys in the database (default $TRELLIS_SECRETS_KEY)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "host:port other daemons reach this daemon's gRPC server at (default the bound gRPC address; required for a postgres store on a wildcard --host)")
	fs.BoolVar(&cl.checkpoints, "checkpoints", true, "record each session's workdir in the store before a tool changes it and at the end of such a turn, for checkpoint.list/diff/restore (docs/workspaces.md)")
	fs.Int64Var(&cfg.CheckpointMaxFile, "checkpoint-max-file", 10<<20, "largest file a checkpoint records, in bytes; larger ones are listed as skipped; 0 = no bound")
	fs.IntVar(&cfg.CheckpointQuotaMB, "checkpoint-quota", 1024, "most MB one session's checkpoints keep in the store; a checkpoint past it is not recorded (an error event says so); 0 = no bound")
	durationVar(fs, &cfg.Retain, "retain", 0, "keep saved sessions active within this long, such as 30d (days), 2w (weeks) or 720h; the sessions no retention rule keeps are deleted with their checkpoints, hourly (docs/export.md); 0 = no age rule")
	fs.IntVar(&cfg.RetainLatest, "retain-latest", 0, "keep the N most recently active saved sessions of each workdir (or agent: --retain-per) whatever their age; 0 = no such rule. With neither --retain nor --retain-latest no session is deleted")
	fs.StringVar(&cfg.RetainPer, "retain-per", retention.PerWorkdir, "how --retain-latest groups sessions: workdir (managed workspaces form one group) or agent")
	fs.StringVar(&cfg.WorkspaceRoot, "workspace-root", "", "where the managed workdirs of sessions created without a workdir are kept, one per session, rebuilt from their checkpoints on the daemon running them (default <home>/workspaces; docs/workspaces.md)")
	fs.StringVar(&cfg.Workdir, "workdir", "", "default workdir of jobs scheduled without one (default: none, each run of such a job gets a managed workdir under --workspace-root; docs/workspaces.md)")
	return cl
}

// load parses args and the configuration file they name into a Config
// (defaults not yet applied). err is flag.ErrHelp, ErrVersion or a bad
// command line; problems are those of the configuration file and of the
// flags' values, each with its key (and line in the file).
func load(name string, args []string, getenv func(string) string) (cfg Config, src fileSource, problems []Problem, err error) {
	cl := newCommandLine(name)
	fs := cl.fs
	// The flag package prints the error and the whole usage for any bad
	// flag; only --help gets the usage.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fmt.Fprintf(os.Stderr, "Usage of %s:\n", name)
		fs.PrintDefaults()
		return cfg, src, nil, err
	} else if err != nil {
		return cfg, src, nil, fmt.Errorf("%w (%s --help lists the flags)", err, name)
	}
	if cl.showVersion {
		return cfg, src, nil, ErrVersion
	}
	if fs.NArg() > 0 {
		return cfg, src, nil, fmt.Errorf("unexpected argument %q: the daemon takes flags only (%s --help lists them)", fs.Arg(0), name)
	}
	if cl.configFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		src, problems = applyFile(fs, cl.configFile, set, getenv)
	}
	cfg = cl.cfg
	if cfg.CommitLinger == 0 {
		cfg.CommitLinger = -1 // 0 on the command line means off, not the default
	}
	if cfg.MergeDeltas == 0 {
		cfg.MergeDeltas = -1 // likewise
	}
	if cfg.OutputMaxAge == 0 {
		cfg.OutputMaxAge = -1 // likewise
	}
	if cfg.OutputMaxMB == 0 {
		cfg.OutputMaxMB = -1 // likewise
	}
	if cfg.CheckpointMaxFile == 0 {
		cfg.CheckpointMaxFile = -1 // likewise
	}
	if cfg.CheckpointQuotaMB == 0 {
		cfg.CheckpointQuotaMB = -1 // likewise
	}
	cfg.NoCheckpoints = !cl.checkpoints
	for _, o := range strings.Split(cl.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.AllowOrigins = append(cfg.AllowOrigins, o)
		}
	}
	for _, p := range strings.Split(cl.allowPorts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				problems = append(problems, Problem{Keys: []string{"command-allow-ports"}, Err: fmt.Errorf("command-allow-ports %q: want port numbers 1-65535, comma-separated", p)})
				continue
			}
			cfg.CommandAllowPorts = append(cfg.CommandAllowPorts, n)
		}
	}
	for _, n := range strings.Split(cl.toolEnv, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.ToolEnv = append(cfg.ToolEnv, n)
		}
	}
	return cfg, src, src.locate(problems), nil
}

// durationVar is fs.DurationVar for the durations duration.Parse reads:
// Go's ("90s", "720h") and days and weeks ("30d", "2w").
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(duration.Value{D: p}, name, usage)
}
