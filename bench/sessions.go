package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
)

// SessionsOptions configure Sessions.
type SessionsOptions struct {
	Daemon
	// Sessions is how many sessions stream at once (default 1,000).
	Sessions int
	// Deltas is how many model chunks each session's turn streams
	// (default 300).
	Deltas int
	// StreamSec is how long each turn takes to stream its deltas, like a
	// model producing tokens (default 10 s; 0 < StreamSec). Unpaced sends
	// them as fast as the daemon takes them instead.
	StreamSec float64
	// Unpaced streams without delays, to find the daemon's capacity.
	Unpaced bool
	// Conns is how many WebSocket connections carry the sessions, each
	// the origin of Sessions/Conns of them (default 50).
	Conns int
}

func (o *SessionsOptions) defaults() {
	orDefault(&o.Sessions, 1000)
	orDefault(&o.Deltas, 300)
	orDefault(&o.StreamSec, 10)
	if o.Unpaced {
		o.StreamSec = 0
	}
	orDefault(&o.Conns, 50)
	o.Conns = min(o.Conns, o.Sessions)
}

// sessionRec is what one session's client received.
type sessionRec struct {
	mu       sync.Mutex
	seen     map[int64]bool
	dups     int
	deltas   int             // model chunks in the text of its message.delta events
	latency  []time.Duration // message.delta: arrival − the daemon's ts
	doneAt   time.Time
	done     chan struct{}
	doneOnce sync.Once
}

// Sessions measures many sessions streaming at once through the WebSocket
// facade: Sessions sessions spread over Conns connections are prompted
// together; each turn streams Deltas deltas over StreamSec seconds. It
// reports the aggregate event rate, the delay of each message.delta
// from the daemon's timestamp to its arrival (the timestamp has millisecond
// precision and is taken when the event is queued, so the delay includes the
// durable commit), and the events lost: for every session, the seqs up to
// its final seq (from session.list) that its client never received, plus
// duplicates.
func Sessions(ctx context.Context, opts SessionsOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "sessions", Title: "many sessions streaming at once through the WebSocket facade",
		Params: []Param{{"sessions", opts.Sessions}, {"deltas_per_session", opts.Deltas},
			{"stream_sec", opts.StreamSec}, {"conns", opts.Conns}}}
	if err := raiseOpenFiles(uint64(2*opts.Conns + 4096)); err != nil {
		return r, err
	}
	h, err := opts.Daemon.start(ctx, streamScript(scriptStep{match: "stream", deltas: opts.Deltas, delaySec: opts.StreamSec}))
	if err != nil {
		return r, err
	}
	defer h.close()
	r.param("daemon", h.describe())

	var recs sync.Map // session id → *sessionRec
	onEvent := func(ev eventRef, at time.Time) {
		v, ok := recs.Load(ev.SessionID)
		if !ok {
			return
		}
		rec := v.(*sessionRec)
		var lat time.Duration
		var chunks int
		if ev.Kind == eventkind.MessageDelta {
			if ts, err := time.Parse(time.RFC3339Nano, ev.TS); err == nil {
				lat = at.Sub(ts)
			}
			chunks = len(deltaIndexes(ev.raw))
		}
		rec.mu.Lock()
		if rec.seen[ev.Seq] {
			rec.dups++
		}
		rec.seen[ev.Seq] = true
		if ev.Kind == eventkind.MessageDelta {
			rec.latency = append(rec.latency, lat)
			rec.deltas += chunks
		}
		rec.mu.Unlock()
		if ev.Kind == eventkind.TurnDone {
			rec.doneOnce.Do(func() {
				rec.mu.Lock()
				rec.doneAt = at
				rec.mu.Unlock()
				close(rec.done)
			})
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

	h.logf("sessions: creating %d sessions", opts.Sessions)
	ids := make([]string, opts.Sessions)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range ids {
		g.Go(func() error {
			params := map[string]any{"workdir": h.workdir}
			var res struct {
				SessionID string `json:"sessionId"`
			}
			if err := conns[i%len(conns)].call(gctx, "session.create", params, &res); err != nil {
				return err
			}
			ids[i] = res.SessionID
			recs.Store(res.SessionID, &sessionRec{seen: map[int64]bool{}, done: make(chan struct{})})
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}

	h.logf("sessions: prompting %d sessions at once", opts.Sessions)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(opts.StreamSec*float64(time.Second))+10*time.Minute)
	defer cancel()
	var prompted atomic.Int64
	cpu0, _ := procCPU(h.pid)
	start := time.Now()
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(64)
	for i, id := range ids {
		g.Go(func() error {
			if err := conns[i%len(conns)].call(gctx, "session.prompt", map[string]any{"sessionId": id, "text": "stream"}, nil); err != nil {
				return err
			}
			prompted.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	promptsTook := time.Since(start)
	for _, id := range ids {
		v, _ := recs.Load(id)
		select {
		case <-v.(*sessionRec).done:
		case <-ctx.Done():
			return r, fmt.Errorf("bench: not every session's turn.done arrived: %w", ctx.Err())
		}
	}

	cpu1, _ := procCPU(h.pid)
	// The truth: every session's final seq.
	driver, err := h.dialGRPC()
	if err != nil {
		return r, err
	}
	defer driver.Close()
	list, err := trellisv1.NewSessionServiceClient(driver).ListSessions(ctx, &trellisv1.ListSessionsRequest{IncludeClosed: proto.Bool(true)})
	if err != nil {
		return r, err
	}
	final := map[string]int64{}
	for _, s := range list.GetSessions() {
		final[s.GetSessionId()] = s.GetSeq()
	}
	var received, deltas, lost, dups int64
	var end time.Time
	var lat []time.Duration
	for _, id := range ids {
		v, _ := recs.Load(id)
		rec := v.(*sessionRec)
		rec.mu.Lock()
		for seq := int64(1); seq <= final[id]; seq++ {
			if !rec.seen[seq] {
				lost++
			}
		}
		received += int64(len(rec.seen))
		deltas += int64(rec.deltas)
		dups += int64(rec.dups)
		lat = append(lat, rec.latency...)
		if rec.doneAt.After(end) {
			end = rec.doneAt
		}
		rec.mu.Unlock()
	}
	took := end.Sub(start)
	r.figure("events", float64(received), "events", "events received, all sessions")
	r.figure("deltas", float64(deltas), "deltas", "model chunks received (in the text of the message.delta events), all sessions")
	r.figure("deltas_per_s", rate(deltas, took), "deltas/s", "aggregate rate of model chunks")
	if opts.StreamSec > 0 {
		r.figure("offered_deltas_per_s", float64(opts.Sessions*opts.Deltas)/opts.StreamSec, "deltas/s", "rate the fake model offers")
	}
	r.figure("wall_s", took.Seconds(), "s", "first prompt → last turn.done")
	r.figure("prompt_all_s", promptsTook.Seconds(), "s", "time to send every prompt")
	r.figure("delta_latency_p50_ms", ms(percentile(lat, 50)), "ms", "message.delta ts → client p50")
	r.figure("delta_latency_p99_ms", ms(percentile(lat, 99)), "ms", "message.delta ts → client p99")
	r.figure("delta_latency_max_ms", ms(percentile(lat, 100)), "ms", "message.delta ts → client max")
	r.figure("daemon_cpu_cores", ratio((cpu1-cpu0).Seconds(), took.Seconds()), "cores", cpuLabel(h))
	r.figure("lost", float64(lost), "events", "events lost")
	r.figure("duplicated", float64(dups), "events", "events duplicated")
	r.target("lost", "==", 0)
	r.target("duplicated", "==", 0)
	if h.inProcess {
		r.note("daemon and clients share this process and its cores")
	}
	r.finish()
	return r, nil
}
