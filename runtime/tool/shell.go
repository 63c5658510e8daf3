package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellis-run/trellis/runtime/approval"
)

// shellArgs are the arguments of Shell.
type shellArgs struct {
	Command    string  `json:"command" jsonschema:"minLength=1" jsonschema_description:"The command line, run with bash -c."`
	TimeoutSec float64 `json:"timeoutSec,omitempty" jsonschema:"type=integer,minimum=1,maximum=600" jsonschema_description:"Seconds before the command is killed (default 120)."`
}

// Shell is the `shell` tool: it runs a command with `bash -c` in the
// workdir, in a process group of its own and, where the system allows, a
// PID namespace of its own. Every process of the command is ended on
// timeout, on interrupt, and when the command exits (so no background
// process outlives it; without a namespace, one that left the group with
// setsid does): see killTree.
type Shell struct {
	Args[shellArgs]

	// DefaultTimeout applies when the call gives no timeoutSec.
	DefaultTimeout time.Duration
	// Grace is how long a stopped command's processes have between SIGTERM
	// and SIGKILL.
	Grace time.Duration
	// FlushEvery is how often pending progress is streamed.
	FlushEvery time.Duration
	// Drain bounds the wait for the pipes to close once the group is gone
	// (a process that left the group may hold them open).
	Drain time.Duration
	// ShellOptions: sandbox, environment, process-group records.
	ShellOptions

	limits outputLimits
}

// ShellOptions configures how the shell tool isolates commands.
type ShellOptions struct {
	// Unsandboxed runs commands without the Landlock sandbox. Without it,
	// where the sandbox is unavailable the tool is inactive and says why:
	// commands never run unsandboxed unless the operator asked.
	Unsandboxed bool
	// EnvAllow, when not empty, is the whole environment commands get
	// from the daemon besides the basics (PATH, HOME, USER, LANG, TERM,
	// TZ, TMPDIR, SHELL, LC_*): those names are passed even if they look
	// like secrets. When empty, the daemon's environment is passed minus
	// every variable whose name looks like a secret (see SecretEnvName).
	EnvAllow []string
	// Procs records running process groups for ReapProcTable.
	Procs *ProcTable
	// Network is the network commands get: NetworkDefault (none in plan
	// mode, the host's otherwise), NetworkNone (none in every mode) or
	// NetworkHost (the host's in every mode, plan included).
	Network string
	// DenyPorts, when not nil, are the TCP ports commands with the host's
	// network may not connect to, on any address (the database's, the
	// daemon's own). Needs Landlock ABI 4; below it they are not refused
	// (docs/security.md).
	DenyPorts []int
}

// Network policies of ShellOptions.Network.
const (
	NetworkDefault = ""
	NetworkNone    = "none"
	NetworkHost    = "host"
)

// offline reports whether a command of a session in mode runs without
// network.
func (o ShellOptions) offline(mode string) bool {
	switch o.Network {
	case NetworkNone:
		return true
	case NetworkHost:
		return false
	}
	return mode == "plan"
}

// NewShellWith returns NewShell() configured by opts.
func NewShellWith(opts ShellOptions) *Shell {
	s := NewShell()
	s.ShellOptions = opts
	return s
}

// State implements Stater: the tool is inactive where commands cannot be
// sandboxed and the operator did not opt out.
func (s *Shell) State() State {
	if s.Unsandboxed {
		return State{Active: true}
	}
	if info := ProbeSandbox(); !info.Available() {
		return State{Active: false, Reason: "commands cannot be sandboxed here: " + info.Problem +
			"; start trellisd with --unsandboxed-commands to run them without a sandbox (they can then read everything the daemon's user can)"}
	}
	if info := ProbeSandbox(); info.InitProblem != "" {
		return State{Active: false, Reason: "commands cannot be sandboxed here: " + info.InitProblem +
			"; start trellisd with --unsandboxed-commands to run them without a sandbox (they can then read everything the daemon's user can)"}
	}
	return State{Active: true}
}

// Shell defaults.
const (
	DefaultShellTimeout = 120 * time.Second
	MaxShellTimeoutSec  = 600
)

// NewShell returns the shell tool with its defaults: 120 s timeout, 200 ms
// grace, progress every 50 ms or 8 KiB, 30 KiB of output for the model,
// 64 MiB kept on disk. A zero Shell{} behaves the same.
func NewShell() *Shell {
	return &Shell{
		DefaultTimeout: DefaultShellTimeout,
		Grace:          200 * time.Millisecond,
		FlushEvery:     50 * time.Millisecond,
		Drain:          time.Second,
		limits:         defaultOutputLimits,
	}
}

// withDefaults returns s with every unset setting at its default.
func (s *Shell) withDefaults() *Shell {
	d, c := NewShell(), *s
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = d.DefaultTimeout
	}
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = d.FlushEvery
	}
	if c.Drain <= 0 {
		c.Drain = d.Drain
	}
	if c.limits == (outputLimits{}) {
		c.limits = d.limits
	}
	return &c
}

// Name implements Tool.
func (*Shell) Name() string { return "shell" }

// Tag implements Tool.
func (*Shell) Tag() approval.Tag { return approval.TagExec }

// Description implements Tool.
func (*Shell) Description() string {
	return "Run a shell command with bash -c in the session's working directory. " +
		"Output (stdout and stderr) streams as it comes; the model gets at most 30 KiB " +
		"(head and tail) with the path of a file holding the rest. The command is killed " +
		"after timeoutSec (default 120, at most 600) together with every process it started, " +
		"and background processes it starts are killed when it exits."
}

// Run implements Tool.
func (s *Shell) Run(ctx context.Context, call Call) (Result, error) {
	s = s.withDefaults()
	var args shellArgs
	if err := decodeArgs("shell", call, &args); err != nil {
		return Result{}, err
	}
	timeout := s.DefaultTimeout
	if args.TimeoutSec > 0 {
		timeout = time.Duration(min(args.TimeoutSec, MaxShellTimeoutSec)) * time.Second
	}
	if ctx.Err() != nil {
		return Failed("the command was not run: the call was interrupted"), nil
	}
	if fi, err := os.Stat(call.Workdir); err != nil || !fi.IsDir() {
		return Failed("the session's workdir %s is not a directory the command can run in", call.Workdir), nil
	}
	offline := s.offline(call.Mode)
	if offline && !ProbeSandbox().NetNamespace {
		return Failed("the command was not run: commands of a session in %s mode get no network, and it cannot be taken "+
			"from them here (%s); start trellisd with --command-network=host to let them use the host's network",
			modeName(call.Mode), ProbeSandbox().NetProblem), nil
	}
	spec, cleanup, failure := s.sandbox(call.Workdir, call.Guard, offline)
	defer cleanup()
	if failure != "" {
		return Failed("%s", failure), nil
	}
	if spec != nil && call.OutputDir != "" && os.MkdirAll(call.OutputDir, 0o700) == nil {
		spec.readOnly = append(spec.readOnly, call.OutputDir) // the kept full outputs
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("shell: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return Result{}, fmt.Errorf("shell: pipe: %w", err)
	}
	cmd := exec.Command("bash", "-c", args.Command)
	cmd.Dir = call.Workdir
	cmd.Stdout, cmd.Stderr = outW, errW // stdin stays /dev/null
	cmd.Env = append(CommandEnv(os.Environ(), s.EnvAllow), "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0")
	if spec != nil && spec.tmp != "" {
		cmd.Env = append(cmd.Env, "TMPDIR="+spec.tmp)
	}
	exited, err := startCommand(cmd, spec, offline)
	if err != nil {
		closeAll(outR, outW, errR, errW)
		var setup *SandboxSetupError
		if spec != nil && (cmd.Process == nil || errors.As(err, &setup)) {
			return Failed("the command was not run: its sandbox could not be set up: %v", err), nil
		}
		return Result{}, fmt.Errorf("shell: start bash: %w", err)
	}
	closeAll(outW, errW) // the child holds its own copies
	pgid := cmd.Process.Pid
	ns := commandNamespace(pgid)
	s.Procs.add(pgid)
	defer s.Procs.remove(pgid)

	capt := newCapture(s.limits, call.OutputDir, outputFileName("shell", call.ID), call.Progress)
	var readers sync.WaitGroup
	for _, p := range []struct {
		r      *os.File
		stream string
	}{{outR, "stdout"}, {errR, "stderr"}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			pump(p.r, p.stream, capt)
		}()
	}
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(s.FlushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				capt.Flush()
			case <-stopFlush:
				return
			}
		}
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()

	var stopped string // why we killed it: "", "timeout", "interrupted"
	var waitErr error
	waited := false
	select {
	case waitErr = <-exited:
		waited = true
	case <-timer.C:
		stopped = "timeout"
	case <-ctx.Done():
		stopped = "interrupted"
	}
	// Whatever happened, nothing of the command survives the call.
	kill := killTree(pgid, ns, s.Grace)
	if !waited {
		waitErr = <-exited
	}

	// The group is gone, so the pipes close unless a process that left the
	// group still holds them: give the readers a bounded time, then cut.
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.Drain):
		closeAll(outR, errR)
		<-drained
	}
	closeAll(outR, errR)
	close(stopFlush)
	<-flushed
	text, full := capt.finish()

	res := Result{FullOutput: full}
	var status string
	switch stopped {
	case "timeout":
		res.Error = fmt.Sprintf("the command timed out after %s; %s", timeout, kill.describe(s.Grace))
		status = "[timed out after " + timeout.String() + "]"
	case "interrupted":
		res.Error = "the command was interrupted; " + kill.describe(s.Grace)
		status = "[interrupted]"
	default:
		code, desc := exitStatus(cmd.ProcessState, waitErr)
		res.OK = code == 0
		if !res.OK {
			res.Error = "the command " + desc
		}
		status = fmt.Sprintf("[exit code %d]", code)
	}
	if text == "" {
		text = "(no output)"
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	res.Output = text + status
	return res, nil
}

// modeName names a session mode for messages ("" outside a session).
func modeName(mode string) string {
	if mode == "" {
		return "any"
	}
	return mode
}

// pump copies r into the capture until EOF or close.
func pump(r io.Reader, stream string, c *capture) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.Write(stream, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// exitStatus returns the exit code and a description of how the process ended.
func exitStatus(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		return -1, fmt.Sprintf("could not be waited for: %v", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), "was killed by signal " + ws.Signal().String()
	}
	code := ps.ExitCode()
	return code, fmt.Sprintf("exited with code %d", code)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// outputFileName names the file keeping a call's full output.
func outputFileName(tool, callID string) string {
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, callID)
	if id == "" {
		id = fmt.Sprintf("%d", time.Now().UnixNano())
	}
	return tool + "-" + id + ".log"
}

// baseEnv are the variables a command always gets when set.
var baseEnv = map[string]bool{"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "LANG": true,
	"LANGUAGE": true, "TERM": true, "TZ": true, "TMPDIR": true, "SHELL": true}

// secretEnvParts are parts of environment variable names that hold
// credentials (OPENAI_API_KEY, GITHUB_TOKEN, PGPASSWORD, GH_PAT,
// DOCKER_AUTH_CONFIG, SLACK_WEBHOOK_URL: a webhook URL is its own
// credential, …).
var secretEnvParts = []string{"API_KEY", "APIKEY", "ACCESS_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD",
	"PASSPHRASE", "CREDENTIAL", "PRIVATE_KEY", "COOKIE", "SESSION_KEY", "DATABASE_URL", "_DSN", "CONN_STR", "CONNECTION_STRING",
	"_AUTH_", "WEBHOOK"}

// secretEnvPrefixes are prefixes of credential-bearing families.
var secretEnvPrefixes = []string{"TRELLIS_", "AWS_", "AZURE_", "GCP_", "GOOGLE_APPLICATION", "DIGITALOCEAN_", "HCLOUD_",
	"VAULT_", "AUTH_", "SSH_AUTH_SOCK", "GPG_AGENT"}

// secretEnvSuffixes are name endings that mark a secret (GH_PAT, SMTP_PASS,
// STRIPE_KEY, STRIPE_SK, MYSQL_PWD, SENTRY_DSN).
var secretEnvSuffixes = []string{"_AUTH", "_PAT", "_PASS", "_PWD", "_KEY", "_KEYS", "_DSN", "_CREDS", "_SK"}

// SecretEnvName reports whether an environment variable of this name
// probably holds a secret; such variables never reach commands unless
// listed in ShellOptions.EnvAllow.
func SecretEnvName(name string) bool {
	upper := strings.ToUpper(name)
	for _, m := range secretEnvParts {
		if strings.Contains(upper, m) {
			return true
		}
	}
	for _, p := range secretEnvPrefixes {
		if strings.HasPrefix(upper, p) {
			return true
		}
	}
	for _, sfx := range secretEnvSuffixes {
		if strings.HasSuffix(upper, sfx) {
			return true
		}
	}
	return upper == "PAT" || upper == "KEY" || upper == "AUTH"
}

// secretEnvValue reports whether a value carries credentials whatever its
// name: a URL with a password (postgres://u:pw@host, https://u:tok@host).
func secretEnvValue(v string) bool {
	i := strings.Index(v, "://")
	if i < 0 {
		return false
	}
	rest := v[i+3:]
	at := strings.IndexByte(rest, '@')
	if at < 0 {
		return false
	}
	if slash := strings.IndexByte(rest, '/'); slash >= 0 && slash < at {
		return false
	}
	return strings.Contains(rest[:at], ":")
}

// CommandEnv is the environment a command gets from env (the daemon's):
// with allow empty, env minus every secret-looking variable; else only the
// basics and the names in allow.
func CommandEnv(env []string, allow []string) []string {
	allowed := map[string]bool{}
	for _, a := range allow {
		allowed[a] = true
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case len(allow) > 0:
			if allowed[name] || (baseEnv[name] || strings.HasPrefix(name, "LC_")) && !SecretEnvName(name) {
				out = append(out, kv)
			}
		case !SecretEnvName(name) && !secretEnvValue(value):
			out = append(out, kv)
		}
	}
	return out
}
