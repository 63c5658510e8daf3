package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// ConnsOptions configure Conns.
type ConnsOptions struct {
	Daemon
	// Conns is how many idle, authenticated WebSocket connections to open
	// (default 10,000).
	Conns int
	// Parallel is how many handshakes run at once (default 64).
	Parallel int
	// Settle is how long the connections sit idle before the daemon's RSS
	// is read (default 3 s).
	Settle time.Duration
}

func (o *ConnsOptions) defaults() {
	orDefault(&o.Conns, 10_000)
	orDefault(&o.Parallel, 64)
	orDefault(&o.Settle, 3*time.Second)
}

// Conns measures the daemon's memory per idle connection: its resident set
// (VmRSS of /proc/<pid>/status) before and after Conns WebSocket clients
// connected and completed system.hello, divided by Conns. The process's
// open-file limit is raised first (a child daemon inherits it). With the
// daemon in this process the clients' memory is in the same RSS: the bench
// then forces a garbage collection before each reading and reports the
// figure as an upper bound; a child process (Daemon.Command) or a running
// daemon (Daemon.Home) gives the daemon's own figure.
func Conns(ctx context.Context, opts ConnsOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "conns", Title: "daemon memory per idle authenticated WebSocket connection"}
	r.param("conns", opts.Conns)
	fds := uint64(opts.Conns + 4096)
	if opts.Home == "" && len(opts.Command) == 0 {
		fds += uint64(opts.Conns) // both ends are ours
	}
	if err := raiseOpenFiles(fds); err != nil {
		return r, err
	}
	h, driver, err := opts.Daemon.startDriven(ctx, &r, nil)
	if err != nil {
		return r, err
	}
	defer h.close()

	// One connection first, so that what every connection shares (the
	// facade's gRPC channel, lazily built tables) is in the baseline.
	warm, err := h.dialWS(ctx, nil)
	if err != nil {
		return r, err
	}
	defer warm.close()
	before, err := h.settledRSS(opts.Settle)
	if err != nil {
		return r, err
	}
	h.logf("conns: daemon RSS %d KiB; opening %d connections", before>>10, opts.Conns)

	conns := make([]*wsClient, opts.Conns)
	defer func() {
		var wg sync.WaitGroup
		for _, c := range conns {
			if c != nil {
				wg.Add(1)
				go func() { defer wg.Done(); c.close() }()
			}
		}
		wg.Wait()
	}()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Parallel)
	for i := range conns {
		g.Go(func() error {
			c, err := h.dialWS(gctx, nil)
			if err != nil {
				return fmt.Errorf("connection %d: %w", i+1, err)
			}
			conns[i] = c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	took := time.Since(start)
	info, err := trellisv1.NewSystemServiceClient(driver).Info(ctx, &trellisv1.InfoRequest{})
	if err != nil {
		return r, err
	}
	after, err := h.settledRSS(opts.Settle)
	if err != nil {
		return r, err
	}
	h.logf("conns: daemon RSS %d KiB with %d connections (it counts %d)", after>>10, opts.Conns, info.GetCounters().GetConnections())

	per := float64(after-before) / float64(opts.Conns)
	r.figure("rss_before_bytes", float64(before), "bytes", "daemon RSS, 1 connection")
	r.figure("rss_after_bytes", float64(after), "bytes", fmt.Sprintf("daemon RSS, %d more connections", opts.Conns))
	r.figure("bytes_per_conn", per, "bytes", "RSS per idle connection")
	r.figure("kib_per_conn", per/1024, "KiB", "RSS per idle connection")
	r.figure("counted_conns", float64(info.GetCounters().GetConnections()), "connections", "connections the daemon counts")
	r.figure("handshakes_per_s", rate(int64(opts.Conns), took), "conns/s", "connect + system.hello rate")
	r.target("kib_per_conn", "<=", 32)
	if h.inProcess {
		r.note("daemon in this process: the figure includes the bench's own client side of each connection (an upper bound); readings follow a forced GC")
	}
	r.finish()
	return r, nil
}

// settledRSS waits, then reads the daemon's resident set size. In process,
// it first collects garbage and returns freed memory to the system, so that
// the reading is what is live.
func (h *daemonHandle) settledRSS(settle time.Duration) (int64, error) {
	time.Sleep(settle)
	if h.inProcess {
		runtime.GC()
		debug.FreeOSMemory()
	}
	return readRSS(h.pid)
}
