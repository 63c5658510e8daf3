package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"google.golang.org/grpc"
)

// FanoutOptions configure Fanout.
type FanoutOptions struct {
	Daemon
	// Clients is how many clients subscribe to the session (default 100).
	Clients int
	// Events is how many model chunks the throughput turn streams, as fast
	// as the daemon takes them (default 20,000); the daemon merges chunks
	// that wait for one commit into one message.delta event.
	Events int
	// PacedEvents is how many model chunks the latency turn streams over
	// PacedSec seconds, a rate both kinds of subscribers keep
	// up with (defaults 1,000 over 4 s).
	PacedEvents int
	PacedSec    float64
	// Rounds repeats both phases; each figure is the median over rounds
	// (default 1).
	Rounds int
	// Sessions, when above 1, measures that many streaming sessions with
	// one client each instead of one session with Clients clients; Events
	// is then shared among the sessions (at least 1,000 each).
	Sessions int
}

func (o *FanoutOptions) defaults() {
	orDefault(&o.Clients, 100)
	orDefault(&o.Events, 20_000)
	orDefault(&o.Rounds, 1)
	orDefault(&o.PacedEvents, 1000)
	orDefault(&o.PacedSec, 4)
}

// Fanout measures the WebSocket facade against direct gRPC: one session
// streams to Clients direct SessionService.Subscribe streams (one gRPC
// connection each), then to Clients WebSocket clients that resumed it. In
// each phase a first turn streams Events deltas as fast as the daemon takes
// them: throughput is the model chunks delivered to all clients per second
// (counted in the text of the message.delta events), from the prompt to the
// last client's turn.done. A second turn streams
// PacedEvents deltas over PacedSec seconds, which both kinds of clients keep
// up with: the latency the facade adds is read there, against a reference
// gRPC subscriber present in both phases (each delivery's delay behind the
// reference's arrival of the same chunk; facade percentile minus direct
// percentile). The delays of the throughput turn are reported too: they are
// mostly the backlog of clients that cannot keep up.
func Fanout(ctx context.Context, opts FanoutOptions) (Result, error) {
	opts.defaults()
	if opts.Sessions > 1 {
		return fanoutSessions(ctx, opts)
	}
	r := Result{Bench: "fanout", Title: "WebSocket facade vs direct gRPC, one streaming session",
		Params: []Param{{"clients", opts.Clients}, {"events_per_turn", opts.Events}, {"rounds", opts.Rounds},
			{"paced_events", opts.PacedEvents}, {"paced_sec", opts.PacedSec}}}
	h, driver, sid, err := opts.Daemon.startSession(ctx, &r, streamScript(
		scriptStep{match: "fanout-paced", deltas: opts.PacedEvents, delaySec: opts.PacedSec},
		scriptStep{match: "fanout", deltas: opts.Events}), true)
	if err != nil {
		return r, err
	}
	defer h.close()
	// A short turn first, so that both phases find a warm daemon.
	if err := runTurn(ctx, h, driver, sid, "warm up"); err != nil {
		return r, err
	}

	d, f, err := alternateRounds(h, opts.Rounds,
		fmt.Sprintf("%d direct gRPC subscribers", opts.Clients), fmt.Sprintf("%d WebSocket clients", opts.Clients),
		func(viaWS bool) (phaseResult, error) { return fanoutPhase(ctx, h, driver, sid, opts, viaWS) })
	if err != nil {
		return r, err
	}
	r.figure("direct_deltas_per_s", d.rate, "deltas/s", "direct gRPC, all clients")
	r.figure("facade_deltas_per_s", f.rate, "deltas/s", "WebSocket facade, all clients")
	r.figure("ratio", ratio(f.rate, d.rate), "facade/direct", "facade / direct")
	r.figure("added_p50_ms", ms(f.p50-d.p50), "ms", "latency the facade adds p50 (paced)")
	r.figure("added_p99_ms", ms(f.p99-d.p99), "ms", "latency the facade adds p99 (paced)")
	r.figure("direct_delay_p50_ms", ms(d.p50), "ms", "direct delay behind reference p50 (paced)")
	r.figure("direct_delay_p99_ms", ms(d.p99), "ms", "direct delay behind reference p99 (paced)")
	r.figure("facade_delay_p50_ms", ms(f.p50), "ms", "facade delay behind reference p50 (paced)")
	r.figure("facade_delay_p99_ms", ms(f.p99), "ms", "facade delay behind reference p99 (paced)")
	r.figure("direct_backlog_p99_ms", ms(d.backlog99), "ms", "direct delay p99, throughput turn")
	r.figure("facade_backlog_p99_ms", ms(f.backlog99), "ms", "facade delay p99, throughput turn")
	r.figure("direct_cpu_cores", d.cores, "cores", cpuLabel(h)+", direct throughput turn")
	r.figure("facade_cpu_cores", f.cores, "cores", cpuLabel(h)+", facade throughput turn")
	if !h.inProcess {
		r.figure("direct_client_cpu_cores", d.clientCores, "cores", "CPU used by the bench's clients, direct")
		r.figure("facade_client_cpu_cores", f.clientCores, "cores", "CPU used by the bench's clients, facade")
	}
	r.figure("lost", float64(d.lost+f.lost), "deltas", "model chunks lost or duplicated")
	r.target("ratio", ">=", 0.9) // issue 12: facade ÷ direct gRPC at 100 clients on one session
	r.target("lost", "==", 0)
	if h.inProcess {
		r.note("daemon and %d clients share this process and its %d cores", opts.Clients, runtime.NumCPU())
	}
	r.finish()
	return r, nil
}

// phaseResult is one phase of Fanout.
type phaseResult struct {
	rate        float64
	p50, p99    time.Duration // delays of the paced turn
	backlog99   time.Duration // p99 delay of the throughput turn
	lost        int64
	cores       float64 // CPU the daemon (or this process) used, throughput turn
	clientCores float64 // CPU the clients used (child daemon only)
}

func medianPhase(ps []phaseResult) phaseResult {
	var out phaseResult
	var rates, p50s, p99s, backlogs, cores, clientCores []float64
	for _, p := range ps {
		rates = append(rates, p.rate)
		cores = append(cores, p.cores)
		clientCores = append(clientCores, p.clientCores)
		p50s = append(p50s, float64(p.p50))
		p99s = append(p99s, float64(p.p99))
		backlogs = append(backlogs, float64(p.backlog99))
		out.lost = max(out.lost, p.lost)
	}
	out.rate = median(rates)
	out.cores, out.clientCores = median(cores), median(clientCores)
	out.p50, out.p99 = time.Duration(median(p50s)), time.Duration(median(p99s))
	out.backlog99 = time.Duration(median(backlogs))
	return out
}

// fanoutPhase subscribes Clients subscribers of one kind, plus the
// reference, and runs the throughput turn, then the paced turn.
func fanoutPhase(ctx context.Context, h *daemonHandle, driver *grpc.ClientConn, sid string, opts FanoutOptions, viaWS bool) (phaseResult, error) {
	var out phaseResult
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	base, err := lastSeq(ctx, driver, sid)
	if err != nil {
		return out, err
	}
	refSlot := newSlot(nil)
	slots := make([]*recorderSlot, opts.Clients)
	refConn, err := h.dialGRPC()
	if err != nil {
		return out, err
	}
	defer refConn.Close()
	if err := subscribeGRPC(ctx, refConn, sid, base, refSlot); err != nil {
		return out, err
	}
	for i := range slots {
		slots[i] = newSlot(nil)
		if viaWS {
			c, err := h.subscribeWS(ctx, sid, base, slots[i])
			if err != nil {
				return out, err
			}
			defer c.close()
			continue
		}
		conn, err := h.dialGRPC()
		if err != nil {
			return out, err
		}
		defer conn.Close()
		if err := subscribeGRPC(ctx, conn, sid, base, slots[i]); err != nil {
			return out, err
		}
	}

	// The throughput turn.
	t, err := measuredTurn(ctx, h, driver, sid, "fanout", base, opts.Events, refSlot, slots)
	if err != nil {
		return out, err
	}
	out.rate, out.lost = t.rate, t.lost
	out.cores, out.clientCores = ratio(t.cpu.Seconds(), t.took.Seconds()), ratio(t.own.Seconds(), t.took.Seconds())
	_, out.backlog99 = t.delays()

	// The paced turn.
	if base, err = lastSeq(ctx, driver, sid); err != nil {
		return out, err
	}
	p, err := measuredTurn(ctx, h, driver, sid, "fanout-paced", base, opts.PacedEvents, refSlot, slots)
	if err != nil {
		return out, err
	}
	out.lost += p.lost
	out.p50, out.p99 = p.delays()
	return out, nil
}

// turnMeasure is what one measured turn recorded.
type turnMeasure struct {
	ref  *turnRecorder
	recs []*turnRecorder
	rate float64       // chunks delivered per second, all clients
	lost int64         // chunks missing or duplicated
	cpu  time.Duration // CPU the daemon (or this process) used
	own  time.Duration // CPU this process used (the clients, for a child daemon)
	took time.Duration // prompt → last turn.done
}

// delays returns the p50 and p99 of every delivery's delay behind the
// reference subscriber's arrival of the same chunk.
func (t turnMeasure) delays() (p50, p99 time.Duration) {
	var ds []time.Duration
	for _, rec := range t.recs {
		for i := range rec.arrivals {
			if a, b := rec.arrivals[i], t.ref.arrivals[i]; a != 0 && b != 0 {
				ds = append(ds, time.Duration(a-b))
			}
		}
	}
	return percentile(ds, 50), percentile(ds, 99)
}

// measuredTurn puts fresh recorders in the slots, prompts text and waits
// until every subscriber has the turn's turn.done.
func measuredTurn(ctx context.Context, h *daemonHandle, driver *grpc.ClientConn, sid, text string, base int64, expected int, refSlot *recorderSlot, slots []*recorderSlot) (turnMeasure, error) {
	var m turnMeasure
	epoch := time.Now()
	m.ref = newTurnRecorder(base, expected, epoch)
	refSlot.Store(m.ref)
	m.recs = make([]*turnRecorder, len(slots))
	for i, s := range slots {
		m.recs[i] = newTurnRecorder(base, expected, epoch)
		s.Store(m.recs[i])
	}
	cpu0, _ := procCPU(h.pid)
	own0, _ := procCPU(os.Getpid())
	start := time.Now()
	if _, err := prompt(ctx, driver, sid, text); err != nil {
		return m, err
	}
	if err := waitAll(ctx, append(append([]*turnRecorder{}, m.recs...), m.ref)); err != nil {
		return m, err
	}
	cpu1, _ := procCPU(h.pid)
	own1, _ := procCPU(os.Getpid())
	m.cpu, m.own = cpu1-cpu0, own1-own0
	var end, delivered int64
	for _, rec := range m.recs {
		end = max(end, rec.doneAt.Load())
		delivered += rec.received.Load()
	}
	m.took = epoch.Add(time.Duration(end)).Sub(start)
	m.rate = rate(delivered, m.took)
	for _, rec := range m.recs {
		m.lost += rec.missing() + rec.dups.Load()
	}
	return m, nil
}

// runTurn prompts text and waits for the turn's turn.done through a gRPC
// subscription.
func runTurn(ctx context.Context, h *daemonHandle, driver *grpc.ClientConn, sid, text string) error {
	base, err := lastSeq(ctx, driver, sid)
	if err != nil {
		return err
	}
	conn, err := h.dialGRPC()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	rec := newTurnRecorder(base, 0, time.Now())
	if err := subscribeGRPC(ctx, conn, sid, base, newSlot(rec)); err != nil {
		return err
	}
	if _, err := prompt(ctx, driver, sid, text); err != nil {
		return err
	}
	return waitAll(ctx, []*turnRecorder{rec})
}

// describe says where the daemon runs, for the params.
func (h *daemonHandle) describe() string {
	switch {
	case h.inProcess:
		return "in-process"
	case h.fresh:
		return fmt.Sprintf("child pid %d", h.pid)
	}
	return "running " + h.home
}

// alternateRounds runs phase rounds times, direct gRPC then WebSocket in
// each round (so that both see the same machine), and returns the median
// phase of each way.
func alternateRounds(h *daemonHandle, rounds int, directLabel, wsLabel string, phase func(viaWS bool) (phaseResult, error)) (direct, facade phaseResult, err error) {
	var ds, fs []phaseResult
	for round := 0; round < rounds; round++ {
		h.logf("fanout round %d: %s", round+1, directLabel)
		d, err := phase(false)
		if err != nil {
			return direct, facade, err
		}
		ds = append(ds, d)
		h.logf("fanout round %d: %s", round+1, wsLabel)
		f, err := phase(true)
		if err != nil {
			return direct, facade, err
		}
		fs = append(fs, f)
	}
	return medianPhase(ds), medianPhase(fs), nil
}
