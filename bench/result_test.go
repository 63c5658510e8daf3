package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestResultRendering(t *testing.T) {
	r := Result{Bench: "demo", Title: "a demo"}
	r.param("n", 3)
	r.figure("rate", 1234.5, "events/s", "event rate")
	r.figure("ratio", 0.8123, "ratio", "")
	r.figure("missing", math.NaN(), "ms", "no sample")
	r.target("ratio", ">=", 0.8)
	r.target("rate", "<=", 1000)
	r.note("a note with <html> & quotes \"")
	r.finish()

	table := r.Table()
	for _, want := range []string{"demo: a demo", "n=3", "event rate", "1234 events/s", "0.812", "target ratio >= 0.800: got 0.812, met", "target rate <= 1000: got 1234, MISSED", "note: a note"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	line := r.JSON()
	if strings.Contains(string(line), "\n") || strings.Contains(string(line), `\u003e`) {
		t.Fatalf("not one plain line: %s", line)
	}
	var got struct {
		Bench   string              `json:"bench"`
		Params  map[string]any      `json:"params"`
		Figures map[string]*float64 `json:"figures"`
		Targets []Target            `json:"targets"`
		Met     bool                `json:"met"`
		Notes   []string            `json:"notes"`
	}
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if got.Bench != "demo" || got.Params["n"] != 3.0 || *got.Figures["rate"] != 1234.5 || got.Figures["missing"] != nil {
		t.Errorf("JSON line: %s", line)
	}
	if got.Met || r.Met() || len(got.Targets) != 2 || !got.Targets[0].Met || got.Targets[1].Met {
		t.Errorf("targets: %+v met=%v", got.Targets, got.Met)
	}
	if i, j := strings.Index(string(line), `"rate"`), strings.Index(string(line), `"ratio"`); i < 0 || i > j {
		t.Errorf("figures out of order: %s", line)
	}
}

func TestRunningDaemonOnlyForConns(t *testing.T) {
	d := Daemon{Home: t.TempDir()}
	ctx := context.Background()
	for name, run := range map[string]func() error{
		"fanout":   func() error { _, err := Fanout(ctx, FanoutOptions{Daemon: d}); return err },
		"sessions": func() error { _, err := Sessions(ctx, SessionsOptions{Daemon: d}); return err },
		"replay":   func() error { _, err := Replay(ctx, ReplayOptions{Daemon: d}); return err },
	} {
		if err := run(); !errors.Is(err, ErrNeedsFreshDaemon) {
			t.Errorf("%s with a running daemon's home: %v, want ErrNeedsFreshDaemon", name, err)
		}
	}
	if _, err := Conns(ctx, ConnsOptions{Daemon: d, Conns: 1}); err == nil || errors.Is(err, ErrNeedsFreshDaemon) {
		t.Errorf("conns with a home where no daemon runs: %v, want the daemon's absence", err)
	}
}

func TestPercentileAndMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(append([]float64(nil), tc.in...)); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzScanEvent: the envelope scanner never panics, and what it reads
// from an object it accepts agrees with encoding/json where both apply.
func FuzzScanEvent(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s-1","seq":7,"kind":"message.delta","payload":{"text":"w w w "},"ts":"2026-01-01T00:00:00.000Z"}`))
	f.Add([]byte(`{"seq":1}`))
	f.Add([]byte(`{"sessionId":"s-1","seq":99999999999999999999,"kind":"x","ts":"t"}`))
	f.Fuzz(func(t *testing.T, obj []byte) {
		ev, ok := scanEvent(obj)
		if !ok {
			return
		}
		var full struct {
			Seq int64 `json:"seq"`
		}
		if json.Unmarshal(obj, &full) == nil && full.Seq != 0 && !strings.Contains(string(obj), `\`) &&
			strings.Count(string(obj), `"seq":`) == 1 && full.Seq != ev.Seq {
			t.Errorf("seq %d, encoding/json says %d: %s", ev.Seq, full.Seq, obj)
		}
	})
}

// FuzzScanReply: the reply scanner never panics and finds the id of the
// facade's replies.
func FuzzScanReply(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":12,"result":{"events":[]}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"m","data":{"code":"overloaded"}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, rep, ok := scanReply(data)
		if ok && id < 0 && rep.Error == nil && rep.Result == nil {
			t.Errorf("accepted %q with nothing in it", data)
		}
	})
}
