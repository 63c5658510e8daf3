package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func ev(seq int64) Event {
	return Event{SessionID: "s-1", Seq: seq, Kind: "message.delta"}
}

// TestStreamOrder pins that a stream delivers events in seq order from its
// starting point, whatever order they arrive in and whether they arrive
// before or after the starting point is known.
func TestStreamOrder(t *testing.T) {
	tests := []struct {
		name  string
		start int64
		early []int64 // added before start
		late  []int64 // added after start
		want  []int64
	}{
		{name: "in order", start: 1, late: []int64{1, 2, 3}, want: []int64{1, 2, 3}},
		{name: "reversed", start: 1, late: []int64{3, 2, 1}, want: []int64{1, 2, 3}},
		{name: "before the start is known", start: 1, early: []int64{2, 1}, late: []int64{3}, want: []int64{1, 2, 3}},
		{name: "older events dropped", start: 5, early: []int64{3, 4, 5, 6}, late: []int64{4, 7}, want: []int64{5, 6, 7}},
		{name: "duplicates dropped", start: 1, late: []int64{1, 1, 2, 1, 2, 3}, want: []int64{1, 2, 3}},
		{name: "gap holds back", start: 1, late: []int64{1, 3, 4}, want: []int64{1}},
		{name: "gap filled", start: 1, late: []int64{1, 3, 4, 2}, want: []int64{1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream("s-1")
			for _, seq := range tc.early {
				s.add(ev(seq))
			}
			s.start(tc.start)
			for _, seq := range tc.late {
				s.add(ev(seq))
			}
			var got []int64
			for range tc.want {
				e, err := s.pop(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, e.Seq)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if e, err := s.pop(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("one event too many: %v %v", e.Seq, err)
			}
		})
	}
}

// TestStreamClose pins that events already ordered are still delivered
// after the connection closed, then the close error.
func TestStreamClose(t *testing.T) {
	s := newStream("s-1")
	s.start(1)
	s.add(ev(1))
	s.add(ev(3)) // behind a gap: lost with the connection
	s.close(ErrClosed)
	s.add(ev(2))
	if e, err := s.pop(context.Background()); err != nil || e.Seq != 1 {
		t.Fatalf("got %v %v, want seq 1", e.Seq, err)
	}
	if _, err := s.pop(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// TestStreamConcurrent adds events from many goroutines, as the connection
// delivers notifications, and reads them in order.
func TestStreamConcurrent(t *testing.T) {
	const n = 2000
	s := newStream("s-1")
	for i := int64(1); i <= n; i++ {
		go s.add(ev(i))
	}
	s.start(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for want := int64(1); want <= n; want++ {
		e, err := s.pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != want {
			t.Fatalf("got seq %d, want %d", e.Seq, want)
		}
	}
}

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name, in string
		wantErr  bool
	}{
		{"ok", `{"sessionId":"s-1", "seq":2, "kind":"message.delta", "payload":{"text":"hi"}, "ts":"2026-01-01T00:00:00.000Z"}`, false},
		{"no seq", `{"sessionId":"s-1","kind":"x","payload":{}}`, true},
		{"no session", `{"seq":1,"kind":"x"}`, true},
		{"not json", `{`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := decodeEvent([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil {
				if e.Text() != "hi" || string(e.Raw) != `{"sessionId":"s-1","seq":2,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-01T00:00:00.000Z"}` {
					t.Fatalf("decoded %+v raw %s", e, e.Raw)
				}
			}
		})
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s-1","seq":2,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-01T00:00:00.000Z"}`))
	f.Add([]byte(`{"sessionId":"s-1","seq":-1,"kind":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEvent(b)
		if err != nil {
			return
		}
		if e.SessionID == "" || e.Seq <= 0 || e.Kind == "" {
			t.Fatalf("accepted an incomplete event: %+v", e)
		}
		if _, err := decodeEvent(e.Raw); err != nil {
			t.Fatalf("Raw does not decode again: %v", err)
		}
	})
}
