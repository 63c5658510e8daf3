package e2e

import (
	"context"
	"testing"
	"time"
)

// floodTurn prompts "flood" through c and returns the turn's duration as
// the daemon stamped it (turn.started → turn.done) and its events.
func floodTurn(t testing.TB, c client, id string) (time.Duration, []map[string]any) {
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "flood"}, nil); err != nil {
		t.Fatal(err)
	}
	var evs []map[string]any
	deadline := time.After(120 * time.Second)
	for {
		select {
		case ev := <-c.Events(id):
			evs = append(evs, ev)
			if ev["kind"] == "turn.done" {
				return stamped(t, evs), evs
			}
		case <-deadline:
			t.Fatalf("flood turn did not end within 120 s (%d events)", len(evs))
		}
	}
}

func stamped(t testing.TB, evs []map[string]any) time.Duration {
	var start, end time.Time
	for _, ev := range evs {
		ts, err := time.Parse(time.RFC3339Nano, ev["ts"].(string))
		if err != nil {
			t.Fatal(err)
		}
		switch ev["kind"] {
		case "turn.started":
			start = ts
		case "turn.done":
			end = ts
		}
	}
	return end.Sub(start)
}

// TestStalledClientDoesNotHoldTheTurn: a WebSocket client subscribed to a
// session reads nothing while a 100,000-chunk answer streams; the turn
// ends anyway, and once the client reads again it gets every event once,
// in order, and the whole text.
func TestStalledClientDoesNotHoldTheTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100,000 events")
	}
	d := startDaemon(t)
	stalled := helloWS(t, d)
	id := createSession(t, stalled, nil)
	driver := dialGRPC(t, d)
	var res struct{}
	if err := driver.Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, &res); err != nil {
		t.Fatal(err)
	}
	resume := stalled.pause()
	took, evs := floodTurn(t, driver, id)
	if text := texts(evs, "message.delta"); text != floodText {
		t.Fatalf("the turn streamed %d bytes of text, want the %d of the answer", len(text), len(floodText))
	}
	last := seqOf(evs[len(evs)-1])
	resume()
	got := collect(t, stalled.Events(id), "turn.done", 1)
	for i, ev := range got {
		if seqOf(ev) != int64(i+1) {
			t.Fatalf("stalled client: seq %d at position %d", seqOf(ev), i)
		}
	}
	if int64(len(got)) != last {
		t.Fatalf("stalled client got %d events, the log has %d", len(got), last)
	}
	if text := texts(got, "message.delta"); text != floodText {
		t.Fatalf("stalled client got %d bytes of text, want the %d of the answer", len(text), len(floodText))
	}
	t.Logf("turn of %d events took %v with a stalled WebSocket client subscribed; the client then received all %d once, in order",
		len(evs), took, len(got))
}

// BenchmarkFloodTurn measures a 100,000-chunk turn with and without a
// subscribed WebSocket client that reads nothing.
func BenchmarkFloodTurn(b *testing.B) {
	for _, stall := range []bool{false, true} {
		name := "alone"
		if stall {
			name = "with-stalled-ws-client"
		}
		b.Run(name, func(b *testing.B) {
			d := startDaemon(b)
			driver := dialGRPC(b, d)
			id := createSession(b, driver, nil)
			if stall {
				c := helloWS(b, d)
				var res struct{}
				c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id}, &res)
				c.pause()
			}
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				took, _ := floodTurn(b, driver, id)
				total += took
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "turn-ms")
		})
	}
}
