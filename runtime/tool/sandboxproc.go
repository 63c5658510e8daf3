package tool

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sandbox builds the sandbox of a process working in workdir (the shell
// tool's commands, stdio MCP servers): read everywhere but the guard's
// files, write under workdir and a temp dir of its own, and, with the
// host's network (offline false), no connection to the ports DenyPorts
// lists. spec is nil when o.Unsandboxed. cleanup removes the temp dir;
// failure, when not "", says for people why the process must not run.
func (o ShellOptions) sandbox(workdir string, guard *Guard, offline bool) (spec *sandboxSpec, cleanup func(), failure string) {
	cleanup = func() {}
	if o.Unsandboxed {
		return nil, cleanup, ""
	}
	wd, err := realWorkdir(workdir)
	if err != nil {
		return nil, cleanup, err.Error()
	}
	snap := guard.snapshot()
	if err := snap.check(workdir, wd); err != nil {
		return nil, cleanup, fmt.Sprintf("the command was not run: the session's workdir: %v", err)
	}
	spec = &sandboxSpec{workdir: wd, guard: snap}
	for _, p := range snap.paths {
		spec.deny = append(spec.deny, p.path)
	}
	// A temp dir of its own: the system's may hold the home (then only
	// its subdirectories are writable), and nothing is left behind.
	if tmp, err := os.MkdirTemp("", "trellis-cmd-"); err == nil {
		spec.tmp = tmp
		cleanup = func() { os.RemoveAll(tmp) }
	}
	if !offline && o.Network != NetworkHost {
		spec.slirp = slirpPath()
		if spec.slirp != "" && spec.tmp != "" {
			// Its DNS is slirp4netns's: the host's resolver may be
			// on the host's loopback, out of reach.
			_ = os.WriteFile(filepath.Join(spec.tmp, resolvConfName), []byte("nameserver "+slirpDNS+"\n"), 0o644)
		}
	}
	if !offline && o.DenyPorts != nil {
		if spec.ports, err = denyPortsRuleset(o.DenyPorts); err != nil {
			cleanup()
			return nil, func() {}, fmt.Sprintf("the command was not run: its sandbox could not be set up: %v", err)
		}
	}
	return spec, cleanup, ""
}

// LoopbackRefused reports whether accept- and auto-mode commands (and stdio
// MCP servers) get their network through slirp4netns, in a network
// namespace of their own without the host's loopback; false: they use the
// host's network, minus the ports DenyPorts lists.
func LoopbackRefused() bool {
	info := ProbeSandbox()
	return slirpPath() != "" && info.Available() && info.PIDNamespace && info.NetNamespace
}

// ProcessSandbox runs long-lived helper processes of the daemon (stdio MCP
// servers) in the sandbox of the shell tool's commands: the same Landlock
// rules (the Guard's files unreadable, writes only under the process's
// working directory, its own TMPDIR, the system's temp directories and
// Writable), its own user, PID and mount namespaces with a /proc of its own
// where the kernel allows them, and the network a session in accept mode
// gets under ShellOptions.Network (none with NetworkNone; else the host's,
// minus DenyPorts). Its environment is the caller's cmd.Env, as given.
type ProcessSandbox struct {
	ShellOptions
	Guard *Guard
	// Writable are directories the process may write under besides its
	// working directory (a package manager's cache: ~/.npm).
	Writable []string
}

// SandboxedProcess is a process ProcessSandbox.Start started.
type SandboxedProcess struct {
	pid     int
	ns      string
	cleanup func()

	once sync.Once
	done chan struct{} // closed once the process has exited and been reaped
}

// Start starts cmd (cmd.Dir is its working directory; "" is the daemon's)
// sandboxed as p says, in a process group of its own. A nil p starts it
// unsandboxed, in a process group of its own.
func (p *ProcessSandbox) Start(cmd *exec.Cmd) (*SandboxedProcess, error) {
	if p == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return newSandboxed(cmd, exited, func() {}), nil
	}
	o, guard, writable := p.ShellOptions, p.Guard, p.Writable
	offline := o.Network == NetworkNone
	if offline && !ProbeSandbox().NetNamespace {
		return nil, fmt.Errorf("it gets no network (--command-network=none), and that cannot be had here: %s", ProbeSandbox().NetProblem)
	}
	if !o.Unsandboxed {
		if info := ProbeSandbox(); !info.Available() || info.InitProblem != "" {
			return nil, fmt.Errorf("it cannot be sandboxed here (%s%s); start trellisd with --unsandboxed-commands to run it without a sandbox",
				info.Problem, info.InitProblem)
		}
	}
	dir := cmd.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		dir = wd
	}
	spec, cleanup, failure := o.sandbox(dir, guard, offline)
	if failure != "" {
		return nil, errors.New(strings.TrimPrefix(failure, "the command was not run: "))
	}
	if spec != nil {
		for _, d := range writable {
			if d != "" {
				spec.writable = append(spec.writable, d)
			}
		}
		if spec.tmp != "" {
			cmd.Env = append(withoutVar(cmd.Env, "TMPDIR"), "TMPDIR="+spec.tmp)
		}
	}
	exited, err := startCommand(cmd, spec, offline)
	if err != nil {
		cleanup()
		return nil, err
	}
	return newSandboxed(cmd, exited, cleanup), nil
}

func newSandboxed(cmd *exec.Cmd, exited <-chan error, cleanup func()) *SandboxedProcess {
	sp := &SandboxedProcess{pid: cmd.Process.Pid, ns: commandNamespace(cmd.Process.Pid), cleanup: cleanup, done: make(chan struct{})}
	go func() {
		<-exited
		close(sp.done)
	}()
	return sp
}

// Stop gives the process up to wait to exit by itself (its input closed),
// then ends it and every process it started as an interrupted command's
// are ended (its PID namespace, or its process group: SIGTERM, grace,
// SIGKILL), waits until it is reaped and removes its temp dir. It returns
// how many of its other processes got SIGTERM and then SIGKILL.
func (sp *SandboxedProcess) Stop(wait, grace time.Duration) (termed, killed int) {
	sp.once.Do(func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-sp.done:
		case <-t.C:
		}
		// Its other processes live on after it exited (a group's
		// members), or it did not exit: end them all.
		k := killTree(sp.pid, sp.ns, grace)
		<-sp.done
		sp.cleanup()
		termed, killed = k.termed, k.killed
	})
	return termed, killed
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
