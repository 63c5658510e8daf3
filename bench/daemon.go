package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// Daemon says which daemon a bench drives.
type Daemon struct {
	// Home is the home directory of a running daemon to measure, on this
	// machine. Only Conns can use one: the other benches need their own
	// fake model script, which only a daemon they start plays. Empty
	// starts a fresh daemon with a temporary home (removed afterwards) and
	// the bench's script as its provider.
	Home string
	// Command, when Home is empty, starts the fresh daemon as a child
	// process: Command[0] run with Command[1:] followed by --home,
	// --provider and --log-level (e.g. {"/usr/local/bin/trellisd"} or
	// {exe, "daemon"}). Empty starts it in this process, which then holds
	// both the daemon and the bench's clients.
	Command []string
	// Flags are added to Command's arguments (a child daemon only), e.g.
	// {"--merge-deltas", "0"}.
	Flags []string
	// Progress receives a line per phase; nil discards them.
	Progress io.Writer
	// noCheckpoints starts a fresh daemon that records no checkpoints
	// (--checkpoints=false): the checkpoint bench's baseline.
	noCheckpoints bool
}

// daemonHandle is the daemon a bench runs against.
type daemonHandle struct {
	home      string
	token     string
	httpPort  int
	grpcPort  int
	pid       int
	inProcess bool
	fresh     bool
	workdir   string
	cleanup   []func()
	progress  io.Writer
}

// ErrNeedsFreshDaemon is returned by a bench that cannot run against a
// running daemon (Daemon.Home): it needs its own fake model script.
var ErrNeedsFreshDaemon = errors.New("bench: this bench starts a daemon of its own (it needs its own fake model script), so it cannot measure a running daemon (--home)")

// start brings up the target's daemon with script as the fake model; a
// nil script means the bench needs no particular model (a running daemon
// will do).
func (t Daemon) start(ctx context.Context, script []byte) (*daemonHandle, error) {
	return t.startDaemon(ctx, script, "", nil, false)
}

// startDriven is start followed by what most benches do next: it records
// where the daemon runs in r's params and opens the gRPC connection that
// drives it, which closing the handle closes too.
func (t Daemon) startDriven(ctx context.Context, r *Result, script []byte) (*daemonHandle, *grpc.ClientConn, error) {
	return t.startDrivenMerging(ctx, r, script, true)
}

// startDrivenMerging is startDriven; merge false turns off the daemon's
// merging of text chunks (--merge-deltas 0), for the replay bench, whose
// unit is the stored event: its seeding turn stores one event a chunk.
func (t Daemon) startDrivenMerging(ctx context.Context, r *Result, script []byte, merge bool) (*daemonHandle, *grpc.ClientConn, error) {
	h, err := t.startDaemon(ctx, script, "", nil, !merge)
	if err != nil {
		return nil, nil, err
	}
	driver, err := h.drive(r)
	if err != nil {
		h.close()
		return nil, nil, err
	}
	return h, driver, nil
}

// startSession is startDriven followed by the creation of the session the
// bench streams into.
func (t Daemon) startSession(ctx context.Context, r *Result, script []byte, merge bool) (*daemonHandle, *grpc.ClientConn, string, error) {
	h, driver, err := t.startDrivenMerging(ctx, r, script, merge)
	if err != nil {
		return nil, nil, "", err
	}
	sid, err := h.createSession(ctx, driver)
	if err != nil {
		h.close()
		return nil, nil, "", err
	}
	return h, driver, sid, nil
}

// drive records where the daemon runs in r's params and opens a gRPC
// connection to drive it, closed with the handle.
func (h *daemonHandle) drive(r *Result) (*grpc.ClientConn, error) {
	r.param("daemon", h.describe())
	driver, err := h.dialGRPC()
	if err != nil {
		return nil, err
	}
	h.cleanup = append(h.cleanup, func() { driver.Close() })
	return driver, nil
}

// startWith is start with another provider than the fake model: spec is
// the --provider value and env the variables the daemon needs for it
// (OPENAI_BASE_URL, say); an empty spec plays script.
func (t Daemon) startWith(ctx context.Context, script []byte, spec string, env []string) (*daemonHandle, error) {
	return t.startDaemon(ctx, script, spec, env, false)
}

// startDaemon is startWith; unmerged turns off the merging of text chunks.
func (t Daemon) startDaemon(ctx context.Context, script []byte, spec string, env []string, unmerged bool) (*daemonHandle, error) {
	if t.Home != "" && (script != nil || spec != "") {
		return nil, ErrNeedsFreshDaemon
	}
	if script == nil {
		script = streamScript()
	}
	h := &daemonHandle{progress: t.Progress}
	dir, err := os.MkdirTemp("", "trellis-bench-")
	if err != nil {
		return nil, err
	}
	h.cleanup = append(h.cleanup, func() { os.RemoveAll(dir) })
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, script, 0o600); err != nil {
		h.close()
		return nil, err
	}
	h.workdir = filepath.Join(dir, "work")
	if err := os.MkdirAll(h.workdir, 0o700); err != nil {
		h.close()
		return nil, err
	}
	switch {
	case t.Home != "":
		info, err := daemonfile.Read(t.Home)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("bench: the daemon of %s: %w", t.Home, err)
		}
		h.home, h.token, h.httpPort, h.grpcPort, h.pid = t.Home, info.Token, info.Port, info.GRPCPort, info.PID
	case len(t.Command) > 0:
		if spec == "" {
			spec = "fake:" + scriptPath
		}
		var extra []string
		if unmerged {
			extra = []string{"--merge-deltas", "0"}
		}
		if t.noCheckpoints {
			extra = append(extra, "--checkpoints=false")
		}
		if err := h.startChild(ctx, append(slices.Clip(t.Command), t.Flags...), filepath.Join(dir, "home"), spec, env, extra...); err != nil {
			h.close()
			return nil, err
		}
	case len(t.Flags) > 0:
		h.close()
		return nil, fmt.Errorf("bench: daemon flags %q need a child daemon, not one in this process", t.Flags)
	default:
		if spec == "" {
			spec = "fake:" + scriptPath
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			old, had := os.LookupEnv(k)
			os.Setenv(k, v)
			h.cleanup = append(h.cleanup, func() {
				if had {
					os.Setenv(k, old)
				} else {
					os.Unsetenv(k)
				}
			})
		}
		cfg := daemon.Config{Home: filepath.Join(dir, "home"), Provider: spec, LogLevel: "warn"}
		if unmerged {
			cfg.MergeDeltas = -1
		}
		cfg.NoCheckpoints = t.noCheckpoints
		d, err := daemon.Start(ctx, cfg)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("bench: start a daemon: %w", err)
		}
		h.cleanup = append(h.cleanup, d.Stop)
		h.home, h.token, h.httpPort, h.grpcPort, h.pid = d.Home(), d.Token(), d.HTTPPort(), d.GRPCPort(), os.Getpid()
		h.inProcess, h.fresh = true, true
	}
	return h, nil
}

// startChild runs the daemon as a child process, with extra flags after
// the usual ones, and waits for its daemon.json.
func (h *daemonHandle) startChild(ctx context.Context, command []string, home, spec string, env []string, extra ...string) error {
	args := append(append(append([]string{}, command[1:]...), "--home", home, "--provider", spec, "--log-level", "warn"), extra...)
	cmd := exec.Command(command[0], args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start %s: %w", command[0], err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	h.cleanup = append(h.cleanup, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := daemonfile.Read(home)
		if err == nil && info.PID == cmd.Process.Pid {
			h.home, h.token, h.httpPort, h.grpcPort, h.pid = home, info.Token, info.Port, info.GRPCPort, info.PID
			h.fresh = true
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("bench: %s exited before it wrote %s", command[0], daemonfile.Path(home))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s wrote no %s within 30 s", command[0], daemonfile.Path(home))
		}
	}
}

// close stops a daemon the bench started and removes its files.
func (h *daemonHandle) close() {
	for i := len(h.cleanup) - 1; i >= 0; i-- {
		h.cleanup[i]()
	}
	h.cleanup = nil
}

func (h *daemonHandle) logf(format string, args ...any) {
	if h.progress != nil {
		fmt.Fprintf(h.progress, format+"\n", args...)
	}
}

func (h *daemonHandle) wsURL() string { return "ws://127.0.0.1:" + strconv.Itoa(h.httpPort) + "/ws" }

// bearer attaches the daemon's token to every gRPC call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// dialGRPC opens a gRPC connection that carries the token.
func (h *daemonHandle) dialGRPC() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(h.grpcPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(h.token)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, fmt.Errorf("bench: dial gRPC: %w", err)
	}
	return conn, nil
}

// createSession creates a session over gRPC in the bench's workdir.
func (h *daemonHandle) createSession(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	req := &trellisv1.CreateSessionRequest{Workdir: h.workdir}
	res, err := trellisv1.NewSessionServiceClient(conn).CreateSession(ctx, req)
	if err != nil {
		return "", fmt.Errorf("bench: session.create: %w", err)
	}
	return res.GetSessionId(), nil
}

// prompt starts a turn over gRPC and returns its id.
func prompt(ctx context.Context, conn *grpc.ClientConn, sessionID, text string) (string, error) {
	res, err := trellisv1.NewSessionServiceClient(conn).Prompt(ctx, &trellisv1.PromptRequest{SessionId: sessionID, Text: text})
	if err != nil {
		return "", fmt.Errorf("bench: session.prompt: %w", err)
	}
	return res.GetTurnId(), nil
}

// cpuLabel names the CPU figure: the daemon's own, or the whole process's.
func cpuLabel(h *daemonHandle) string {
	if h.inProcess {
		return "CPU used by daemon + clients (one process)"
	}
	return "CPU used by the daemon"
}
