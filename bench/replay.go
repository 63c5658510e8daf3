package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
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
	if o.Events <= 0 {
		o.Events = 100_000
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
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
	r := Result{Bench: "replay", Title: "session.resume of a long session vs a raw scan of its rows"}
	r.param("events", opts.Events)
	r.param("rounds", opts.Rounds)
	h, err := opts.Daemon.start(ctx, streamScript(scriptStep{match: "replay", deltas: opts.Events}))
	if err != nil {
		return r, err
	}
	defer h.close()
	r.param("daemon", h.describe())
	driver, err := h.dialGRPC()
	if err != nil {
		return r, err
	}
	defer driver.Close()
	sid, err := h.createSession(ctx, driver)
	if err != nil {
		return r, err
	}
	h.logf("replay: streaming %d events into %s", opts.Events, sid)
	seedStart := time.Now()
	if err := runTurnSized(ctx, h, driver, sid, "replay", opts.Events+64); err != nil {
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
	ws, err := h.dialWS(ctx, nil)
	if err != nil {
		return r, err
	}
	defer ws.close()
	sessions := trellisv1.NewSessionServiceClient(driver)

	raw := bestOf(opts.Rounds, func() (time.Duration, error) {
		start := time.Now()
		n, err := rawScan(ctx, db, sid)
		if err == nil && n != total {
			err = fmt.Errorf("bench: the raw scan read %d rows, want %d", n, total)
		}
		return time.Since(start), err
	})
	viaGRPC := bestOf(opts.Rounds, func() (time.Duration, error) {
		start := time.Now()
		res, err := sessions.ResumeSession(ctx, &trellisv1.ResumeSessionRequest{SessionId: sid})
		if err == nil && int64(len(res.GetEvents())) != total {
			err = fmt.Errorf("bench: gRPC ResumeSession returned %d events, want %d", len(res.GetEvents()), total)
		}
		return time.Since(start), err
	})
	var received time.Duration // best time to the whole reply, before decoding
	viaWS := bestOf(opts.Rounds, func() (time.Duration, error) {
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
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return 0, err
		}
		took := time.Since(start)
		if int64(len(res.Events)) != total {
			return 0, fmt.Errorf("bench: session.resume returned %d events, want %d", len(res.Events), total)
		}
		for i, ev := range res.Events {
			if ev.Seq != int64(i+1) {
				return 0, fmt.Errorf("bench: session.resume: seq %d at position %d", ev.Seq, i)
			}
		}
		return took, nil
	})
	for _, m := range []measured{raw, viaGRPC, viaWS} {
		if m.err != nil {
			return r, m.err
		}
	}
	r.figure("raw_scan_events_per_s", rate(total, raw.best), "events/s", "raw SELECT + scan of the rows")
	r.figure("grpc_resume_events_per_s", rate(total, viaGRPC.best), "events/s", "gRPC ResumeSession")
	r.figure("ws_resume_events_per_s", rate(total, viaWS.best), "events/s", "session.resume over WebSocket")
	r.figure("raw_scan_ms", ms(raw.best), "ms", "raw scan")
	r.figure("grpc_resume_ms", ms(viaGRPC.best), "ms", "gRPC ResumeSession")
	r.figure("ws_resume_ms", ms(viaWS.best), "ms", "session.resume over WebSocket")
	r.figure("ws_received_ms", ms(received), "ms", "session.resume, reply received (not decoded)")
	r.figure("ratio", ratio(raw.best.Seconds(), viaWS.best.Seconds()), "resume/raw", "session.resume / raw scan")
	r.figure("received_ratio", ratio(raw.best.Seconds(), received.Seconds()), "resume/raw", "session.resume received / raw scan")
	r.figure("grpc_ratio", ratio(raw.best.Seconds(), viaGRPC.best.Seconds()), "resume/raw", "gRPC ResumeSession / raw scan")
	r.figure("seed_events_per_s", rate(total, seedTook), "events/s", "the seeding turn's event rate")
	r.target("ratio", ">=", 0.5)
	r.finish()
	return r, nil
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
