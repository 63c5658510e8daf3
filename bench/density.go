package bench

import (
	"context"
	"fmt"
	"time"
)

// DensityOptions configure Density.
type DensityOptions struct {
	Daemon
	// Rate is each session's chunks per second (default 100, a real
	// model's pace) and Chunks the chunks of each session's turn (default
	// 1,000).
	Rate   int
	Chunks int
	// Start is the sessions of the first step (default 20); each step
	// doubles them, up to Max (default 1,280).
	Start int
	Max   int
	// P99LimitMs ends the ramp: a step whose added latency p99 passes it
	// (default 50 ms) is the first one the daemon does not carry.
	P99LimitMs float64
}

func (o *DensityOptions) defaults() {
	orDefault(&o.Rate, 100)
	orDefault(&o.Chunks, 1000)
	orDefault(&o.Start, 20)
	orDefault(&o.Max, 1280)
	orDefault(&o.P99LimitMs, 50)
}

// Density ramps paced sessions on one daemon: Start of them at once, each
// streaming Chunks chunks at Rate chunks/s through the real openai provider
// from a local OpenAI-compatible server to a WebSocket client of its own,
// then twice as many, until a step's added latency p99 (client receipt −
// the server's send of the same chunk) passes P99LimitMs, a chunk is lost,
// or Max, and then halves the bracket between the last step carried and the
// first one not, three times. It reports the sessions of the last step within the limit, the
// daemon's CPU per chunk and its cores there, sessions per daemon core, and
// RSS per live session (the daemon's RSS above its idle RSS). The model
// server and the clients run in the bench's process on the same machine.
func Density(ctx context.Context, opts DensityOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "density", Title: "paced sessions one daemon carries within an added-latency p99 limit",
		Params: []Param{{"rate", opts.Rate}, {"chunks", opts.Chunks}, {"start", opts.Start}, {"max", opts.Max},
			{"p99_limit_ms", opts.P99LimitMs}}}
	srv, h, _, stop, err := startModelDaemon(ctx, opts.Daemon, &r)
	if err != nil {
		return r, err
	}
	defer stop()
	every := time.Second / time.Duration(opts.Rate)
	if _, err := pacedRun(ctx, h, srv, 1, 50, every, "warm"); err != nil {
		return r, err
	}
	// What a live session costs is the RSS it adds: the daemon's own (its
	// code, pools, the store's cache) is there with no session at all.
	idleRSS, err := readRSS(h.pid)
	if err != nil {
		return r, err
	}
	r.figure("idle_rss_mib", float64(idleRSS)/(1<<20), "MiB", "daemon RSS after the warm-up, no session streaming")
	reached := 0
	var at pacedResult
	// step runs n sessions and reports whether they stayed within the limit.
	step := func(n int) bool {
		h.logf("density: %d sessions, %d chunks each at %v", n, opts.Chunks, every)
		res, err := pacedRun(ctx, h, srv, n, opts.Chunks, every, fmt.Sprintf("d%d", n))
		if err != nil {
			r.note("%d sessions: %v", n, err)
			return false
		}
		p50, p99 := ms(percentile(res.delays, 50)), ms(percentile(res.delays, 99))
		cpu := float64(res.cpu) / float64(time.Microsecond) / float64(len(res.delays))
		cores := res.cpu.Seconds() / res.took.Seconds()
		r.figure(fmt.Sprintf("s%d_p99_ms", n), p99, "ms", fmt.Sprintf("%d sessions: added latency p99 (p50 %.1f ms)", n, p50))
		r.figure(fmt.Sprintf("s%d_cpu_us_per_chunk", n), cpu, "µs", fmt.Sprintf("%d sessions: daemon CPU per chunk (%.2f cores)", n, cores))
		if p99 > opts.P99LimitMs {
			r.note("%d sessions: p99 %.1f ms passes the %.0f ms limit", n, p99, opts.P99LimitMs)
			return false
		}
		if n > reached {
			reached, at = n, res
		}
		return true
	}
	failed := 0
	for n := opts.Start; n <= opts.Max; n *= 2 {
		if !step(n) {
			failed = n
			break
		}
	}
	// Doubling brackets the limit between the last step carried and the
	// first one not: halving that bracket three times finds the count
	// within an eighth of it.
	for lo, hi, i := reached, failed, 0; lo > 0 && hi > lo+1 && i < 3; i++ {
		mid := (lo + hi) / 2
		if step(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	r.figure("sessions", float64(reached), "sessions", fmt.Sprintf("paced sessions carried within the p99 limit (steps from %d, doubling, then halving the bracket)", opts.Start))
	if reached > 0 {
		cores := at.cpu.Seconds() / at.took.Seconds()
		r.figure("cpu_us_per_chunk", float64(at.cpu)/float64(time.Microsecond)/float64(len(at.delays)), "µs", "daemon CPU per chunk at that step")
		r.figure("daemon_cores", cores, "cores", "daemon CPU at that step")
		r.figure("sessions_per_core", float64(reached)/cores, "sessions", "sessions ÷ the daemon's CPU share at that step")
		r.figure("rss_per_session_kib", float64(at.peakRSS-idleRSS)/1024/float64(reached), "KiB", "daemon peak RSS above its idle RSS ÷ sessions at that step")
	}
	r.target("sessions", ">=", 200)
	r.finish()
	return r, nil
}
