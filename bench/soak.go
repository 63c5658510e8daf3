package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
)

// SoakOptions configure Soak.
type SoakOptions struct {
	Daemon
	// Sessions is how many sessions live and die over the soak (default
	// 2,000).
	Sessions int
	// Duration is how long the soak spreads them over (default 10 min):
	// session i starts no earlier than i × Duration/Sessions after the
	// first.
	Duration time.Duration
	// Concurrency is how many sessions are in flight at most (default 16).
	Concurrency int
	// Conns is how many long-lived WebSocket connections carry the
	// sessions (default 4).
	Conns int
	// FreshConnEvery puts every n-th session on a connection of its own,
	// opened before it and closed after it (default 10; 1 gives every
	// session one).
	FreshConnEvery int
	// Deltas is how many model chunks each session's turn streams
	// (default 50), over TurnSec seconds (default 1).
	Deltas  int
	TurnSec float64
	// SampleEvery is the time between two readings of the daemon
	// (default 5 s).
	SampleEvery time.Duration
	// Settle is how long the daemon idles before the readings taken
	// before and after the load (default 3 s).
	Settle time.Duration
	// Tolerance is the growth a flat reading may show: the last window's
	// median at most (1+Tolerance) × the settled one's, and the idle
	// reading after the load at most (1+Tolerance) × the one before
	// (default 0.1).
	Tolerance float64
}

func (o *SoakOptions) defaults() {
	orDefault(&o.Sessions, 2000)
	orDefault(&o.Duration, 10*time.Minute)
	orDefault(&o.Concurrency, 16)
	orDefault(&o.Conns, 4)
	orDefault(&o.FreshConnEvery, 10)
	orDefault(&o.Deltas, 50)
	orDefault(&o.TurnSec, 1)
	orDefault(&o.SampleEvery, 5*time.Second)
	orDefault(&o.Settle, 3*time.Second)
	orDefault(&o.Tolerance, 0.1)
}

// soakSample is one reading of the daemon during the soak.
type soakSample struct {
	at   time.Duration // since the load started
	done int64         // sessions finished by then
	// The readings, by soakMetrics' names.
	v [len(soakMetrics)]float64
}

// soakMetrics are what the soak reads of the daemon: its resident set
// and open descriptors from /proc (from outside, as an operator would),
// its goroutines and Go heap from its /metrics.
var soakMetrics = [...]struct{ name, unit, label string }{
	{"rss", "MiB", "resident set (/proc/<pid>/status VmRSS)"},
	{"goroutines", "goroutines", "goroutines (/metrics go_goroutines)"},
	{"fds", "fds", "open descriptors (/proc/<pid>/fd)"},
	{"heap", "MiB", "Go heap in use (/metrics go_memstats_heap_inuse_bytes)"},
}

// soakSession is what one session's client received.
type soakSession struct {
	mu      sync.Mutex
	seen    map[int64]bool
	dups    int
	deltas  int
	doneSeq int64
	done    chan struct{}
}

// Soak runs many short sessions through the WebSocket facade for a long
// time and watches whether the daemon's resources stay flat: Sessions
// sessions over Duration, at most Concurrency at once, each created,
// prompted (its turn streams Deltas chunks over TurnSec seconds), followed
// to its turn.done, closed, and — every other one — deleted. Most ride
// Conns long-lived connections, the rest one connection each. Every
// SampleEvery it reads the daemon's RSS, goroutines, open descriptors and
// Go heap. A warm-up round of Concurrency sessions comes first. It reports, for each, the median of the first window (a tenth
// of Duration), of the second (the settled level, after the first's
// warm-up) and of the last, the slope after the warm-up, and idle readings
// before and after the load; flat is the last window within Tolerance of
// the settled one and the idle reading after within Tolerance of the one
// before. It also checks what each client received: every seq up to
// turn.done, once, and every model chunk.
func Soak(ctx context.Context, opts SoakOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "soak", Title: "sessions created, prompted, closed and deleted for a long time: do the daemon's resources stay flat",
		Params: []Param{{"sessions", opts.Sessions}, {"duration_s", opts.Duration.Seconds()}, {"concurrency", opts.Concurrency},
			{"conns", opts.Conns}, {"fresh_conn_every", opts.FreshConnEvery}, {"deltas_per_turn", opts.Deltas},
			{"turn_sec", opts.TurnSec}, {"sample_every_s", opts.SampleEvery.Seconds()}, {"tolerance", opts.Tolerance}}}
	if err := raiseOpenFiles(uint64(4*opts.Concurrency + 4096)); err != nil {
		return r, err
	}
	h, err := opts.Daemon.start(ctx, streamScript(scriptStep{match: "stream", deltas: opts.Deltas, delaySec: opts.TurnSec}))
	if err != nil {
		return r, err
	}
	defer h.close()
	r.param("daemon", h.describe())

	var recs sync.Map // session id → *soakSession
	onEvent := func(ev eventRef, _ time.Time) {
		v, ok := recs.Load(ev.SessionID)
		if !ok {
			return
		}
		rec := v.(*soakSession)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.seen[ev.Seq] {
			rec.dups++
		}
		rec.seen[ev.Seq] = true
		switch ev.Kind {
		case eventkind.MessageDelta:
			rec.deltas += len(deltaIndexes(ev.raw))
		case eventkind.TurnDone:
			if rec.doneSeq == 0 {
				rec.doneSeq = ev.Seq
				close(rec.done)
			}
		}
	}
	conns := make([]*wsClient, opts.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = h.dialWS(ctx, onEvent); err != nil {
			return r, err
		}
	}

	var tally soakTally // the load's sessions (not the warm-up's)
	// one is the life of session i, counted in tally.
	one := func(ctx context.Context, i int, tally *soakTally) error {
		c := conns[i%len(conns)]
		if i%opts.FreshConnEvery == 0 {
			fc, err := h.dialWS(ctx, onEvent)
			if err != nil {
				return err
			}
			defer fc.close()
			c = fc
			tally.fresh.Add(1)
		}
		var created struct {
			SessionID string `json:"sessionId"`
		}
		if err := c.call(ctx, "session.create", map[string]any{"workdir": h.workdir}, &created); err != nil {
			return err
		}
		id := created.SessionID
		rec := &soakSession{seen: map[int64]bool{}, done: make(chan struct{})}
		recs.Store(id, rec)
		defer recs.Delete(id)
		if err := c.call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "stream"}, nil); err != nil {
			return err
		}
		select {
		case <-rec.done:
		case <-ctx.Done():
			return fmt.Errorf("bench: session %s: no turn.done: %w", id, ctx.Err())
		}
		if err := c.call(ctx, "session.close", map[string]any{"sessionId": id}, nil); err != nil {
			return err
		}
		if i%2 == 1 {
			var del struct {
				Deleted int `json:"deleted"`
			}
			if err := c.call(ctx, "session.deleteSaved", map[string]any{"sessionId": id}, &del); err != nil {
				return err
			}
			tally.deleted.Add(int64(del.Deleted))
		}
		rec.mu.Lock()
		for seq := int64(1); seq <= rec.doneSeq; seq++ {
			if !rec.seen[seq] {
				tally.lost.Add(1)
			}
		}
		tally.events.Add(int64(len(rec.seen)))
		tally.deltas.Add(int64(rec.deltas))
		tally.dups.Add(int64(rec.dups))
		rec.mu.Unlock()
		tally.done.Add(1)
		return nil
	}

	read := func(at time.Duration) (soakSample, error) {
		s := soakSample{at: at, done: tally.done.Load()}
		m, err := h.scrapeMetrics(ctx, "go_goroutines", "go_memstats_heap_inuse_bytes")
		if err != nil {
			return s, err
		}
		rss, err := readRSS(h.pid)
		if err != nil {
			return s, err
		}
		fds, err := openFiles(h.pid)
		if err != nil {
			return s, err
		}
		s.v = [len(soakMetrics)]float64{float64(rss) / (1 << 20), m["go_goroutines"], float64(fds), m["go_memstats_heap_inuse_bytes"] / (1 << 20)}
		return s, nil
	}
	idle := func() (soakSample, error) {
		time.Sleep(opts.Settle)
		if h.inProcess {
			runtime.GC()
			debug.FreeOSMemory()
		}
		return read(0)
	}
	// A warm-up round, as many sessions at once as the load will have, so
	// that what the daemon builds once (pools, lazily started workers) is
	// in the idle reading before the load.
	var warm soakTally
	wg, wctx := errgroup.WithContext(ctx)
	for i := range opts.Concurrency {
		wg.Go(func() error { return one(wctx, i, &warm) })
	}
	if err := wg.Wait(); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	before, err := idle()
	if err != nil {
		return r, err
	}
	h.logf("soak: idle before: %s", before.describe())

	h.logf("soak: %d sessions over %s, at most %d at once", opts.Sessions, opts.Duration, opts.Concurrency)
	var samples []soakSample
	start := time.Now()
	loadCtx, cancel := context.WithTimeout(ctx, opts.Duration+10*time.Minute)
	defer cancel()
	g, gctx := errgroup.WithContext(loadCtx)
	var next atomic.Int64
	interval := opts.Duration / time.Duration(opts.Sessions)
	for range opts.Concurrency {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= opts.Sessions {
					return nil
				}
				select {
				case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
				case <-gctx.Done():
					return gctx.Err()
				}
				if err := one(gctx, i, &tally); err != nil {
					return fmt.Errorf("session %d of %d: %w", i+1, opts.Sessions, err)
				}
			}
		})
	}
	loadDone := make(chan error, 1)
	go func() { loadDone <- g.Wait() }()
	tick := time.NewTicker(opts.SampleEvery)
	defer tick.Stop()
	var loadErr error
sampling:
	for {
		select {
		case loadErr = <-loadDone:
			break sampling
		case <-tick.C:
			s, err := read(time.Since(start))
			if err != nil {
				cancel()
				<-loadDone
				return r, err
			}
			samples = append(samples, s)
			h.logf("soak: %s", s.describe())
		}
	}
	took := time.Since(start)
	if loadErr != nil {
		return r, loadErr
	}
	after, err := idle()
	if err != nil {
		return r, err
	}
	h.logf("soak: idle after: %s", after.describe())

	r.figure("sessions_done", float64(tally.done.Load()), "sessions", "sessions created, prompted, followed to turn.done and closed")
	r.figure("sessions_deleted", float64(tally.deleted.Load()), "sessions", "of them deleted (session.deleteSaved)")
	r.figure("fresh_conns", float64(tally.fresh.Load()), "connections", "of them on a connection of their own")
	r.figure("wall_s", took.Seconds(), "s", "first session → last session done")
	r.figure("events", float64(tally.events.Load()), "events", "events received, all sessions")
	r.figure("deltas", float64(tally.deltas.Load()), "deltas", "model chunks received, all sessions")
	r.figure("lost", float64(tally.lost.Load()), "events", "seqs up to turn.done a client never received")
	r.figure("duplicated", float64(tally.dups.Load()), "events", "events received twice")
	r.figure("samples", float64(len(samples)), "samples", "readings during the load")
	window := opts.Duration / 10
	first := soakWindow(samples, 0, window)
	settled := soakWindow(samples, window, 2*window)
	last := soakWindow(samples, took-window, took+1)
	for k, m := range soakMetrics {
		r.figure(m.name+"_idle_before", before.v[k], m.unit, "idle before the load: "+m.label)
		r.figure(m.name+"_first", first.median(k), m.unit, "first window, median")
		r.figure(m.name+"_settled", settled.median(k), m.unit, "second window (settled), median")
		r.figure(m.name+"_last", last.median(k), m.unit, "last window, median")
		r.figure(m.name+"_slope_per_min", soakSlope(samples, window, k), m.unit+"/min", "slope after the first window (least squares)")
		r.figure(m.name+"_idle_after", after.v[k], m.unit, "idle after the load")
		r.figure(m.name+"_last_vs_settled", ratio(last.median(k), settled.median(k)), "ratio", "last window ÷ settled")
		r.target(m.name+"_last_vs_settled", "<=", 1+opts.Tolerance)
		if m.name != "rss" && m.name != "heap" {
			// A Go process keeps freed memory a while, so an idle RSS or
			// heap after the load says little; goroutines and descriptors
			// come back.
			r.figure(m.name+"_idle_after_vs_before", ratio(after.v[k], before.v[k]), "ratio", "idle after ÷ idle before")
			r.target(m.name+"_idle_after_vs_before", "<=", 1+opts.Tolerance)
		}
	}
	r.target("sessions_done", "==", float64(opts.Sessions))
	r.target("lost", "==", 0)
	r.target("duplicated", "==", 0)
	r.note("windows are a tenth of the duration (%s); figures are medians of the readings in them", window)
	if h.inProcess {
		r.note("daemon in this process: its readings include the bench's clients; idle readings follow a forced GC")
	}
	r.finish()
	return r, nil
}

// soakTally counts what the sessions of a soak did and received.
type soakTally struct {
	done, deleted, fresh, events, deltas, lost, dups atomic.Int64
}

// soakSamples are readings in one window.
type soakSamples []soakSample

// soakWindow returns the samples taken in [from, to), or, when the
// sampler fell behind and took none there (a slow reading on a loaded
// machine, or under the race detector), the one taken nearest the window,
// so that every window has a figure.
func soakWindow(ss []soakSample, from, to time.Duration) soakSamples {
	var out soakSamples
	nearest, gap := -1, time.Duration(0)
	for i, s := range ss {
		if s.at >= from && s.at < to {
			out = append(out, s)
		}
		d := max(from-s.at, s.at-to+1, 0)
		if nearest < 0 || d < gap {
			nearest, gap = i, d
		}
	}
	if len(out) == 0 && nearest >= 0 {
		out = append(out, ss[nearest])
	}
	return out
}

// median is the median of metric k over the window; 0 for none.
func (ss soakSamples) median(k int) float64 {
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = s.v[k]
	}
	return median(vs)
}

// soakSlope is the least-squares slope of metric k, per minute, over the
// samples taken from `from` on; 0 for fewer than two.
func soakSlope(ss []soakSample, from time.Duration, k int) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		if s.at < from {
			continue
		}
		x := s.at.Minutes()
		n++
		sx += x
		sy += s.v[k]
		sxx += x * x
		sxy += x * s.v[k]
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

func (s soakSample) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.0fs %5d sessions done", s.at.Seconds(), s.done)
	for k, m := range soakMetrics {
		fmt.Fprintf(&b, ", %s %.1f", m.name, s.v[k])
	}
	return b.String()
}

// openFiles counts the open descriptors of a process (/proc/<pid>/fd).
func openFiles(pid int) (int, error) {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0, fmt.Errorf("bench: count the daemon's open files: %w", err)
	}
	return len(es), nil
}

// scrapeMetrics reads the named unlabelled metrics from the daemon's
// GET /metrics (Prometheus text).
func (h *daemonHandle) scrapeMetrics(ctx context.Context, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(h.httpPort)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: read the daemon's metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: read the daemon's metrics: %s", res.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					return nil, fmt.Errorf("bench: metric %s: %w", n, err)
				}
				out[n] = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: read the daemon's metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("bench: the daemon's metrics have no %s", n)
		}
	}
	return out, nil
}
