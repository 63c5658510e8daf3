package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
)

func TestShell(t *testing.T) {
	runToolCases(t, "shell", []toolCase{
		{name: "stdout, stderr and exit code", args: `{"command":"echo out; echo err >&2"}`, ok: true,
			check: func(t *testing.T, _ fixture, r Result) {
				// Two pipes: the order between them is not guaranteed.
				if r.Output != "out\nerr\n[exit code 0]" && r.Output != "err\nout\n[exit code 0]" {
					t.Errorf("output %q", r.Output)
				}
			}},
		{name: "runs in the workdir", args: `{"command":"cat a.txt"}`, ok: true, want: []string{"hello\nworld\n[exit code 0]"}},
		{name: "no output", args: `{"command":"true"}`, ok: true, want: []string{"(no output)\n[exit code 0]"}},
		{name: "non-zero exit is a failed result", args: `{"command":"echo before; exit 3"}`,
			want: []string{"the command exited with code 3"},
			check: func(t *testing.T, _ fixture, r Result) {
				if r.Output != "before\n[exit code 3]" {
					t.Errorf("output %q", r.Output)
				}
			}},
		{name: "stdin is empty", args: `{"command":"cat"}`, ok: true, want: []string{"(no output)"}},
		{name: "timeout", args: `{"command":"echo started; sleep 30","timeoutSec":1}`,
			want: []string{"timed out after 1s; ", "none"},
			check: func(t *testing.T, _ fixture, r Result) {
				if !strings.HasPrefix(r.Output, "started\n") || !strings.HasSuffix(r.Output, "[timed out after 1s]") {
					t.Errorf("output %q", r.Output)
				}
			}},
		{name: "no command", args: `{}`, code: errcode.InvalidParams, want: []string{"command"}},
		{name: "empty command", args: `{"command":""}`, code: errcode.InvalidParams, want: []string{"command"}},
		{name: "timeout too long", args: `{"command":"true","timeoutSec":601}`, code: errcode.InvalidParams, want: []string{"timeoutSec"}},
		{name: "timeout not an integer", args: `{"command":"true","timeoutSec":1.5}`, code: errcode.InvalidParams, want: []string{"timeoutSec"}},
	})
}

// progressLog records progress chunks and lets a test wait for one.
type progressLog struct {
	mu     sync.Mutex
	chunks []chunk
	wake   chan struct{}
}

func newProgressLog() *progressLog { return &progressLog{wake: make(chan struct{}, 1)} }

func (p *progressLog) add(stream, text string, truncated bool) {
	p.mu.Lock()
	p.chunks = append(p.chunks, chunk{stream, text, truncated})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// text returns everything streamed on stream so far.
func (p *progressLog) text(stream string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, c := range p.chunks {
		if c.stream == stream {
			b.WriteString(c.text)
		}
	}
	return b.String()
}

// waitFor waits until the stream's text satisfies ok, failing after 10 s.
func (p *progressLog) waitFor(t *testing.T, stream string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := p.text(stream); ok(s) {
			return s
		}
		select {
		case <-p.wake:
		case <-deadline:
			t.Fatalf("timed out waiting for %s progress; have %q", stream, p.text(stream))
		}
	}
}

type runOutcome struct {
	res Result
	err error
}

// startShell runs command through the registry in the background.
func startShell(t *testing.T, ctx context.Context, command string, log *progressLog, outDir string) <-chan runOutcome {
	t.Helper()
	return startShellIn(t, ctx, t.TempDir(), command, log, outDir)
}

// startShellIn is startShell in workdir wd.
func startShellIn(t *testing.T, ctx context.Context, wd, command string, log *progressLog, outDir string) <-chan runOutcome {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"command": command})
	r := newTestRegistry(t)
	done := make(chan runOutcome, 1)
	go func() {
		res, err := r.Run(ctx, "shell", Call{ID: "t-1/c:1", Args: args, Workdir: wd, OutputDir: outDir, Progress: log.add})
		done <- runOutcome{res, err}
	}()
	return done
}

// liveMembers lists the processes of group pgid that are not zombies, as
// ps sees them (independent of the tool's own /proc reading).
func liveMembers(t *testing.T, pgid int) []string {
	t.Helper()
	out, err := exec.Command("ps", "-eo", "pid=,pgid=,stat=,args=").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	var live []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == strconv.Itoa(pgid) && !strings.HasPrefix(f[2], "Z") {
			live = append(live, line)
		}
	}
	return live
}

// assertGroupGone checks that no process of the group runs, then that the
// pgid itself is released: kill(-pgid, 0) fails with ESRCH. The second
// step waits (up to 5 s) for init to reap the killed orphans, which this
// machine's init does only every second or two.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if live := liveMembers(t, pgid); len(live) > 0 {
		t.Errorf("process group %d still runs: %q", pgid, live)
	}
	start := time.Now()
	for !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		if time.Since(start) > 5*time.Second {
			t.Errorf("kill(-%d, 0) still finds the group after 5 s", pgid)
			return
		}
		time.Sleep(10 * time.Millisecond) // bounded poll on init's reaping
	}
	t.Logf("pgid %d released (kill -> ESRCH) %v after the check", pgid, time.Since(start).Round(time.Millisecond))
}

// commandPGID waits for the running command of workdir wd (the leader of
// its process group) and returns its pid as the host sees it: a command
// cannot tell it (it is pid 1 of its own PID namespace, with a /proc of
// its own).
func commandPGID(t *testing.T, wd string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var found int
		eachProc(func(pid, pgrp int, state byte) {
			if pid == pgrp && state != 'Z' {
				if cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); cwd == wd {
					found = pid
				}
			}
		})
		if found != 0 {
			return found
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no command running in %s", wd)
	return 0
}

func TestShellStreamsWhileRunning(t *testing.T) {
	log := newProgressLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startShell(t, ctx, "for i in $(seq 1 200); do echo line $i; done; echo warn >&2; sleep 30", log, "")
	// Both streams arrive while the command is still running.
	log.waitFor(t, "stdout", func(s string) bool { return strings.Contains(s, "line 200\n") })
	log.waitFor(t, "stderr", func(s string) bool { return s == "warn\n" })
	cancel()
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if got := log.text("stdout"); got != want.String() {
		t.Errorf("streamed stdout %q", got)
	}
	log.mu.Lock()
	n := len(log.chunks)
	log.mu.Unlock()
	if n >= 100 {
		t.Errorf("%d progress chunks for 201 small writes: not coalesced", n)
	}
	// stdout and stderr are separate pipes: their order in Output may vary.
	if out.res.OK || !strings.HasPrefix(out.res.Error, "the command was interrupted; ") || !strings.HasSuffix(out.res.Error, "left") ||
		!strings.Contains(out.res.Output, "warn\n") || !strings.HasSuffix(out.res.Output, "\n[interrupted]") {
		t.Errorf("result %+v", out.res)
	}
}

func TestShellCancelKillsProcessGroup(t *testing.T) {
	log := newProgressLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A child that ignores SIGTERM needs the SIGKILL after the grace period;
	// a grandchild in the background must die with the group too.
	wd := t.TempDir()
	// The processes never end by themselves: Run returns only by killing them.
	done := startShellIn(t, ctx, wd, `echo up; (trap "" TERM; exec sleep infinity) & sleep infinity & sleep infinity`, log, "")
	log.waitFor(t, "stdout", func(s string) bool { return strings.Contains(s, "\n") })
	pgid := commandPGID(t, wd)
	if len(liveMembers(t, pgid)) < 3 {
		t.Fatalf("process group %d is not running: %q", pgid, liveMembers(t, pgid))
	}
	cancel()
	out := <-done
	assertGroupGone(t, pgid)
	if out.err != nil || out.res.OK || !strings.Contains(out.res.Error, "interrupted") {
		t.Errorf("result %+v, %v", out.res, out.err)
	}
}

// TestShellStopsTheWholeTree: an interrupt or a timeout ends every process
// of a command — the one running, the shell that would run the next step,
// background jobs, subshells and setsid ones (these only where commands
// get a PID namespace of their own) — so `sleep 3; touch marker` never
// writes the marker: once Run has returned, no process of the command is
// left (none runs in its workdir) and there is no marker.
func TestShellStopsTheWholeTree(t *testing.T) {
	forms := []struct {
		name, command string
		needsNS       bool // it leaves the process group
	}{
		{name: "plain", command: `echo started; sleep 3; touch marker`},
		{name: "background", command: `(sleep 3; touch marker) & echo started; wait`},
		{name: "subshell", command: `echo started; (sleep 3; touch marker)`},
		{name: "trap", command: `(trap '' TERM; sleep 3; touch marker) & echo started; wait`},
		{name: "setsid", command: `setsid sh -c 'sleep 3; touch marker' & echo started; wait`, needsNS: true},
	}
	for _, f := range forms {
		for _, how := range []string{"interrupt", "timeout"} {
			t.Run(f.name+"/"+how, func(t *testing.T) {
				if f.needsNS && !ProbeSandbox().PIDNamespace {
					t.Skip("setsid processes leave the process group; only a PID namespace holds them")
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				args := map[string]any{"command": f.command}
				if how == "timeout" {
					args["timeoutSec"] = 1
				}
				raw, _ := json.Marshal(args)
				wd := t.TempDir()
				log := newProgressLog()
				done := make(chan runOutcome, 1)
				go func() {
					res, err := newTestRegistry(t).Run(ctx, "shell", Call{ID: "c-1", Args: raw, Workdir: wd, Progress: log.add})
					done <- runOutcome{res, err}
				}()
				log.waitFor(t, "stdout", func(s string) bool { return strings.Contains(s, "started\n") })
				if how == "interrupt" {
					cancel()
				}
				out := <-done
				if left := processesIn(t, wd); len(left) > 0 {
					t.Errorf("processes of the command left after Run returned: %v", left)
				}
				if _, err := os.Stat(wd + "/marker"); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the command went on after it was stopped: marker %v", err)
				}
				want := "the command was interrupted; "
				if how == "timeout" {
					want = "the command timed out after 1s; "
				}
				if out.err != nil || out.res.OK || !strings.HasPrefix(out.res.Error, want) || !strings.Contains(out.res.Error, "none") {
					t.Errorf("result %+v, %v", out.res, out.err)
				}
				t.Logf("%s", out.res.Error)
			})
		}
	}
}

// processesIn lists the processes whose working directory is dir.
func processesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			out = append(out, string(stat))
		}
	}
	return out
}

func TestShellKillsBackgroundProcessesOnExit(t *testing.T) {
	log := newProgressLog()
	wd := t.TempDir()
	// The background process never ends by itself: Run returns only if it
	// does not wait for it.
	done := startShellIn(t, context.Background(), wd, `sleep infinity & echo started; until [ -e go ]; do sleep 0.01; done`, log, "")
	log.waitFor(t, "stdout", func(s string) bool { return strings.Contains(s, "started\n") })
	pgid := commandPGID(t, wd)
	os.WriteFile(filepath.Join(wd, "go"), nil, 0o600)
	out := <-done
	assertGroupGone(t, pgid)
	if !out.res.OK || !strings.HasSuffix(out.res.Output, "started\n[exit code 0]") {
		t.Errorf("result %+v", out.res)
	}
}

func TestShellCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := <-startShell(t, ctx, "touch ran", newProgressLog(), "")
	if out.err != nil || out.res.OK || !strings.Contains(out.res.Error, "not run") {
		t.Errorf("result %+v, %v", out.res, out.err)
	}
}

// TestShellHugeOutputBoundedMemory prints 50 MB and then sleeps: the model
// gets ~30 KiB, the whole output lands on disk, progress stops at its cap,
// the Go heap does not grow with the output, and cancel kills the group.
func TestShellHugeOutputBoundedMemory(t *testing.T) {
	const size = 50 << 20
	log := newProgressLog()
	outDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapAlloc
	var peak uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			case <-stopSampling:
				return
			}
		}
	}()

	start := time.Now()
	wd := t.TempDir()
	done := startShellIn(t, ctx, wd,
		`head -c `+strconv.Itoa(size)+` /dev/zero | tr '\0' x; echo; echo printed >&2; sleep 60`, log, outDir)
	log.waitFor(t, "stderr", func(s string) bool { return s == "printed\n" })
	printed := time.Since(start)
	pgid := commandPGID(t, wd)
	cancel()
	out := <-done
	close(stopSampling)
	<-sampled
	if out.err != nil {
		t.Fatal(out.err)
	}
	res := out.res
	assertGroupGone(t, pgid)
	if len(res.Output) > 31<<10 {
		t.Errorf("model output is %d bytes, want about 30 KiB", len(res.Output))
	}
	total := size + 1 + len("printed\n")
	if !strings.Contains(res.Output, "[output truncated: "+strconv.Itoa(total)+" bytes in all") ||
		!strings.Contains(res.Output, "the full output is kept in "+res.FullOutput) ||
		!strings.HasSuffix(res.Output, "\n[interrupted]") {
		t.Errorf("output head %q ... tail %q", res.Output[:80], res.Output[len(res.Output)-300:])
	}
	fi, err := os.Stat(res.FullOutput)
	if err != nil || fi.Size() != int64(total) {
		t.Errorf("full output file %q: %v, %v; want %d bytes", res.FullOutput, fi, err, total)
	}
	if !strings.HasPrefix(res.FullOutput, outDir) || !strings.HasSuffix(res.FullOutput, "shell-t-1_c_1.log") {
		t.Errorf("full output kept at %q", res.FullOutput)
	}
	streamed := log.text("stdout")
	log.mu.Lock()
	var lastStdout chunk
	for _, c := range log.chunks {
		if c.stream == "stdout" {
			lastStdout = c
		}
	}
	log.mu.Unlock()
	if len(streamed) != int(defaultOutputLimits.Stream) || !lastStdout.truncated {
		t.Errorf("streamed %d bytes of stdout (last chunk truncated=%v), want %d then a truncated mark",
			len(streamed), lastStdout.truncated, defaultOutputLimits.Stream)
	}
	growth := int64(peak) - int64(baseline)
	t.Logf("printed %d MiB in %v; peak Go heap growth %.1f MiB (baseline %.1f MiB, peak %.1f MiB)",
		size>>20, printed, float64(growth)/(1<<20), float64(baseline)/(1<<20), float64(peak)/(1<<20))
	if growth > 16<<20 {
		t.Errorf("heap grew by %d MiB while printing %d MiB: output is held in memory", growth>>20, size>>20)
	}
}

func TestShellDoesNotWaitForProcessesThatLeftTheGroup(t *testing.T) {
	log := newProgressLog()
	wd := t.TempDir()
	// The escapee keeps stdout open until the test creates "release",
	// which it does only once Run returned: Run returns only if it stops
	// waiting for it (after Drain).
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(wd, "release"), nil, 0o600) })
	out := <-startShellIn(t, context.Background(), wd, `setsid sh -c 'echo $$ > escapee.pid; until [ -e release ]; do sleep 0.05; done' & while [ ! -s escapee.pid ]; do sleep 0.01; done`, log, "")
	if !out.res.OK {
		t.Errorf("result %+v", out.res)
	}
}

func TestZeroShellUsesDefaults(t *testing.T) {
	res, err := (&Shell{}).Run(context.Background(), Call{Args: json.RawMessage(`{"command":"echo hi"}`), Workdir: t.TempDir()})
	if err != nil || !res.OK || res.Output != "hi\n[exit code 0]" {
		t.Errorf("Run = %+v, %v", res, err)
	}
}

func TestShellEnvironmentHasNoSecrets(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test-secret-value")
	t.Setenv("MY_SERVICE_TOKEN", "tok-secret-value")
	t.Setenv("PLAIN_SETTING", "visible")
	res, err := (&Shell{}).Run(context.Background(), Call{Args: json.RawMessage(`{"command":"env"}`), Workdir: t.TempDir()})
	if err != nil || !res.OK {
		t.Fatalf("env: %+v %v", res, err)
	}
	if strings.Contains(res.Output, "secret-value") {
		t.Fatalf("a secret reached the command's environment:\n%s", res.Output)
	}
	if !strings.Contains(res.Output, "PLAIN_SETTING=visible") {
		t.Fatalf("ordinary variables were dropped too")
	}
}

// listenReached listens on addr ("127.0.0.1:0", "0.0.0.0:0"), answering
// "reached" to every connection, and returns its port.
func listenReached(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("reached\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// outboundAddr returns an address of this machine that is not a loopback
// one ("" when it has none).
func outboundAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// TestShellNetworkPolicy: a plan-mode command cannot reach a listener on
// the host's loopback (nor anything: it has no network); an accept-mode
// command reaches one on an address of the machine that is not a loopback
// one, and the one on the loopback too only without slirp4netns (the
// fallback: the host's network itself); --command-network none/host
// override the mode.
func TestShellNetworkPolicy(t *testing.T) {
	if !ProbeSandbox().NetNamespace {
		t.Skip("no network namespaces: ", ProbeSandbox().NetProblem)
	}
	loop := listenReached(t, "127.0.0.1:0")
	out := outboundAddr()
	all := listenReached(t, "0.0.0.0:0")
	slirp := slirpPath() != "" && ProbeSandbox().Available() && ProbeSandbox().PIDNamespace
	t.Logf("slirp4netns: %v; this machine's outbound address %q", slirp, out)
	for _, withSlirp := range []bool{false, true} {
		if withSlirp && !slirp {
			t.Log("SKIPPING the slirp4netns cases: slirp4netns is not installed (or no sandbox)")
			continue
		}
		testNoSlirp = !withSlirp
		for _, c := range []struct {
			network, mode string
			reachLoop     bool
		}{
			{NetworkDefault, "plan", false},
			{NetworkDefault, "accept", !withSlirp},
			{NetworkDefault, "auto", !withSlirp},
			{NetworkNone, "accept", false},
			{NetworkHost, "plan", true},
			{NetworkHost, "accept", true},
		} {
			s := NewShellWith(ShellOptions{Unsandboxed: !ProbeSandbox().Available(), Network: c.network})
			probes := map[string]bool{fmt.Sprintf("127.0.0.1/%d", loop): c.reachLoop}
			if out != "" {
				// Outbound: everything but plan mode and none.
				probes[fmt.Sprintf("%s/%d", out, all)] = c.network == NetworkHost || c.network == NetworkDefault && c.mode != "plan"
			}
			for target, want := range probes {
				args := fmt.Sprintf(`{"command":"exec 3<>/dev/tcp/%s && cat <&3"}`, target)
				res, err := s.Run(context.Background(), Call{ID: "n", Mode: c.mode, Args: json.RawMessage(args), Workdir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Contains(res.Output, "reached"); got != want || res.OK != want {
					t.Errorf("slirp4netns %v, network %q, mode %s, %s: reached=%v ok=%v, want %v: %s", withSlirp, c.network, c.mode, target, got, res.OK, want, res.Output)
				}
			}
		}
	}
	testNoSlirp = false
	if slirp {
		// Its DNS is slirp4netns's forwarder.
		res, err := NewShell().Run(context.Background(), Call{ID: "r", Mode: "accept", Args: json.RawMessage(`{"command":"cat /etc/resolv.conf"}`), Workdir: t.TempDir()})
		if err != nil || !strings.Contains(res.Output, "nameserver "+slirpDNS) {
			t.Errorf("resolv.conf of an accept-mode command with slirp4netns: %v %s", err, res.Output)
		}
	}
}

// TestShellSeesOnlyItsOwnProcesses: a sandboxed command gets a /proc of its
// own PID namespace, so the daemon's command line (a --store DSN) and every
// other host process are out of sight; ps still works. Where that /proc
// cannot be mounted, the daemon's /proc entry is covered instead.
func TestShellSeesOnlyItsOwnProcesses(t *testing.T) {
	if !ProbeSandbox().Available() || !ProbeSandbox().PIDNamespace {
		t.Skip("no Landlock or no namespaces")
	}
	if p := ProbeSandbox().InitProblem; p != "" {
		t.Fatalf("the probe found the command's init broken: %s", p)
	}
	self := strconv.Itoa(os.Getpid())
	probe := `{"command":"cat /proc/` + self + `/cmdline && echo READ; echo N=$(ls /proc | grep -c '^[0-9]'); echo D=$(ls /proc/` + self + `/ 2>/dev/null | wc -l); echo PS=$(ps -e -o pid= | wc -l)"}`
	for _, fallback := range []bool{false, true} {
		testHostProc = fallback
		res, err := NewShell().Run(context.Background(), Call{ID: "p", Args: json.RawMessage(probe), Workdir: t.TempDir()})
		testHostProc = false
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(res.Output, "READ") || strings.Contains(res.Output, "tool.test") {
			t.Errorf("fallback=%v: the daemon's command line was read: %s", fallback, res.Output)
		}
		if !strings.Contains(res.Output, "D=0\n") {
			t.Errorf("fallback=%v: the daemon's /proc entry is visible: %s", fallback, res.Output)
		}
		// bash, its subshell, ls and grep are all there is; ps works.
		if !fallback && (!strings.Contains(res.Output, "N=3\n") && !strings.Contains(res.Output, "N=4\n") || strings.Contains(res.Output, "PS=0\n")) {
			t.Errorf("a private /proc lists more than the command's processes, or ps fails: %s", res.Output)
		}
	}
}

// TestShellOfflineLoopbackIsItsOwn: an offline command has a loopback of
// its own, up (a local server it starts works), with nothing of the
// host's behind it.
func TestShellOfflineLoopbackIsItsOwn(t *testing.T) {
	if !ProbeSandbox().Available() || !ProbeSandbox().NetNamespace {
		t.Skip("no Landlock or no network namespaces")
	}
	res, err := NewShellWith(ShellOptions{Network: NetworkNone}).Run(context.Background(), Call{ID: "l", Args: json.RawMessage(`{"command":"exec 3<>/dev/tcp/127.0.0.1/1"}`), Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !strings.Contains(res.Output, "refused") {
		t.Errorf("loopback of an offline command: want connection refused (up, empty), got %s", res.Output)
	}
}

// TestShellDenyPorts: with the host's network, a command cannot connect to
// the refused ports (the database's, the daemon's) on any address, and can
// to others.
func TestShellDenyPorts(t *testing.T) {
	if !ProbeSandbox().Available() || ProbeSandbox().LandlockABI < 4 {
		t.Skip("needs Landlock ABI 4 (TCP port rules)")
	}
	// With slirp4netns an accept-mode command has no way to the host's
	// loopback at all: the ports are probed on another address of this
	// machine.
	host := "127.0.0.1"
	if slirpPath() != "" && ProbeSandbox().PIDNamespace && ProbeSandbox().NetNamespace {
		if host = outboundAddr(); host == "" {
			t.Skip("slirp4netns, and no address of this machine but the loopback")
		}
	}
	denied, open := listenReached(t, "0.0.0.0:0"), listenReached(t, "0.0.0.0:0")
	s := NewShellWith(ShellOptions{DenyPorts: []int{denied}})
	for port, want := range map[int]bool{denied: false, open: true} {
		args := fmt.Sprintf(`{"command":"exec 3<>/dev/tcp/%s/%d && cat <&3"}`, host, port)
		res, err := s.Run(context.Background(), Call{ID: "d", Mode: "accept", Args: json.RawMessage(args), Workdir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(res.Output, "reached"); got != want {
			t.Errorf("port %d: reached=%v, want %v: %s", port, got, want, res.Output)
		}
		if !want && !strings.Contains(res.Output, "Permission denied") {
			t.Errorf("port %d: want Permission denied: %s", port, res.Output)
		}
	}
}

// TestShellSandboxSetupFailure: when the command's init cannot set up its
// sandbox, the command does not run and the result says why.
func TestShellSandboxSetupFailure(t *testing.T) {
	if !ProbeSandbox().Available() || !ProbeSandbox().PIDNamespace {
		t.Skip("no Landlock or no namespaces")
	}
	wd := t.TempDir()
	testHostProc, testHide = true, "/nonexistent-trellis-test"
	defer func() { testHostProc, testHide = false, "" }()
	res, err := NewShell().Run(context.Background(), Call{ID: "f", Args: json.RawMessage(`{"command":"touch ran"}`), Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !strings.Contains(res.Error, "the command was not run: its sandbox could not be set up") || !strings.Contains(res.Error, "/nonexistent-trellis-test") {
		t.Errorf("result %+v", res)
	}
	if _, err := os.Stat(filepath.Join(wd, "ran")); err == nil {
		t.Error("the command ran")
	}
}
