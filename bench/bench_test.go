package bench

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// progress sends a bench's phase lines to the test log when -v.
func progress(t *testing.T) *testLog { return &testLog{t} }

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) { l.t.Log(string(p)); return len(p), nil }

// checkResult checks what every Result must carry and logs it.
func checkResult(t *testing.T, r Result, figures ...string) {
	t.Helper()
	t.Logf("\n%s", r.Table())
	var line map[string]any
	if err := json.Unmarshal(r.JSON(), &line); err != nil {
		t.Fatalf("JSON line: %v\n%s", err, r.JSON())
	}
	got, _ := line["figures"].(map[string]any)
	for _, f := range figures {
		if _, ok := got[f]; !ok {
			t.Errorf("figure %s missing: %s", f, r.JSON())
		}
	}
	if r.Date.IsZero() {
		t.Error("no date")
	}
}

func TestFanoutSmall(t *testing.T) {
	r, err := Fanout(context.Background(), FanoutOptions{Clients: 4, Events: 500, PacedEvents: 50, PacedSec: 0.5, Daemon: Daemon{Progress: progress(t)}})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "direct_deltas_per_s", "facade_deltas_per_s", "ratio", "added_p50_ms", "added_p99_ms", "lost")
	if r.Figure("lost") != 0 {
		t.Fatalf("lost %v events", r.Figure("lost"))
	}
}

func TestAppendSmall(t *testing.T) {
	r, err := Append(context.Background(), AppendOptions{Events: 5000, BaselineEvents: 100, Writers: 16, BulkBatch: 1000, Rounds: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "per_event_tx_events_per_s", "group_commit_events_per_s", "raw_bulk_events_per_s", "group_vs_per_event", "group_vs_raw")
	if r.Figure("group_commit_events_per_tx") <= 1 {
		t.Errorf("16 writers shared no commit: %v events/tx", r.Figure("group_commit_events_per_tx"))
	}
}

func TestConnsSmall(t *testing.T) {
	for name, cmd := range map[string][]string{"in-process": nil, "child": {trellisd(t)}} {
		t.Run(name, func(t *testing.T) {
			r, err := Conns(context.Background(), ConnsOptions{Conns: 200, Settle: 100 * time.Millisecond, Daemon: Daemon{Command: cmd}})
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, "bytes_per_conn", "kib_per_conn", "counted_conns")
			if r.Figure("counted_conns") != 200+1 {
				t.Errorf("the daemon counts %v connections, want 201", r.Figure("counted_conns"))
			}
		})
	}
}

// trellisd is cmd/trellisd, built once per test run (testbin).
func trellisd(t testing.TB) string {
	p, err := testbin.Path(testbin.Trellisd)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSessionsSmall(t *testing.T) {
	r, err := Sessions(context.Background(), SessionsOptions{Sessions: 20, Deltas: 50, StreamSec: 0.5, Conns: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "deltas_per_s", "delta_latency_p99_ms", "lost", "duplicated")
	if r.Figure("lost") != 0 || r.Figure("duplicated") != 0 {
		t.Fatalf("lost %v, duplicated %v", r.Figure("lost"), r.Figure("duplicated"))
	}
	if r.Figure("deltas") != 20*50 {
		t.Fatalf("received %v model chunks, want %d", r.Figure("deltas"), 20*50)
	}
}

// TestSoakSmall checks the soak's own accounting: every session is done,
// half of them deleted, every event and chunk received once, and a reading
// of each resource in every window.
func TestSoakSmall(t *testing.T) {
	const sessions, deltas = 24, 10
	r, err := Soak(context.Background(), SoakOptions{Sessions: sessions, Duration: 2 * time.Second, Concurrency: 4, Conns: 2,
		FreshConnEvery: 3, Deltas: deltas, TurnSec: 0.1, SampleEvery: 50 * time.Millisecond, Settle: 10 * time.Millisecond,
		Daemon: Daemon{Progress: progress(t)}})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "rss_settled", "goroutines_last", "fds_slope_per_min", "heap_idle_after", "goroutines_idle_after_vs_before")
	want := map[string]float64{"sessions_done": sessions, "sessions_deleted": sessions / 2, "fresh_conns": sessions / 3,
		"deltas": sessions * deltas, "lost": 0, "duplicated": 0}
	for name, v := range want {
		if got := r.Figure(name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if r.Figure("events") < sessions*4 {
		t.Errorf("received %v events from %d turns", r.Figure("events"), sessions)
	}
	for _, m := range soakMetrics {
		for _, w := range []string{"_idle_before", "_first", "_settled", "_last", "_idle_after"} {
			if r.Figure(m.name+w) <= 0 {
				t.Errorf("%s%s = %v: no reading", m.name, w, r.Figure(m.name+w))
			}
		}
	}
}

func TestReplaySmall(t *testing.T) {
	r, err := Replay(context.Background(), ReplayOptions{Events: 2000, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "raw_scan_events_per_s", "grpc_resume_events_per_s", "ws_resume_events_per_s", "ratio")
}

func TestStreamSmall(t *testing.T) {
	r, err := Stream(context.Background(), StreamOptions{Deltas: 500, PacedSessions: 3, PacedRate: 50, PacedSec: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "direct_deltas_per_s", "ws_deltas_per_s", "ndjson_deltas_per_s", "grpc_deltas_per_s", "ws_ratio", "paced_p99_ms", "paced1_cpu_us_per_delta", "paced_cpu_us_per_delta")
}

// TestDensitySmall: two steps of the ramp (2 then 4 sessions); every chunk
// arrives (a lost one ends the ramp with a note), and a limit no step can
// pass carries both.
func TestDensitySmall(t *testing.T) {
	r, err := Density(context.Background(), DensityOptions{Rate: 50, Chunks: 25, Start: 2, Max: 4, P99LimitMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "sessions", "s2_p99_ms", "s4_p99_ms", "cpu_us_per_chunk", "rss_per_session_kib", "idle_rss_mib")
	if got := r.Figure("sessions"); got != 4 {
		t.Fatalf("sessions = %v, want 4 (notes %v)", got, r.Notes)
	}
}

// TestFullSize runs one bench at its default, full size when
// TRELLIS_BENCH_FULL names it (fanout, append, conns, sessions, replay, soak), and
// prints its table and JSON line.
func TestFullSize(t *testing.T) {
	name := os.Getenv("TRELLIS_BENCH_FULL")
	if name == "" {
		t.Skip("set TRELLIS_BENCH_FULL=fanout|append|conns|sessions|replay|scale|soak")
	}
	ctx := context.Background()
	d := Daemon{Progress: progress(t)}
	if os.Getenv("TRELLIS_BENCH_CHILD") != "" {
		d.Command = []string{trellisd(t)}
	}
	var r Result
	var err error
	switch name {
	case "fanout":
		r, err = Fanout(ctx, FanoutOptions{Daemon: d})
	case "conns":
		r, err = Conns(ctx, ConnsOptions{Daemon: Daemon{Progress: progress(t), Command: []string{trellisd(t)}}})
	case "conns-in-process":
		r, err = Conns(ctx, ConnsOptions{Daemon: d})
	case "sessions":
		r, err = Sessions(ctx, SessionsOptions{Daemon: d})
	case "sessions-unpaced":
		r, err = Sessions(ctx, SessionsOptions{Daemon: d, Unpaced: true})
	case "stream":
		r, err = Stream(context.Background(), StreamOptions{Daemon: d})
	case "replay":
		r, err = Replay(ctx, ReplayOptions{Daemon: d})
	case "append":
		r, err = Append(ctx, AppendOptions{Progress: progress(t)})
	case "soak":
		r, err = Soak(ctx, SoakOptions{Daemon: d})
	case "scale":
		r, err = Scale(ctx, ScaleOptions{Daemon: Daemon{Progress: progress(t), Command: []string{trellisd(t)}}, DSN: pgtest.Server(t)})
	default:
		t.Fatalf("unknown bench %q", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.WriteTo(os.Stdout)
}

// TestCheckpointSmall: two daemons, one recording checkpoints, run the
// same write-tool turns; every figure is reported, the daemon's own
// recording time from its metrics included, and recording
// checkpoints of fresh random bytes grows the store by at least what they
// wrote (random bytes do not compress).
func TestCheckpointSmall(t *testing.T) {
	r, err := Checkpoint(context.Background(), CheckpointOptions{Turns: 2, ChangeKiB: 256, Files: 10, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, "turn_ms_with", "turn_ms_without", "cost_ms_per_call", "recording_ms_per_call", "growth_kib_per_turn", "growth_kib_per_turn_without")
	if got := r.Figure("recording_ms_per_call"); got <= 0 {
		t.Errorf("the daemon's time recording checkpoints is %v ms a call, want its trellis_checkpoint_seconds to have moved", got)
	}
	if got := r.Figure("growth_kib_per_turn"); got < 256 {
		t.Errorf("store growth per turn with checkpoints %.0f KiB, want at least the 256 KiB each turn wrote", got)
	}
}
