package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/trellis-run/trellis/runtime/auth"
)

// ScaleOptions configure Scale.
type ScaleOptions struct {
	// Daemon.Command starts each daemon as a child process (required:
	// daemons sharing one process would share its scheduler and heap, which
	// is not scale-out).
	Daemon
	// DSN names the PostgreSQL server (default $TRELLIS_TEST_POSTGRES). The
	// bench creates a fresh database on it and drops it at the end; the DSN's
	// user must be allowed to create databases.
	DSN string
	// Daemons is the size of the cluster compared with one daemon
	// (default 3).
	Daemons int
	// Sessions is how many sessions stream at once in each throughput
	// phase, spread over the daemons (default 60).
	Sessions int
	// Deltas is how many model chunks each session's turn streams,
	// as fast as the daemon takes them (default 2,500).
	Deltas int
	// ConnsPerDaemon is how many gRPC connections carry the bench's calls
	// and subscriptions to each daemon (default 4).
	ConnsPerDaemon int
	// PacedEvents is how many model chunks each latency turn streams
	// over PacedSec seconds, a rate every subscriber keeps up with
	// (defaults 600 over 3 s).
	PacedEvents int
	PacedSec    float64
}

func (o *ScaleOptions) defaults() {
	if o.DSN == "" {
		o.DSN = os.Getenv(postgresEnv)
	}
	orDefault(&o.Daemons, 3)
	orDefault(&o.Sessions, 60)
	orDefault(&o.Deltas, 2500)
	orDefault(&o.ConnsPerDaemon, 4)
	orDefault(&o.PacedEvents, 600)
	orDefault(&o.PacedSec, 3)
}

// postgresEnv is the variable naming the PostgreSQL server the PostgreSQL
// tests (and this bench, by default) use.
const postgresEnv = "TRELLIS_TEST_POSTGRES"

// ErrNoPostgres is returned by Scale when no PostgreSQL server is named.
var ErrNoPostgres = errors.New("bench scale needs a PostgreSQL server: pass --dsn postgres://user@host:5432/db or set " +
	postgresEnv + " (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); it creates a fresh database there and drops it at the end")

// errScaleInProcess is returned by Scale without Daemon.Command.
var errScaleInProcess = errors.New("bench scale runs each daemon as a child process (drop --in-process)")

// Scale measures scale-out on one PostgreSQL database: the aggregate rate
// of streamed events of Daemons daemons against one daemon, and the delay a
// live event has on a daemon that does not own its session.
//
// It creates a fresh database and starts one trellisd child process on it
// (--store, a shared --token-file, its own ports and --advertise). Phase 1:
// Sessions sessions on that daemon stream Deltas deltas each, all at once,
// each watched by a gRPC subscriber on the daemon; the rate is the events
// the subscribers received per second, from the first prompt to the last
// turn.done. Then Daemons−1 more daemons join the same database and phase 2
// repeats the same load with the sessions spread over all of them (session i
// created, prompted and watched on daemon i mod Daemons, which takes its
// lease). The ratio of the two rates is the scale-out figure. Last, each
// daemon owns one session streaming a paced turn, watched by a subscriber on
// the owner and one on the next daemon: the cross-daemon extra latency is,
// for every event, the remote subscriber's arrival minus the owner's
// subscriber's arrival. Events lost or repeated are counted against the
// database's own rows.
func Scale(ctx context.Context, opts ScaleOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "scale", Title: "scale-out: daemons on one PostgreSQL database",
		Params: []Param{{"daemons", opts.Daemons}, {"sessions", opts.Sessions},
			{"deltas_per_session", opts.Deltas}, {"conns_per_daemon", opts.ConnsPerDaemon},
			{"paced_events", opts.PacedEvents}, {"paced_sec", opts.PacedSec}}}
	switch {
	case opts.Home != "":
		return r, ErrNeedsFreshDaemon
	case len(opts.Command) == 0:
		return r, errScaleInProcess
	case opts.DSN == "":
		return r, ErrNoPostgres
	case opts.Daemons < 2:
		return r, fmt.Errorf("bench scale compares a cluster with one daemon: --daemons must be at least 2, not %d", opts.Daemons)
	}
	load0 := loadAverage()
	if err := raiseOpenFiles(uint64(4*opts.Sessions + 4096)); err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "trellis-bench-scale-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	dbDSN, drop, err := freshDatabase(ctx, opts.DSN)
	if err != nil {
		return r, err
	}
	defer drop()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, streamScript(
		scriptStep{match: "scale-paced", deltas: opts.PacedEvents, delaySec: opts.PacedSec},
		scriptStep{match: "scale", deltas: opts.Deltas}), 0o600); err != nil {
		return r, err
	}
	tokenFile := filepath.Join(dir, "token")
	if _, err := auth.LoadOrCreateToken(tokenFile); err != nil {
		return r, err
	}
	workdir := filepath.Join(dir, "work")
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		return r, err
	}
	db, err := pgx.Connect(ctx, dbDSN)
	if err != nil {
		return r, fmt.Errorf("bench: connect to the bench database: %w", err)
	}
	defer db.Close(context.Background())

	c := &scaleCluster{opts: opts, dir: dir, dsn: dbDSN, script: script, tokenFile: tokenFile, workdir: workdir, db: db}
	defer c.close()
	if err := c.start(ctx, 1); err != nil {
		return r, err
	}
	single, err := c.throughput(ctx, "1 daemon")
	if err != nil {
		return r, err
	}
	if err := c.start(ctx, opts.Daemons-1); err != nil {
		return r, err
	}
	cluster, err := c.throughput(ctx, fmt.Sprintf("%d daemons", opts.Daemons))
	if err != nil {
		return r, err
	}
	lat, err := c.latency(ctx)
	if err != nil {
		return r, err
	}

	r.figure("single_deltas_per_s", single.rate, "deltas/s", "1 daemon, all sessions")
	r.figure("cluster_deltas_per_s", cluster.rate, "deltas/s", fmt.Sprintf("%d daemons, all sessions", opts.Daemons))
	r.figure("ratio", ratio(cluster.rate, single.rate), "cluster/single", fmt.Sprintf("%d daemons / 1 daemon", opts.Daemons))
	r.figure("cross_extra_p50_ms", ms(lat.p50), "ms", "cross-daemon live event, extra delay p50")
	r.figure("cross_extra_p99_ms", ms(lat.p99), "ms", "cross-daemon live event, extra delay p99")
	r.figure("cross_extra_max_ms", ms(lat.max), "ms", "cross-daemon live event, extra delay max")
	r.figure("single_wall_s", single.took.Seconds(), "s", "1 daemon: first prompt → last turn.done")
	r.figure("cluster_wall_s", cluster.took.Seconds(), "s", fmt.Sprintf("%d daemons: first prompt → last turn.done", opts.Daemons))
	r.figure("single_daemon_cpu_cores", single.daemonCores, "cores", "CPU of the daemon, 1 daemon")
	r.figure("cluster_daemons_cpu_cores", cluster.daemonCores, "cores", fmt.Sprintf("CPU of the %d daemons together", opts.Daemons))
	r.figure("single_postgres_cpu_cores", single.pgCores, "cores", "CPU of PostgreSQL (all its processes on this machine), 1 daemon")
	r.figure("cluster_postgres_cpu_cores", cluster.pgCores, "cores", fmt.Sprintf("CPU of PostgreSQL (all its processes on this machine), %d daemons", opts.Daemons))
	r.figure("single_daemon_cpu_us_per_delta", perEvent(single.daemonCores, single), "µs/delta", "daemon CPU per model chunk, 1 daemon")
	r.figure("cluster_daemon_cpu_us_per_delta", perEvent(cluster.daemonCores, cluster), "µs/delta", fmt.Sprintf("daemon CPU per model chunk, %d daemons", opts.Daemons))
	r.figure("single_postgres_cpu_us_per_delta", perEvent(single.pgCores, single), "µs/delta", "PostgreSQL CPU per model chunk, 1 daemon")
	r.figure("cluster_postgres_cpu_us_per_delta", perEvent(cluster.pgCores, cluster), "µs/delta", fmt.Sprintf("PostgreSQL CPU per model chunk, %d daemons", opts.Daemons))
	r.figure("single_client_cpu_cores", single.clientCores, "cores", "CPU of the bench's clients, 1 daemon")
	r.figure("cluster_client_cpu_cores", cluster.clientCores, "cores", fmt.Sprintf("CPU of the bench's clients, %d daemons", opts.Daemons))
	r.figure("cluster_owners", float64(cluster.owners), "daemons", "daemons holding the phase-2 sessions' leases")
	r.figure("deltas", float64(single.deltas+cluster.deltas), "deltas", "model chunks received, both phases (in the text of merged message.delta events)")
	r.figure("lost", float64(single.lost+cluster.lost+lat.lost), "deltas", "model chunks lost (all phases)")
	r.figure("duplicated", float64(single.dups+cluster.dups+lat.dups), "deltas", "model chunks repeated (all phases)")
	r.target("ratio", ">=", 2.0)
	r.target("cross_extra_p99_ms", "<", 50)
	r.target("lost", "==", 0)
	r.target("duplicated", "==", 0)
	cores := runtime.NumCPU()
	busy := cluster.daemonCores + cluster.pgCores + cluster.clientCores
	r.note("the daemons, PostgreSQL and the bench's clients share this machine's %d cores: %.2f of them were busy during the %d-daemon phase, %.2f during the 1-daemon phase",
		cores, busy, opts.Daemons, single.daemonCores+single.pgCores+single.clientCores)
	if busy >= 0.8*float64(cores) {
		r.note("the %d-daemon phase was bound by the cores, not by the cluster: more daemons cannot add throughput when the cores are already busy; the ratio means something on a machine with cores to spare for each daemon and for PostgreSQL", opts.Daemons)
	}
	r.finish()
	if load := max(load0, r.Load); load > float64(cores) {
		r.note("the machine was busy (load average up to %.1f on %d cores): each process got a share of the cores, so %d daemon processes got more CPU than 1 and the ratio measures that share as much as the cluster; the CPU per model chunk is the figure that holds under load", load, cores, opts.Daemons)
	}
	return r, nil
}

// perEvent converts cores used during a phase into CPU µs per model chunk received.
func perEvent(cores float64, p scalePhase) float64 {
	if p.deltas == 0 {
		return 0
	}
	return cores * p.took.Seconds() * 1e6 / float64(p.deltas)
}

// scaleCluster is the bench's daemons on one database.
type scaleCluster struct {
	opts      ScaleOptions
	dir       string
	dsn       string
	script    string
	tokenFile string
	workdir   string
	db        *pgx.Conn
	daemons   []*daemonHandle
	conns     [][]*grpc.ClientConn // per daemon
}

// start adds n daemons to the cluster, in parallel.
func (c *scaleCluster) start(ctx context.Context, n int) error {
	first := len(c.daemons)
	hs := make([]*daemonHandle, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range hs {
		g.Go(func() error {
			h := &daemonHandle{progress: c.opts.Progress, workdir: c.workdir}
			hs[i] = h
			port, err := freePort()
			if err != nil {
				return err
			}
			home := filepath.Join(c.dir, "home-"+strconv.Itoa(first+i))
			return h.startChild(gctx, c.opts.Command, home, "fake:"+c.script, nil,
				"--store", c.dsn, "--token-file", c.tokenFile,
				"--grpc-port", strconv.Itoa(port), "--advertise", "127.0.0.1:"+strconv.Itoa(port))
		})
	}
	err := g.Wait()
	for _, h := range hs {
		if h != nil {
			c.daemons = append(c.daemons, h)
		}
	}
	if err != nil {
		return err
	}
	for _, h := range hs {
		var conns []*grpc.ClientConn
		for range c.opts.ConnsPerDaemon {
			conn, err := h.dialGRPC()
			if err != nil {
				return err
			}
			conns = append(conns, conn)
		}
		c.conns = append(c.conns, conns)
		// One short turn, so that the measured phases find a warm daemon.
		sid, err := h.createSession(ctx, conns[0])
		if err != nil {
			return err
		}
		if err := runTurn(ctx, h, conns[0], sid, "warm up"); err != nil {
			return err
		}
		h.logf("scale: daemon %d up (pid %d, gRPC port %d)", len(c.conns), h.pid, h.grpcPort)
	}
	return nil
}

// close stops the daemons (in parallel) and closes the connections.
func (c *scaleCluster) close() {
	for _, conns := range c.conns {
		for _, conn := range conns {
			conn.Close()
		}
	}
	var wg sync.WaitGroup
	for _, h := range c.daemons {
		wg.Add(1)
		go func() { defer wg.Done(); h.close() }()
	}
	wg.Wait()
}

// conn returns the k-th connection to daemon d.
func (c *scaleCluster) conn(d, k int) *grpc.ClientConn {
	cs := c.conns[d]
	return cs[k%len(cs)]
}

// scalePhase is what one throughput phase measured.
type scalePhase struct {
	rate                              float64
	took                              time.Duration
	deltas, lost, dups                int64
	daemonCores, pgCores, clientCores float64
	owners                            int
}

// throughput runs one phase: Sessions sessions spread over the running
// daemons stream their turns at once.
func (c *scaleCluster) throughput(ctx context.Context, label string) (scalePhase, error) {
	var out scalePhase
	n := len(c.daemons)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c.daemons[0].logf("scale: %s: %d sessions streaming %d deltas each", label, c.opts.Sessions, c.opts.Deltas)
	ids := make([]string, c.opts.Sessions)
	recs := make([]*turnRecorder, c.opts.Sessions)
	epoch := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range ids {
		g.Go(func() error {
			d, conn := i%n, c.conn(i%n, i/n)
			sid, err := c.daemons[d].createSession(gctx, conn)
			if err != nil {
				return err
			}
			ids[i] = sid
			recs[i] = newTurnRecorder(0, c.opts.Deltas, epoch)
			return subscribeGRPC(ctx, conn, sid, 0, newSlot(recs[i]))
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	cpu0 := c.cpu()
	start := time.Now()
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(64)
	for i, sid := range ids {
		g.Go(func() error {
			_, err := prompt(gctx, c.conn(i%n, i/n), sid, "scale")
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	if err := waitAll(ctx, recs); err != nil {
		return out, err
	}
	cpu1 := c.cpu()
	var end int64
	for _, rec := range recs {
		end = max(end, rec.doneAt.Load())
		out.deltas += rec.received.Load()
	}
	out.took = epoch.Add(time.Duration(end)).Sub(start)
	out.rate = rate(out.deltas, out.took)
	out.daemonCores, out.pgCores, out.clientCores = cpu1.cores(cpu0, out.took)
	out.lost, out.dups = c.check(recs)
	if err := c.db.QueryRow(ctx, `SELECT count(DISTINCT owner_id) FROM session_leases WHERE session_id = ANY($1)`, ids).Scan(&out.owners); err != nil {
		return out, fmt.Errorf("bench: read the session leases: %w", err)
	}
	c.daemons[0].logf("scale: %s: %d model chunks in %.2f s (%.0f/s), sessions owned by %d daemon(s)", label, out.deltas, out.took.Seconds(), out.rate, out.owners)
	return out, nil
}

// check counts, per session, the chunks of its turn that its subscriber
// never received, and the ones it received twice.
func (c *scaleCluster) check(recs []*turnRecorder) (lost, dups int64) {
	for _, rec := range recs {
		lost += rec.missing()
		dups += rec.dups.Load()
	}
	return lost, dups
}

// scaleLatency is what the latency phase measured.
type scaleLatency struct {
	p50, p99, max time.Duration
	lost, dups    int64
}

// latency has each daemon own one session streaming a paced turn, watched
// on the owner and on the next daemon.
func (c *scaleCluster) latency(ctx context.Context) (scaleLatency, error) {
	var out scaleLatency
	n := len(c.daemons)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c.daemons[0].logf("scale: cross-daemon latency: %d sessions, %d paced deltas over %g s each", n, c.opts.PacedEvents, c.opts.PacedSec)
	ids := make([]string, n)
	bases := make([]int64, n)
	for d := range n {
		conn := c.conn(d, 0)
		sid, err := c.daemons[d].createSession(ctx, conn)
		if err != nil {
			return out, err
		}
		// A first turn through the owner takes the session's lease there.
		if err := runTurn(ctx, c.daemons[d], conn, sid, "warm up"); err != nil {
			return out, err
		}
		ids[d] = sid
		if bases[d], err = lastSeqStored(ctx, c.db, sid); err != nil {
			return out, err
		}
	}
	var owned int
	if err := c.db.QueryRow(ctx, `SELECT count(DISTINCT owner_id) FROM session_leases WHERE session_id = ANY($1)`, ids).Scan(&owned); err != nil {
		return out, fmt.Errorf("bench: read the session leases: %w", err)
	}
	if owned != n {
		return out, fmt.Errorf("bench: the %d latency sessions are owned by %d daemons, want one each", n, owned)
	}
	epoch := time.Now()
	local := make([]*turnRecorder, n)
	remote := make([]*turnRecorder, n)
	for d := range n {
		local[d] = newTurnRecorder(bases[d], c.opts.PacedEvents, epoch)
		remote[d] = newTurnRecorder(bases[d], c.opts.PacedEvents, epoch)
		if err := subscribeGRPC(ctx, c.conn(d, 1), ids[d], bases[d], newSlot(local[d])); err != nil {
			return out, err
		}
		if err := subscribeGRPC(ctx, c.conn((d+1)%n, 1), ids[d], bases[d], newSlot(remote[d])); err != nil {
			return out, err
		}
	}
	for d := range n {
		if _, err := prompt(ctx, c.conn(d, 0), ids[d], "scale-paced"); err != nil {
			return out, err
		}
	}
	if err := waitAll(ctx, append(append([]*turnRecorder{}, local...), remote...)); err != nil {
		return out, err
	}
	var ds []time.Duration
	for d := range n {
		for i := range local[d].arrivals {
			if a, b := remote[d].arrivals[i], local[d].arrivals[i]; a != 0 && b != 0 {
				ds = append(ds, time.Duration(a-b))
			}
		}
	}
	out.p50, out.p99, out.max = percentile(ds, 50), percentile(ds, 99), percentile(ds, 100)
	for _, recs := range [][]*turnRecorder{local, remote} {
		lost, dups := c.check(recs)
		out.lost += lost
		out.dups += dups
	}
	c.daemons[0].logf("scale: cross-daemon extra delay p50 %.2f ms, p99 %.2f ms over %d chunks", ms(out.p50), ms(out.p99), len(ds))
	return out, nil
}

// lastSeqStored returns a session's last seq in the database.
func lastSeqStored(ctx context.Context, db *pgx.Conn, sessionID string) (int64, error) {
	var seq int64
	if err := db.QueryRow(ctx, `SELECT COALESCE(max(seq), 0) FROM events WHERE session_id = $1`, sessionID).Scan(&seq); err != nil {
		return 0, fmt.Errorf("bench: read the last seq of %s: %w", sessionID, err)
	}
	return seq, nil
}

// scaleCPU is the CPU time used so far by the daemons, PostgreSQL's
// processes (by pid) and this process.
type scaleCPU struct {
	daemons, self time.Duration
	postgres      map[int]time.Duration
}

func (c *scaleCluster) cpu() scaleCPU {
	var out scaleCPU
	for _, h := range c.daemons {
		d, _ := procCPU(h.pid)
		out.daemons += d
	}
	out.postgres = postgresCPU()
	out.self, _ = procCPU(os.Getpid())
	return out
}

// cores converts the CPU used since before over took into cores.
func (after scaleCPU) cores(before scaleCPU, took time.Duration) (daemons, postgres, self float64) {
	s := took.Seconds()
	// PostgreSQL's CPU is summed per process alive at the end (a backend
	// started meanwhile counts whole); what processes that ended used is
	// missing.
	var pg time.Duration
	for pid, d := range after.postgres {
		pg += d - before.postgres[pid]
	}
	return ratio((after.daemons - before.daemons).Seconds(), s),
		ratio(pg.Seconds(), s),
		ratio((after.self - before.self).Seconds(), s)
}

// postgresCPU returns the CPU time of each of this machine's postgres
// processes (none when PostgreSQL runs elsewhere): the server and its
// backends, whatever database they serve.
func postgresCPU() map[int]time.Duration {
	out := map[int]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if d, err := procCPU(pid); err == nil {
			out[pid] = d
		}
	}
	return out
}

// freshDatabase creates an empty database trellis_bench_<random> on the
// server at dsn and returns a DSN naming it and a function that drops it
// (closing its connections).
func freshDatabase(ctx context.Context, dsn string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("bench: connect to PostgreSQL (%s): %w", redactDSN(dsn), err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 6)
	rand.Read(b)
	name := "trellis_bench_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		return "", nil, fmt.Errorf("bench: create database %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: database %s left behind: %v\n", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
			fmt.Fprintf(os.Stderr, "bench: database %s left behind: %v\n", name, err)
		}
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " dbname=" + name, drop, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("bench: the DSN is not a URL")
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// redactDSN hides a DSN's password.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		if strings.Contains(dsn, "password") {
			return "the DSN"
		}
		return dsn
	}
	return u.Redacted()
}

// freePort returns a TCP port free on the loopback interface now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
