package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store/sqlite" // also registers the "sqlite" driver
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	Daemon
	// Events is how many message.delta events the replayed session holds
	// (default 100,000); the turn adds a few more.
	Events int
	// Rounds is how many times each way of reading is timed; the best
	// round counts (default 3).
	Rounds int
}

func (o *ReplayOptions) defaults() {
	orDefault(&o.Events, 100_000)
	orDefault(&o.Rounds, 3)
}

// Replay measures session.resume of a long session against a raw scan of
// the same rows. A turn streams Events deltas into one session; then, each
// best of Rounds: a raw SELECT of the session's rows from the daemon's
// SQLite file, scanned into Go values (the physical limit); gRPC
// SessionService.ResumeSession; and session.resume over WebSocket, timed
// from the request to the decoded events (envelope decoded, payload kept
// raw), and to the whole reply received. The ratio (the target's) is the
// decoded WebSocket resume against the raw scan: both end with the events
// in Go values.
func Replay(ctx context.Context, opts ReplayOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "replay", Title: "session.resume of a long session vs a raw scan of its rows",
		Params: []Param{{"events", opts.Events}, {"rounds", opts.Rounds}}}
	h, driver, sid, err := opts.Daemon.startSession(ctx, &r, streamScript(scriptStep{match: "replay", deltas: opts.Events}), false)
	if err != nil {
		return r, err
	}
	defer h.close()
	h.logf("replay: streaming %d events into %s", opts.Events, sid)
	seedStart := time.Now()
	if err := runTurn(ctx, h, driver, sid, "replay"); err != nil {
		return r, err
	}
	seedTook := time.Since(seedStart)
	total, err := lastSeq(ctx, driver, sid)
	if err != nil {
		return r, err
	}
	r.param("stored_events", total)

	db, err := sql.Open("sqlite", filepath.Join(h.home, sqlite.FileName)+"?_query_only=1&_busy_timeout=10000")
	if err != nil {
		return r, err
	}
	defer db.Close()
	sessions := trellisv1.NewSessionServiceClient(driver)
	self := os.Getpid()
	// CPU time of each reader, summed over its rounds: the raw scan runs
	// in this process, the resumes in the daemon (a child process; in
	// process the figures include the bench's client). wsClientCPU is this
	// process's during the WebSocket rounds: the bench's client reading
	// and decoding what the daemon sends.
	var rawCPU, grpcCPU, wsCPU, wsClientCPU time.Duration
	cpuOf := func(pid int, total *time.Duration, f func() (time.Duration, error)) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			c0, _ := procCPU(pid)
			d, err := f()
			c1, _ := procCPU(pid)
			*total += c1 - c0
			return d, err
		}
	}

	raw := bestOf(opts.Rounds, cpuOf(self, &rawCPU, func() (time.Duration, error) {
		start := time.Now()
		n, err := rawScan(ctx, db, sid)
		if err == nil && n != total {
			err = fmt.Errorf("bench: the raw scan read %d rows, want %d", n, total)
		}
		return time.Since(start), err
	}))
	grpcPages := 0
	viaGRPC := bestOf(opts.Rounds, cpuOf(h.pid, &grpcCPU, func() (time.Duration, error) {
		start := time.Now()
		pages, err := resumeGRPC(ctx, sessions, sid, total)
		grpcPages = pages
		if err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}))
	// Each WebSocket round uses a new connection: a resume answer is
	// bounded in bytes (more: true), the rest follows as session.event to
	// the connection, which then watches the session.
	var received time.Duration // best time to the whole reply, before decoding
	var inAnswer int64
	peakRSS, idleRSS := int64(0), int64(0)
	viaWS := bestOf(opts.Rounds, cpuOf(self, &wsClientCPU, cpuOf(h.pid, &wsCPU, func() (time.Duration, error) {
		// session.event notifications of the session; want is how many
		// are due (known once the answer is in), allIn closes when they are.
		var notified, want atomic.Int64
		want.Store(-1)
		allIn := make(chan struct{})
		var once sync.Once
		ws, err := h.dialWS(ctx, func(ev eventRef, _ time.Time) {
			if ev.SessionID == sid && ev.Seq <= total && notified.Add(1) == want.Load() {
				once.Do(func() { close(allIn) })
			}
		})
		if err != nil {
			return 0, err
		}
		defer ws.close()
		var stopRSS func() int64
		if !h.inProcess {
			if rss, err := readRSS(h.pid); err == nil && (idleRSS == 0 || rss < idleRSS) {
				idleRSS = rss
			}
			stopRSS = sampleRSS(h.pid)
		}
		start := time.Now()
		raw, err := ws.callRaw(ctx, "session.resume", map[string]any{"sessionId": sid, "afterSeq": 0})
		if err != nil {
			return 0, err
		}
		if got := time.Since(start); received == 0 || got < received {
			received = got
		}
		var res struct {
			Events []struct {
				Seq     int64           `json:"seq"`
				Kind    string          `json:"kind"`
				Payload json.RawMessage `json:"payload"`
				TS      string          `json:"ts"`
			} `json:"events"`
			More bool `json:"more"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return 0, err
		}
		for i, ev := range res.Events {
			if ev.Seq != int64(i+1) {
				return 0, fmt.Errorf("bench: session.resume: seq %d at position %d", ev.Seq, i)
			}
		}
		n := int64(len(res.Events))
		inAnswer = n
		if res.More != (n < total) {
			return 0, fmt.Errorf("bench: session.resume returned %d of %d events with more=%v", n, total, res.More)
		}
		if n < total {
			// The rest follows as session.event.
			if want.Store(total - n); notified.Load() == total-n {
				once.Do(func() { close(allIn) })
			}
			select {
			case <-allIn:
			case <-time.After(10 * time.Minute):
				return 0, fmt.Errorf("bench: session.resume: %d of the %d events after the answer arrived", notified.Load(), total-n)
			}
		}
		took := time.Since(start)
		if stopRSS != nil {
			peakRSS = max(peakRSS, stopRSS())
		}
		return took, nil
	})))
	for _, m := range []measured{raw, viaGRPC, viaWS} {
		if m.err != nil {
			return r, m.err
		}
	}
	perEvent := func(d time.Duration) float64 {
		return float64(d.Nanoseconds()) / float64(total*int64(opts.Rounds))
	}
	r.figure("raw_scan_events_per_s", rate(total, raw.best), "events/s", "raw SELECT + scan of the rows")
	r.figure("grpc_resume_events_per_s", rate(total, viaGRPC.best), "events/s", "gRPC ResumeSession")
	r.figure("ws_resume_events_per_s", rate(total, viaWS.best), "events/s", "session.resume over WebSocket")
	r.figure("raw_scan_ms", ms(raw.best), "ms", "raw scan")
	r.figure("grpc_resume_ms", ms(viaGRPC.best), "ms", "gRPC ResumeSession (all pages)")
	r.figure("grpc_pages", float64(grpcPages), "answers", "gRPC ResumeSession answers (paged by size)")
	r.figure("ws_resume_ms", ms(viaWS.best), "ms", "session.resume over WebSocket (answer + the rest as session.event)")
	r.figure("ws_answer_events", float64(inAnswer), "events", "events in the session.resume answer (the rest as session.event)")
	r.figure("ws_received_ms", ms(received), "ms", "session.resume, answer received (not decoded)")
	r.figure("ratio", ratio(raw.best.Seconds(), viaWS.best.Seconds()), "resume/raw", "session.resume / raw scan")
	if inAnswer == total {
		r.figure("received_ratio", ratio(raw.best.Seconds(), received.Seconds()), "resume/raw", "session.resume answer received / raw scan")
	}
	r.figure("grpc_ratio", ratio(raw.best.Seconds(), viaGRPC.best.Seconds()), "resume/raw", "gRPC ResumeSession / raw scan")
	r.figure("raw_scan_cpu_ns_per_event", perEvent(rawCPU), "ns", "CPU per event, raw scan (this process)")
	r.figure("grpc_resume_cpu_ns_per_event", perEvent(grpcCPU), "ns", "daemon CPU per event, gRPC ResumeSession")
	r.figure("ws_resume_cpu_ns_per_event", perEvent(wsCPU), "ns", "daemon CPU per event, session.resume over WebSocket")
	if !h.inProcess {
		r.figure("ws_resume_client_cpu_ns_per_event", perEvent(wsClientCPU), "ns", "bench client CPU per event (this process), session.resume over WebSocket")
	}
	r.figure("cpu_ratio", ratio(perEvent(rawCPU), perEvent(wsCPU)), "raw/resume", "CPU per event: raw scan / session.resume")
	if peakRSS > 0 {
		r.figure("ws_resume_peak_rss_above_idle_mib", float64(peakRSS-idleRSS)/(1<<20), "MiB", "daemon peak RSS during session.resume, above its RSS before")
	}
	r.figure("seed_events_per_s", rate(total, seedTook), "events/s", "the seeding turn's event rate")
	r.target("ratio", ">=", 0.8) // issue 12: resume of a 100k-event session ÷ the raw scan
	if peakRSS > 0 && opts.Events >= 1_000_000 {
		r.target("ws_resume_peak_rss_above_idle_mib", "<", 64) // issue 12: a 1M-event replay stays bounded
	}
	r.finish()
	return r, nil
}

// resumeGRPC reads a session's events with gRPC ResumeSession from the
// first one: the answer is paged (bounded in bytes), so it resumes again
// from the last seq while the answer says more. It checks that the seqs
// run 1..total and returns how many answers it took.
func resumeGRPC(ctx context.Context, sessions trellisv1.SessionServiceClient, sid string, total int64) (int, error) {
	var after, n int64
	var objs [][]byte
	pages := 0
	for {
		res, err := sessions.ResumeSession(ctx, &trellisv1.ResumeSessionRequest{SessionId: sid, AfterSeq: &after})
		if err != nil {
			return pages, err
		}
		pages++
		// The objects as a client takes them from the page (a slice each).
		if page := res.GetEvents(); page != nil {
			if objs, err = codec.PageObjects(page, objs[:0]); err != nil {
				return pages, fmt.Errorf("bench: gRPC ResumeSession: %w", err)
			}
		}
		for _, seq := range res.GetEvents().GetSeqs() {
			if n++; seq != n {
				return pages, fmt.Errorf("bench: gRPC ResumeSession: seq %d at position %d", seq, n)
			}
			after = seq
		}
		if !res.GetMore() {
			break
		}
	}
	if n != total {
		return pages, fmt.Errorf("bench: gRPC ResumeSession returned %d events, want %d", n, total)
	}
	return pages, nil
}

// sampleRSS reads a process's RSS every 5 ms until the returned function
// is called, which returns the highest reading.
func sampleRSS(pid int) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := readRSS(pid); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load()
	}
}

// rawScan reads a session's rows the way the store does, with nothing on
// top, and counts them.
func rawScan(ctx context.Context, db *sql.DB, sid string) (int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq, kind, payload, ts FROM events WHERE session_id = ? AND seq > 0 ORDER BY seq`, sid)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	var (
		seq, ts int64
		kind    string
		payload []byte
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &kind, &payload, &ts); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

type measured struct {
	best time.Duration
	err  error
}

// bestOf runs f rounds times and keeps the shortest duration.
func bestOf(rounds int, f func() (time.Duration, error)) measured {
	var m measured
	for i := 0; i < rounds; i++ {
		d, err := f()
		if err != nil {
			return measured{err: err}
		}
		if m.best == 0 || d < m.best {
			m.best = d
		}
	}
	return m
}
