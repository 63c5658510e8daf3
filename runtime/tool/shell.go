package tool

import (
	"context"
	"encoding/json"
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

// Shell is the `shell` tool: it runs a command with `bash -c` in the
// workdir, in a process group of its own that is killed on timeout, on
// interrupt, and when the command exits (so no background process outlives
// it unless it leaves the group, e.g. with setsid).
type Shell struct {
	// DefaultTimeout applies when the call gives no timeoutSec.
	DefaultTimeout time.Duration
	// Grace is how long the group has between SIGTERM and SIGKILL.
	Grace time.Duration
	// FlushEvery is how often pending progress is streamed.
	FlushEvery time.Duration
	// Drain bounds the wait for the pipes to close once the group is gone
	// (a process that left the group may hold them open).
	Drain time.Duration

	limits outputLimits
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
		"after timeoutSec (default 120, at most 600), and background processes it starts " +
		"are killed when it exits."
}

// InputSchema implements Tool.
func (*Shell) InputSchema() json.RawMessage {
	return json.RawMessage(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "The command line, run with bash -c."},
    "timeoutSec": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds before the command is killed (default 120)."}
  },
  "required": ["command"],
  "additionalProperties": false
}`)
}

// Run implements Tool.
func (s *Shell) Run(ctx context.Context, call Call) (Result, error) {
	s = s.withDefaults()
	var args struct {
		Command    string  `json:"command"`
		TimeoutSec float64 `json:"timeoutSec"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return Result{}, fmt.Errorf("shell: decode validated args: %w", err)
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
	cmd.Env = append(commandEnv(os.Environ()), "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll(outR, outW, errR, errW)
		return Result{}, fmt.Errorf("shell: start bash: %w", err)
	}
	closeAll(outW, errW) // the child holds its own copies
	pgid := cmd.Process.Pid

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

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()

	var stopped string // why we killed it: "", "timeout", "interrupted"
	select {
	case err := <-exited:
		exited <- err // put back: read below, once the group is gone
	case <-timer.C:
		stopped = "timeout"
	case <-ctx.Done():
		stopped = "interrupted"
	}
	// Whatever happened, nothing of the group survives the call.
	s.killGroup(pgid)
	waitErr := <-exited

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
		res.Error = fmt.Sprintf("the command timed out after %s; its process group was killed", timeout)
		status = "[timed out after " + timeout.String() + "]"
	case "interrupted":
		res.Error = "the command was interrupted; its process group was killed"
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

// killGroup ends every process of the group: SIGTERM, then SIGKILL to
// whatever still runs after the grace period, then a bounded wait for the
// kill to land. The leader is reaped by its own Wait meanwhile.
func (s *Shell) killGroup(pgid int) {
	if !groupAlive(pgid) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if waitGroupGone(pgid, s.Grace) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	waitGroupGone(pgid, killWait)
}

// killWait bounds the wait for SIGKILL to take effect.
const killWait = 500 * time.Millisecond

// waitGroupGone polls until no process of the group runs, for at most d.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for groupAlive(pgid) {
		select {
		case <-poll.C:
		case <-deadline.C:
			return !groupAlive(pgid)
		}
	}
	return true
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

// secretEnvMarkers are parts of environment variable names that hold
// credentials (OPENAI_API_KEY, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, …).
var secretEnvMarkers = []string{"API_KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY"}

// commandEnv is the daemon's environment without its secrets: a command the
// model runs must not be able to print the provider keys the daemon holds.
func commandEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		secret := strings.HasPrefix(upper, "TRELLIS_")
		for _, m := range secretEnvMarkers {
			if strings.Contains(upper, m) {
				secret = true
				break
			}
		}
		if !secret {
			out = append(out, kv)
		}
	}
	return out
}
