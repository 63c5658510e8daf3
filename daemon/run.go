package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/facade"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/rpc"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/telemetry"
	"github.com/trellis-run/trellis/telemetry/instrument"
	"github.com/trellis-run/trellis/version"
)

// Daemon is one running trellisd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	logFile io.Closer
	tracing *instrument.Tracing
	token   string
	authn   *auth.Authenticator // the token and the store's API keys
	certs   *certReloader       // nil: no TLS
	// cluster authenticates the daemons of a cluster to each other (nil:
	// no cluster certificates).
	cluster   *clusterCerts
	startedAt time.Time

	grpcLn, httpLn net.Listener
	// gatewayLn is the chat gateway's webhook receiver, bound with the
	// other two (the commands' denied ports name all three) and served by
	// the gateway.
	gatewayLn net.Listener
	grpcSrv   *rpc.Server
	health    *health.Server
	httpSrv   *http.Server
	// conn and restConn carry the facade's calls to the runtime inside
	// the process: the services' handlers are called through the server's
	// interceptor chain, with no serialising and no transport.
	conn, restConn grpc.ClientConnInterface
	facade         *facade.Server
	rt             *runtimeServices

	lock     *os.File // <home>/daemon.lock, held while the daemon runs
	stopOnce sync.Once
	stopping chan struct{}
	done     chan struct{}
}

// Start builds and starts a daemon: both listeners are bound and serving and
// daemon.json is written when it returns.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	if err := prepareHome(cfg.Home); err != nil {
		return nil, err
	}
	// One daemon per home: an exclusive lock held for the daemon's life
	// (released by the kernel if it dies), checked before anything is
	// opened, so that two daemons started at once cannot both run.
	lock, err := lockHome(cfg.Home)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, startedAt: time.Now(), stopping: make(chan struct{}), done: make(chan struct{}), lock: lock}
	hardenProcess()
	if d.log, d.logFile, err = newLogger(cfg); err != nil {
		return nil, d.fail(err)
	}
	// Listed for the user's other daemons, whose commands then cannot
	// read this home (nor this daemon's commands theirs).
	if err := registerHome(cfg.Home); err != nil {
		d.log.Warn("register the home among the user's daemons' homes (their commands may read it)", "registry", homesRegistry(), "err", err)
	}
	if d.tracing, err = instrument.Setup(ctx, version.Server); err != nil {
		return nil, d.fail(fmt.Errorf("tracing: %w", err))
	}
	if d.tracing.LeftOut != "" {
		d.log.Warn("the environment asks for OpenTelemetry tracing; tracing is off", "reason", d.tracing.LeftOut)
	}
	// Before anything else runs: commands a crashed predecessor left
	// running (their process groups) are killed.
	reaped, err := tool.ReapProcTable(CommandsPath(cfg.Home))
	if err != nil {
		d.log.Warn("reap the commands of a previous daemon", "err", err)
	}
	if len(reaped) > 0 {
		d.log.Warn("killed the commands a previous daemon left running", "processGroups", reaped)
	}
	if sb := tool.ProbeSandbox(); !sb.Available() && !cfg.UnsandboxedCommands {
		d.log.Warn("commands cannot be sandboxed here; the shell tool is inactive (start with --unsandboxed-commands to run them unsandboxed)", "reason", sb.Problem)
	} else if !sb.PIDNamespace {
		d.log.Warn("commands run without a PID namespace; background processes die with their process group only", "reason", sb.NamespaceProblem)
	}
	if sb := tool.ProbeSandbox(); sb.InitProblem != "" && !cfg.UnsandboxedCommands {
		d.log.Warn("commands cannot be sandboxed here; the shell tool is inactive (start with --unsandboxed-commands to run them unsandboxed)", "reason", sb.InitProblem)
	}
	if sb := tool.ProbeSandbox(); !sb.NetNamespace && cfg.CommandNetwork != tool.NetworkHost {
		d.log.Warn("commands cannot be kept off the network here: the shell tool refuses commands of plan-mode sessions (and of every session with --command-network=none); --command-network=host lets them run with the host's network", "reason", sb.NetProblem)
	}
	if cfg.CommandNetwork == "" && !cfg.UnsandboxedCommands {
		if tool.LoopbackRefused() {
			d.log.Info("accept- and auto-mode commands get outbound network through slirp4netns, without the host's loopback")
		} else {
			d.log.Warn("accept- and auto-mode commands use the host's network, loopback included, minus the control plane's ports: install slirp4netns to keep them off the host's loopback")
		}
	}
	if cfg.TLSCert != "" {
		if d.certs, err = newCertReloader(cfg.TLSCert, cfg.TLSKey, "tls", d.log); err != nil {
			return nil, d.fail(err)
		}
		if cfg.ClusterCert != "" {
			if d.cluster, err = newClusterCerts(cfg, d.log); err != nil {
				return nil, d.fail(err)
			}
		}
	} else if !loopbackHost(cfg.Host) {
		d.log.Warn("serving a non-loopback address without TLS (--insecure-no-tls): the token, API keys and every call cross the network in clear", "host", cfg.Host)
	}
	tokenPath := TokenPath(cfg.Home)
	if cfg.TokenFile != "" {
		tokenPath = cfg.TokenFile
	}
	if d.token, err = auth.LoadOrCreateToken(tokenPath); err != nil {
		return nil, d.fail(err)
	}
	if err := d.listen(); err != nil {
		return nil, d.fail(err)
	}
	if cfg.Advertise == "" {
		cfg.Advertise = d.grpcLn.Addr().String()
	}
	e := edge{token: d.token, servesTLS: d.certs != nil, gatewayLn: d.gatewayLn,
		denyPorts: controlPorts(cfg, d.HTTPPort(), d.GRPCPort(), addrPort(d.gatewayLn.Addr().String()))}
	if d.cluster != nil {
		e.clusterTLS = d.cluster.clientTLS()
	}
	if d.rt, err = newRuntimeServices(ctx, cfg, d.log, e); err != nil {
		return nil, d.fail(err)
	}
	// On a shared store, the cluster's token (clusterToken).
	d.token = d.rt.token
	d.authn = &auth.Authenticator{Token: d.token, Store: d.rt.store}
	if linked := linkedSecrets(cfg); len(linked) > 0 {
		d.log.Warn("secret files have other names (hard links): commands can read them through a link outside the protected paths (the file tools refuse them); remove the links (find / -xdev -samefile FILE)", "files", linked)
	}
	d.pruneOutputs()
	go d.sweepEvery(d.cfg.OutputPruneEvery, func(context.Context) { d.pruneOutputs() })
	d.sweepWorkspaces(ctx)
	go d.sweepEvery(d.cfg.WorkspaceSweepEvery, d.sweepWorkspaces)
	d.buildGRPC()
	d.dial()
	d.buildHTTP()
	d.serve()
	// Paused turns a previous run left wait here, asking for their budget.
	d.rt.sessions.PickUpPaused(ctx)
	go d.pruneSessionsEvery(d.cfg.RetentionEvery)
	if err := daemonfile.Write(cfg.Home, daemonfile.Info{
		Port: d.HTTPPort(), GRPCPort: d.GRPCPort(), PID: os.Getpid(), Token: d.token, TLS: d.certs != nil, TLSCert: d.tlsCertPath(),
		StartedAt: formatTime(d.startedAt), ProtocolVersion: version.Protocol, Version: version.Server,
		Provider: cfg.Provider, Store: daemonfile.RedactStore(cfg.Store),
	}); err != nil {
		d.Stop()
		return nil, err
	}
	d.log.Info("trellisd started", "tracing", d.tracing.Exporter, "home", cfg.Home, "port", d.HTTPPort(), "grpcPort", d.GRPCPort(), "pid", os.Getpid(), "store", d.rt.storeKind)
	return d, nil
}

// Run starts a daemon and blocks until ctx ends or system.shutdown is called,
// then stops it gracefully.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-d.stopping:
	}
	d.Stop()
	return nil
}

// HTTPPort is the bound HTTP/WebSocket port.
func (d *Daemon) HTTPPort() int { return d.httpLn.Addr().(*net.TCPAddr).Port }

// GRPCPort is the bound gRPC port.
func (d *Daemon) GRPCPort() int { return d.grpcLn.Addr().(*net.TCPAddr).Port }

// tlsCertPath is the absolute path of --tls-cert ("" without TLS), which
// daemon.json records so that local clients trust exactly that certificate.
func (d *Daemon) tlsCertPath() string {
	if d.certs == nil {
		return ""
	}
	if abs, err := filepath.Abs(d.cfg.TLSCert); err == nil {
		return abs
	}
	return d.cfg.TLSCert
}

// Token is the daemon's auth token.
func (d *Daemon) Token() string { return d.token }

// Stopping is closed when a graceful stop was requested (system.shutdown).
func (d *Daemon) Stopping() <-chan struct{} { return d.stopping }

// ready is the readiness check (GET /ready): the daemon takes new work
// while it is not stopping and its store answers.
func (d *Daemon) ready(ctx context.Context) error {
	select {
	case <-d.stopping:
		return errors.New("the daemon is stopping")
	default:
	}
	if err := d.rt.store.Ping(ctx); err != nil {
		// The driver's error names hosts and users: it goes to the log,
		// not to an unauthenticated probe.
		d.log.Warn("readiness: the store does not answer", "store", d.rt.storeKind, "err", err)
		return fmt.Errorf("the %s store does not answer", d.rt.storeKind)
	}
	return nil
}

func (d *Daemon) requestStop() {
	d.stopOnce.Do(func() { close(d.stopping) })
}

// lockHome takes <home>/daemon.lock exclusively, without waiting.
func lockHome(home string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(home, "daemon.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the home directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		msg := fmt.Sprintf("a daemon already runs for %s", home)
		if info, rerr := daemonfile.Read(home); rerr == nil {
			msg += fmt.Sprintf(" (pid %d, port %d)", info.PID, info.Port)
		}
		return nil, fmt.Errorf("%s; stop it first (trellis stop). One home (and its SQLite store) serves one daemon: to run several daemons, give each its own --home and share a PostgreSQL store (--store postgres://…)", msg)
	}
	return f, nil
}

func (d *Daemon) fail(err error) error {
	if d.lock != nil {
		d.lock.Close()
	}
	if d.grpcLn != nil {
		d.grpcLn.Close()
	}
	if d.httpLn != nil {
		d.httpLn.Close()
	}
	if d.gatewayLn != nil {
		d.gatewayLn.Close()
	}
	if d.tracing != nil {
		_ = d.tracing.Shutdown(context.Background())
	}
	if d.logFile != nil {
		d.logFile.Close()
	}
	return err
}

func (d *Daemon) listen() error {
	var err error
	if d.grpcLn, err = net.Listen("tcp", net.JoinHostPort(d.cfg.Host, strconv.Itoa(d.cfg.GRPCPort))); err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	if d.httpLn, err = net.Listen("tcp", net.JoinHostPort(d.cfg.Host, strconv.Itoa(d.cfg.Port))); err != nil {
		return fmt.Errorf("HTTP listener: %w", err)
	}
	if d.gatewayLn, err = gateway.Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(d.cfg.GatewayPort))); err != nil {
		return fmt.Errorf("start the gateway: %w", err)
	}
	if d.certs != nil {
		// TLS only on both ports (the gRPC server's credentials, see
		// buildGRPC); the facade's in-process connection to the runtime
		// never leaves the process and stays plain.
		d.httpLn = tls.NewListener(d.httpLn, d.certs.serverTLS("http/1.1"))
	}
	return nil
}

func (d *Daemon) buildGRPC() {
	d.health = health.NewServer()
	grpcMetrics := instrument.GRPCServerMetrics()
	inst := rpc.Instrumentation{
		Unary:  []grpc.UnaryServerInterceptor{grpcMetrics.UnaryServerInterceptor(), instrument.RequestIDUnary},
		Stream: []grpc.StreamServerInterceptor{grpcMetrics.StreamServerInterceptor(), instrument.RequestIDStream},
	}
	if h := d.tracing.ServerStatsHandler(); h != nil {
		inst.Stats = append(inst.Stats, h)
	} else {
		// No spans: only a caller's traceparent is carried (log lines).
		inst.Unary = append(inst.Unary, instrument.PropagateUnary)
		inst.Stream = append(inst.Stream, instrument.PropagateStream)
	}
	inst.Forwarder = d.rt.forward // nil: a daemon alone on its store
	inst.Receipts = rpc.NewReceipts(rpc.ReceiptOptions{
		Store: d.rt.store, Window: d.cfg.OperationWindow, Runner: ids.New("run"),
		Sole: d.rt.node == nil, Log: d.log,
	})
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	go func() { <-d.stopping; stopSweep() }()
	go inst.Receipts.Sweep(sweepCtx)
	var creds credentials.TransportCredentials
	if d.certs != nil {
		creds = credentials.NewTLS(d.grpcServerTLS())
	}
	d.grpcSrv = rpc.NewServer(d.authn, d.rt.store, d.rt.store, d.log, d.health, creds, inst)
	sys := rpc.NewSystemServer(rpc.SystemDeps{
		Authn:        d.authn,
		Home:         d.cfg.Home,
		Store:        d.rt.storeKind,
		StartedAt:    d.startedAt,
		Capabilities: d.rt.capabilities(),
		Ports:        func() (int, int) { return d.HTTPPort(), d.GRPCPort() },
		Counters:     d.counters,
		Shutdown:     d.requestStop,
		// The window in force (the flag's 0 is the default).
		OperationWindow: inst.Receipts.Window,
		Settings:        d.rt.settings,
		Usage:           d.rt.store,
	})
	trellisv1.RegisterSystemServiceServer(d.grpcSrv, sys)
	trellisv1.RegisterPrincipalServiceServer(d.grpcSrv, rpc.NewPrincipalServer(d.rt.store, d.rt.sessions))
	d.rt.register(d.grpcSrv)
	grpcMetrics.InitializeMetrics(d.grpcSrv.Server)
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for name := range d.grpcSrv.GetServiceInfo() {
		d.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
}

func (d *Daemon) counters(ctx context.Context) *trellisv1.Counters {
	c := d.rt.counters(ctx)
	if d.facade != nil {
		c.Connections = int32(d.facade.Connections())
	}
	return c
}

// dial opens the facade's connections to the runtime, in process: one
// that carries the daemon token (the WebSocket facade, whose clients proved
// the token in system.hello) and one that carries only what each REST
// caller sends. A split facade dials the gRPC port instead.
func (d *Daemon) dial() {
	// The facade's calls carry its spans' trace context to the runtime, as
	// traceparent metadata, as over a network.
	d.conn = instrument.PropagatingConn(d.grpcSrv.InProcess(metadata.Pairs("authorization", "Bearer "+d.token)))
	d.restConn = instrument.PropagatingConn(d.grpcSrv.InProcess(nil))
}

func (d *Daemon) buildHTTP() {
	d.facade = facade.NewServer(facade.Options{
		Conn:         d.conn,
		RESTConn:     d.restConn,
		Token:        d.token,
		Log:          d.log,
		AllowOrigins: d.cfg.AllowOrigins,
		Limits: facade.Limits{
			MaxConnections:     d.cfg.MaxConnections,
			MaxWatchedSessions: d.cfg.MaxWatchedSessions,
			MaxInFlight:        d.cfg.MaxInFlight,
		},
		HelloTimeout:       d.cfg.HelloTimeout,
		MaxUnauthenticated: d.cfg.MaxUnauthenticated,
		Ready:              d.ready,
	})
	d.httpSrv = &http.Server{
		Handler:           d.facade.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
}

func (d *Daemon) serve() {
	go func() {
		if err := d.grpcSrv.Serve(d.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			d.log.Error("gRPC server stopped", "err", err)
			d.requestStop()
		}
	}()
	go func() {
		if err := d.httpSrv.Serve(d.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("HTTP server stopped", "err", err)
			d.requestStop()
		}
	}()
}

// Stop stops the daemon gracefully: no new connections, running turns end
// interrupted, the store is flushed, daemon.json is removed.
func (d *Daemon) Stop() {
	d.requestStop()
	select {
	case <-d.done:
		return
	default:
	}
	defer close(d.done)
	d.log.Info("trellisd stopping")
	d.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Closing the listener first refuses new HTTP clients. Running turns
	// end next (interrupted, synthetic) while clients are still connected
	// to see it; then the facade drains and closes its WebSocket
	// connections (hijacked, so http.Server cannot).
	_ = d.httpSrv.Shutdown(ctx)
	d.rt.shutdown(ctx)
	d.facade.Close()
	stopped := make(chan struct{})
	go func() { d.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		d.grpcSrv.Stop()
	}
	if err := d.rt.close(); err != nil {
		d.log.Warn("close the runtime", "err", err)
	}
	if err := os.Remove(daemonfile.Path(d.cfg.Home)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove daemon.json", "err", err)
	}
	if err := d.tracing.Shutdown(ctx); err != nil {
		d.log.Warn("flush traces", "err", err)
	}
	d.log.Info("trellisd stopped")
	d.logFile.Close()
	d.lock.Close()
}

// newLogger writes JSON lines to the home's log file, rotated by size
// (lumberjack keeps LogMaxFiles old files beside it, mode 0600), with the
// request, turn and trace ids of the logging context on every line.
func newLogger(cfg Config) (*slog.Logger, io.Closer, error) {
	f := &lumberjack.Logger{Filename: LogPath(cfg.Home), MaxSize: cfg.LogMaxSizeMB, MaxBackups: cfg.LogMaxFiles}
	// Open now, so that a log file that cannot be written fails the start.
	if _, err := f.Write(nil); err != nil {
		return nil, nil, fmt.Errorf("open log file: %w", err)
	}
	var w io.Writer = f
	if cfg.LogToStderr {
		w = io.MultiWriter(f, &bestEffort{w: os.Stderr})
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel)))
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))), f, nil
}

// addrPort is the port of a host:port address, 0 when it has none.
func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// pruneOutputs applies the retention of kept command outputs.
func (d *Daemon) pruneOutputs() {
	r := tool.OutputRetention{MaxAge: max(d.cfg.OutputMaxAge, 0), MaxBytes: int64(max(d.cfg.OutputMaxMB, 0)) << 20}
	n, freed, err := tool.PruneOutputs(OutputsDir(d.cfg.Home), r, time.Now())
	if err != nil {
		d.log.Warn("prune kept command outputs", "err", err)
	}
	if n > 0 {
		d.log.Info("pruned kept command outputs", "files", n, "bytes", freed, "maxAge", r.MaxAge.String(), "maxBytes", r.MaxBytes)
	}
}

// sweepWorkspaces removes the managed workdirs this daemon keeps for
// sessions that no longer exist (each removal is logged by the sessions'
// service); a store error skips the sweep.
func (d *Daemon) sweepWorkspaces(ctx context.Context) {
	if err := d.rt.sessions.SweepManagedWorkdirs(ctx); err != nil && ctx.Err() == nil {
		d.log.Warn("sweep the managed workdirs of deleted sessions: skipped", "err", err)
	}
}

// sweepEvery runs sweep every interval until the daemon stops, with a
// context that ends when it stops.
func (d *Daemon) sweepEvery(every time.Duration, sweep func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-d.stopping; cancel() }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stopping:
			return
		case <-t.C:
			sweep(ctx)
		}
	}
}

// pruneSessionsEvery applies the retention policy of saved sessions
// (--retain, --retain-latest) now and every interval until the daemon
// stops; without a rule it does nothing. Every daemon of a cluster sweeps:
// each session is deleted once, under the deleting daemon's lease, and a
// session another daemon deleted first is skipped.
func (d *Daemon) pruneSessionsEvery(every time.Duration) {
	if (retention.Policy{Within: d.cfg.Retain, Latest: d.cfg.RetainLatest}).Off() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-d.stopping; cancel() }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.pruneSessions(ctx)
		select {
		case <-d.stopping:
			return
		case <-t.C:
		}
	}
}

// pruneSessions applies the retention policy once, logging each session
// it deletes and why.
func (d *Daemon) pruneSessions(ctx context.Context) {
	res, err := d.rt.sessions.Prune(ctx, session.PruneParams{})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("retention: prune saved sessions", "err", err)
		}
		return
	}
	for _, p := range res.Sessions {
		if p.Held != "" {
			d.log.Debug("retention: kept a session past the policy", "sessionId", p.Row.SessionID, "reason", p.Reason, "held", p.Held)
			continue
		}
		d.log.Info("retention: deleted a session", "sessionId", p.Row.SessionID, "reason", p.Reason,
			"lastActivity", p.LastActivity.UTC().Format(time.RFC3339), "workdir", p.Row.Workdir, "checkpointBytes", p.CheckpointBytes)
	}
	if res.Deleted > 0 {
		d.log.Info("retention: pruned saved sessions", "deleted", res.Deleted, "checkpointBytes", res.CheckpointBytes,
			"retain", res.Policy.Within.String(), "retainLatest", res.Policy.Latest, "retainPer", res.Policy.Per)
	}
}

// Home is the daemon's home directory.
func (d *Daemon) Home() string { return d.cfg.Home }
