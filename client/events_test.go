package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
		{name: "gap holds back without a store", start: 1, late: []int64{1, 3, 4}, want: []int64{1}},
		{name: "gap filled", start: 1, late: []int64{1, 3, 4, 2}, want: []int64{1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream("s-1", nil)
			for _, seq := range tc.early {
				s.add(context.Background(), ev(seq))
			}
			s.start(tc.start)
			for _, seq := range tc.late {
				s.add(context.Background(), ev(seq))
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
	s := newStream("s-1", nil)
	s.start(1)
	s.add(context.Background(), ev(1))
	s.add(context.Background(), ev(3)) // behind a gap: lost with the connection
	s.close(ErrClosed)
	s.add(context.Background(), ev(2))
	if e, err := s.pop(context.Background()); err != nil || e.Seq != 1 {
		t.Fatalf("got %v %v, want seq 1", e.Seq, err)
	}
	if _, err := s.pop(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// fakeStore is a streamOwner whose store holds events 1..stored and
// whose calls can be made to wait.
type fakeStore struct {
	mu      sync.Mutex
	stored  int64
	fetches int
	calls   int
	start   chan struct{}
}

func newFakeStore(stored int64) *fakeStore {
	return &fakeStore{stored: stored, start: make(chan struct{})}
}

func (f *fakeStore) fetchAfter(_ context.Context, _ string, after int64) ([]Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches++
	var out []Event
	for seq := after + 1; seq <= f.stored; seq++ {
		out = append(out, ev(seq))
	}
	return out, nil
}

func (f *fakeStore) callWaiting() (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls > 0, f.start
}

// setCalls says how many calls wait for their reply (and wakes a waiting
// reader when it grows).
func (f *fakeStore) setCalls(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > f.calls {
		close(f.start)
		f.start = make(chan struct{})
	}
	f.calls = n
}

// readAll pops n events and checks they are 1..n.
func readAll(t *testing.T, s *stream, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for want := int64(1); want <= n; want++ {
		e, err := s.pop(ctx)
		if err != nil {
			t.Fatalf("waiting for seq %d: %v", want, err)
		}
		if e.Seq != want {
			t.Fatalf("got seq %d, want %d", e.Seq, want)
		}
	}
}

// TestStreamGapFetchedAtOnce pins that an event missing from the live
// stream is fetched from the store as soon as a later one is seen.
func TestStreamGapFetchedAtOnce(t *testing.T) {
	st := newFakeStore(5)
	s := newStream("s-1", st)
	s.start(1)
	for _, seq := range []int64{1, 2, 4, 5} { // 3 never comes live
		s.add(context.Background(), ev(seq))
	}
	readAll(t, s, 5)
	if st.fetches != 1 {
		t.Fatalf("%d fetches, want 1", st.fetches)
	}
}

// TestStreamBackpressure pins that a full stream holds the reader (no event
// dropped, no fetch) until the subscriber takes events.
func TestStreamBackpressure(t *testing.T) {
	const n = 3 * maxBuffered
	st := newFakeStore(0)
	s := newStream("s-1", st)
	s.start(1)
	added := make(chan int64, n)
	go func() {
		for seq := int64(1); seq <= n; seq++ {
			s.add(context.Background(), ev(seq))
			added <- seq
		}
	}()
	// The reader stops at the bound while nobody reads.
	for seq := int64(1); seq <= maxBuffered; seq++ {
		<-added
	}
	select {
	case seq := <-added:
		t.Fatalf("event %d was taken beyond the bound of %d", seq, maxBuffered)
	case <-time.After(50 * time.Millisecond):
	}
	readAll(t, s, n)
	if st.fetches != 0 {
		t.Fatalf("%d fetches, want none", st.fetches)
	}
}

// TestStreamFullWhileACallWaits pins that the reader never waits for room
// while a call waits for its reply (only the reader can deliver it): the
// event is dropped and fetched from the store later, none is lost.
func TestStreamFullWhileACallWaits(t *testing.T) {
	const n = maxBuffered + 100
	st := newFakeStore(n)
	s := newStream("s-1", st)
	s.start(1)
	for seq := int64(1); seq <= maxBuffered; seq++ {
		s.add(context.Background(), ev(seq))
	}
	blocked := make(chan struct{})
	go func() {
		s.add(context.Background(), ev(maxBuffered+1)) // waits: the stream is full
		close(blocked)
	}()
	st.setCalls(1) // a call starts: the waiting reader drops its event
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader still waits for room while a call waits for its reply")
	}
	for seq := int64(maxBuffered + 2); seq <= n; seq++ {
		s.add(context.Background(), ev(seq))
	}
	st.setCalls(0)
	readAll(t, s, n)
	if st.fetches == 0 {
		t.Fatal("the dropped events were not fetched")
	}
}

// TestStreamConcurrent adds events while the subscriber reads.
func TestStreamConcurrent(t *testing.T) {
	const n = 20000
	s := newStream("s-1", newFakeStore(0))
	s.start(1)
	go func() {
		for i := int64(1); i <= n; i++ {
			s.add(context.Background(), ev(i))
		}
	}()
	readAll(t, s, n)
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

// A lease_lost notice (retracted) is delivered after what came before it,
// and the stream moves back to its seq: the log's events under the seqs the
// daemon had sent from memory are delivered after it, not dropped as
// duplicates.
func TestStreamRetractedNotice(t *testing.T) {
	s := newStream("s-1", nil)
	s.start(1)
	s.add(context.Background(), ev(1))
	s.add(context.Background(), ev(2))
	held := ev(3)
	held.Unstored = true
	s.add(context.Background(), held)
	for _, kind := range []string{"error", "turn.done"} {
		notice := ev(3)
		notice.Kind, notice.Retracted = kind, true
		s.add(context.Background(), notice)
	}
	s.add(context.Background(), ev(3))
	s.add(context.Background(), ev(4))
	want := []string{"1", "2", "3 unstored", "3 error retracted", "3 turn.done retracted", "3", "4"}
	for _, w := range want {
		e, err := s.pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(e.Seq)
		if e.Retracted {
			got += " " + e.Kind + " retracted"
		} else if e.Unstored {
			got += " unstored"
		}
		if got != w {
			t.Fatalf("got %q, want %q", got, w)
		}
	}
}
