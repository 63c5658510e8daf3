package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/version"
)

// newDaemonCmd is `trellis daemon`: trellisd itself, with trellisd's flags,
// so that one binary (even one from `go run`) can start a daemon.
func newDaemonCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "daemon [trellisd flags]",
		Short: "Run the daemon in the foreground (what trellisd runs; see trellis daemon -h)",
		// trellisd's own flag set parses everything, --home and --provider
		// included.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if args, ok := daemon.ConfigSubcommand(args); ok { // trellis daemon config check|print
				if code := daemon.ConfigCommand("trellis daemon", args, a.stdout, a.stderr); code != 0 {
					return &exitError{code: code} // ConfigCommand printed why
				}
				return nil
			}
			cfg, err := daemon.ParseFlags("trellis daemon", args)
			switch {
			case errors.Is(err, flag.ErrHelp):
				return nil // ParseFlags printed the usage
			case errors.Is(err, daemon.ErrVersion):
				fmt.Fprintf(a.stdout, "trellis %s (protocol %s)\n", version.Server, version.Protocol)
				return nil
			case err != nil:
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return daemon.Run(ctx, cfg)
		},
	}
}

// startWait bounds how long a started daemon may take to answer.
const startWait = 60 * time.Second

// ensureDaemon returns the daemon.json of a daemon that answers for the
// home directory, starting one in the background when none runs.
func (a *app) ensureDaemon(ctx context.Context) (daemonfile.Info, error) {
	info, err := a.ensureDaemonRuns(ctx)
	if err != nil {
		return info, err
	}
	return info, a.checkSettings(info)
}

// checkSettings refuses a running daemon whose --provider or --store is not
// the one this command was given: the command would silently use another
// model or store.
func (a *app) checkSettings(info daemonfile.Info) error {
	if info.Store == "" { // a daemon from before daemon.json said
		return nil
	}
	var diffs []string
	if a.provider != "" && a.providerArg() != info.Provider {
		diffs = append(diffs, fmt.Sprintf("--provider %q (you asked for %q)", orDemo(info.Provider), a.providerArg()))
	}
	if a.store != "" && daemonfile.RedactStore(a.store) != info.Store {
		diffs = append(diffs, fmt.Sprintf("--store %q (you asked for %q)", info.Store, daemonfile.RedactStore(a.store)))
	}
	if len(diffs) == 0 {
		return nil
	}
	return &exitError{code: exitFailed, msg: fmt.Sprintf(
		"the daemon already running for %s (pid %d) was started with %s.\n"+
			"  To restart it with your settings: trellis --home %s stop, then run this command again.\n"+
			"  To run a second daemon beside it: add --home DIR (another home directory).",
		a.home, info.PID, strings.Join(diffs, " and "), a.home)}
}

// leftOutNote completes --provider's help in a binary built without some
// vendors' SDKs (-tags trellis_lean, trellis_no_openai, trellis_no_anthropic).
func leftOutNote() string {
	out := provider.LeftOut()
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("; this build has only %s (%s left out by build tags)",
		strings.Join(provider.CompiledIn(), ", "), strings.Join(out, ", "))
}

func orDemo(provider string) string {
	if provider == "" {
		return "(none: the offline demo model)"
	}
	return provider
}

// providerArg is --provider as the daemon gets it: the path of a fake
// script made absolute (the daemon runs in the home directory).
func (a *app) providerArg() string {
	if path, ok := strings.CutPrefix(a.provider, "fake:"); ok && path != "" && !filepath.IsAbs(path) {
		if abs, err := filepath.Abs(path); err == nil {
			return "fake:" + abs
		}
	}
	return a.provider
}

// ensureDaemonRuns returns the daemon.json of the home's daemon, starting
// one when none runs.
func (a *app) ensureDaemonRuns(ctx context.Context) (daemonfile.Info, error) {
	info, err := client.Probe(ctx, a.home, 3*time.Second)
	if err == nil || errors.Is(err, client.ErrNotAnswering) {
		return info, err
	}
	if err := os.MkdirAll(filepath.Join(a.home, "logs"), 0o700); err != nil {
		return info, fmt.Errorf("create the home directory: %w", err)
	}
	// Two commands starting at once would start two daemons: the first
	// one to hold the lock starts it, the other finds it running.
	unlock, err := lockFile(filepath.Join(a.home, "start.lock"))
	if err != nil {
		return info, err
	}
	defer unlock()
	if info, err := client.Probe(ctx, a.home, 3*time.Second); err == nil || errors.Is(err, client.ErrNotAnswering) {
		return info, err
	}
	return a.startDaemon(ctx)
}

// startDaemon starts `<this executable> daemon --home HOME` detached from
// the terminal, its output appended to the daemon's log file, and waits
// until it answers.
func (a *app) startDaemon(ctx context.Context) (daemonfile.Info, error) {
	var info daemonfile.Info
	if err := provider.CheckBuild(a.provider); err != nil {
		return info, &exitError{code: exitFailed, msg: err.Error()}
	}
	exe, err := os.Executable()
	if err != nil {
		return info, fmt.Errorf("cannot find this program to start the daemon: %w", err)
	}
	logPath := daemon.LogPath(a.home)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return info, fmt.Errorf("open the daemon's log: %w", err)
	}
	args := []string{"daemon", "--home", a.home}
	if a.provider != "" {
		args = append(args, "--provider", a.providerArg())
	}
	if a.store != "" {
		args = append(args, "--store", a.store)
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = a.home
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own session: no controlling terminal, so the terminal's Ctrl-C
	// and hang-up do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logFile.Close()
	if err != nil {
		return info, fmt.Errorf("start the daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopSpinner := a.spin("starting the daemon")
	info, err = waitForDaemon(ctx, a.home, cmd.Process.Pid, exited)
	stopSpinner()
	if err != nil {
		return info, fmt.Errorf("%w\nlast lines of %s:\n%s", err, logPath, tail(logPath, 10))
	}
	fmt.Fprintf(a.stderr, "trellis: started the daemon (pid %d, port %d); its log is %s\n", info.PID, info.Port, logPath)
	return info, nil
}

// waitForDaemon waits until the daemon of pid answers, or it exited (then
// another daemon that answers is accepted: it lost a start race).
func waitForDaemon(ctx context.Context, home string, pid int, exited <-chan error) (daemonfile.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if info, err := daemonfile.Read(home); err == nil && info.PID == pid && client.Health(ctx, info) == nil {
			return info, nil
		}
		select {
		case err := <-exited:
			if info, perr := client.Probe(ctx, home, time.Second); perr == nil {
				return info, nil
			}
			return daemonfile.Info{}, fmt.Errorf("the daemon exited while starting (%v)", err)
		case <-ctx.Done():
			return daemonfile.Info{}, fmt.Errorf("the daemon (pid %d) did not answer within %v", pid, startWait)
		case <-tick.C:
		}
	}
}

// lockFile takes an exclusive lock on path (created if needed), waiting
// for it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// tail returns the last n lines of a file, indented, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, "  "+sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// connect ensures a daemon runs and opens an authenticated connection to it.
func (a *app) connect(ctx context.Context, opts client.Options) (*client.Client, error) {
	info, err := a.ensureDaemon(ctx)
	if err != nil {
		return nil, err
	}
	opts.ClientKind = "cli"
	// A daemon that restarts (or is restarted) mid-turn is found again
	// through daemon.json, and the turn's events resume where they were.
	opts.Reconnect, opts.Home = true, a.home
	opts.OnConnState = func(st client.ConnState, err error) {
		switch st {
		case client.Disconnected:
			fmt.Fprintf(a.stderr, "\ntrellis: lost the connection to the daemon (%v); reconnecting\n", err)
		case client.Reconnected:
			fmt.Fprintln(a.stderr, "trellis: reconnected to the daemon")
		}
	}
	opts.Key = os.Getenv(keyEnv)
	c, err := client.DialInfo(ctx, info, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to the daemon on port %d: %w", info.Port, err)
	}
	a.warnUnusedKeys(ctx, c, info)
	return c, nil
}

// connectRunning opens a connection to a daemon that already runs, without
// starting one (for commands that only inspect or manage).
func (a *app) connectRunning(ctx context.Context, opts client.Options) (*client.Client, error) {
	info, err := client.Probe(ctx, a.home, 3*time.Second)
	if errors.Is(err, daemonfile.ErrNoDaemon) {
		return nil, &exitError{code: exitFailed, msg: fmt.Sprintf("no daemon is running for %s (trellis run or trellis chat starts one)", a.home)}
	}
	if err != nil {
		return nil, err
	}
	opts.ClientKind = "cli"
	opts.Key = os.Getenv(keyEnv)
	return client.DialInfo(ctx, info, opts)
}

// keyEnv names the environment variable holding an API key: commands then
// act as its principal instead of as the daemon token's built-in admin.
const keyEnv = "TRELLIS_KEY"

// withDaemon makes a command's RunE that runs fn with a connection to the
// daemon that already runs (connectRunning), closed when fn returns.
func (a *app) withDaemon(fn func(ctx context.Context, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, err := a.connectRunning(ctx, client.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(ctx, c, args)
	}
}
