package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// cursorReader pulls a cursor the way the runtime's multiplexed stream does:
// Next while it returns something, then wait for notify.
type cursorReader struct {
	t        *testing.T
	c        *eventlog.Cursor
	ready    chan struct{}
	last     int64
	caughtUp int
	lastAtCU int64
	maxEv    int
	maxBytes int
}

func watch(t *testing.T, l *eventlog.Log, sessionID string, afterSeq int64, maxEv, maxBytes int) *cursorReader {
	t.Helper()
	r := &cursorReader{t: t, ready: make(chan struct{}, 1), last: afterSeq, maxEv: maxEv, maxBytes: maxBytes}
	c, err := l.Watch(context.Background(), sessionID, afterSeq, func() {
		select {
		case r.ready <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r.c = c
	return r
}

// next is Visit collecting copies of the events it hands over.
func next(c *eventlog.Cursor, ctx context.Context, maxEvents, maxBytes int) (evs []*store.Event, caughtUp bool, err error) {
	_, caughtUp, err = c.Visit(ctx, maxEvents, maxBytes, func(ev *store.Event) error {
		cp := *ev
		cp.Payload = append([]byte(nil), ev.Payload...)
		evs = append(evs, &cp)
		return nil
	})
	return evs, caughtUp, err
}

// drain reads until seq want and the CaughtUp marker have been seen; it
// checks order, bounds and that the marker comes once.
func (r *cursorReader) drain(want int64) error {
	deadline := time.After(20 * time.Second)
	for r.last < want || r.caughtUp == 0 {
		evs, cu, err := next(r.c, context.Background(), r.maxEv, r.maxBytes)
		if r.maxEv > 0 && len(evs) > r.maxEv {
			return fmt.Errorf("%d events from Visit, over its bound of %d", len(evs), r.maxEv)
		}
		if r.maxBytes > 0 && len(evs) > 1 {
			var n int
			for _, ev := range evs {
				n += len(ev.Payload)
			}
			if n > r.maxBytes {
				return fmt.Errorf("%d payload bytes in %d events from Visit, over its bound of %d", n, len(evs), r.maxBytes)
			}
		}
		for _, ev := range evs {
			if ev.Seq != r.last+1 {
				return fmt.Errorf("seq %d after %d", ev.Seq, r.last)
			}
			r.last = ev.Seq
		}
		if err != nil {
			return err
		}
		if cu {
			r.caughtUp++
			r.lastAtCU = r.last
			if r.caughtUp > 1 {
				return errors.New("a second caughtUp")
			}
		}
		if len(evs) > 0 || cu {
			continue
		}
		select {
		case <-r.ready:
		case <-deadline:
			return fmt.Errorf("stuck at seq %d (caughtUp %d), want %d", r.last, r.caughtUp, want)
		}
	}
	return nil
}

func appendSized(t *testing.T, l *eventlog.Log, sessionID string, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), sessionID, "message.delta", map[string]string{"text": strings.Repeat("x", size)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCursorReplayThenLive(t *testing.T) {
	tests := []struct {
		name           string
		afterSeq       int64
		before, after  int // events appended before Watch, and after
		maxEv, maxByte int
		buffer         int // subscriber buffer (overflow when small)
		size           int // payload text size
		wantCU         int64
	}{
		{"from the start, default bounds", 0, 10, 5, 0, 0, 0, 10, 10},
		{"from the middle, 3 at a time", 4, 10, 5, 3, 0, 0, 10, 10},
		{"from the end", 10, 10, 5, 0, 0, 0, 10, 10},
		{"beyond the end", 12, 10, 5, 0, 0, 0, 10, 12},
		{"one at a time", 0, 20, 20, 1, 0, 0, 10, 20},
		{"bounded bytes", 0, 50, 50, 0, 1000, 0, 300, 50},
		{"an event over the byte bound comes alone", 0, 5, 5, 0, 100, 0, 300, 5},
		{"live overflow reads the store", 0, 3, 200, 7, 0, 4, 10, 3},
		{"a long replay in pages", 0, 1500, 10, 0, 0, 0, 10, 1500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []eventlog.Option
			if tc.buffer > 0 {
				opts = append(opts, eventlog.WithSubscriberBuffer(tc.buffer))
			}
			l := newLog(t, newMemEvents("s-1", "s-2"), opts...)
			appendSized(t, l, "s-1", tc.before, tc.size)
			appendSized(t, l, "s-2", 3, tc.size)
			r := watch(t, l, "s-1", tc.afterSeq, tc.maxEv, tc.maxByte)
			if err := r.drain(max(int64(tc.before), tc.afterSeq)); err != nil {
				t.Fatal(err)
			}
			if r.lastAtCU != tc.wantCU {
				t.Errorf("caughtUp after seq %d, want %d", r.lastAtCU, tc.wantCU)
			}
			// Live: appended without reading, so a small buffer overflows.
			appendSized(t, l, "s-1", tc.after, tc.size)
			appendSized(t, l, "s-2", 3, tc.size)
			if err := r.drain(int64(tc.before + tc.after)); err != nil {
				t.Fatal(err)
			}
			if r.last != int64(tc.before+tc.after) && tc.afterSeq <= int64(tc.before) {
				t.Errorf("last seq %d, want %d", r.last, tc.before+tc.after)
			}
			if evs, cu, err := next(r.c, context.Background(), 0, 0); len(evs) > 0 || cu || err != nil {
				t.Errorf("Next with nothing new: %d events, caughtUp %v, %v", len(evs), cu, err)
			}
		})
	}
}

// A cursor reads what another writer committed to the shared store once
// Wake says so, exactly once even when woken twice.
func TestCursorWake(t *testing.T) {
	st := newMemEvents("s-1")
	writer := newLog(t, st)
	reader := newLog(t, st)
	appendN(t, writer, "s-1", 3)
	r := watch(t, reader, "s-1", 0, 2, 0)
	if err := r.drain(3); err != nil {
		t.Fatal(err)
	}
	appendN(t, writer, "s-1", 7)
	reader.Wake("s-1", 10)
	reader.Wake("s-1", 10)
	if err := r.drain(10); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := next(r.c, context.Background(), 0, 0); len(evs) > 0 {
		t.Errorf("%d events after a duplicate Wake", len(evs))
	}
}

func TestCursorEnds(t *testing.T) {
	tests := []struct {
		name  string
		end   func(l *eventlog.Log, c *eventlog.Cursor)
		check func(err error) bool
	}{
		{"Close", func(_ *eventlog.Log, c *eventlog.Cursor) { c.Close(); c.Close() }, eventlog.ErrCursorClosed},
		{"Log.Close", func(l *eventlog.Log, _ *eventlog.Cursor) { l.Close() }, func(err error) bool { return errors.Is(err, eventlog.ErrClosed) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t, newMemEvents("s-1"))
			appendN(t, l, "s-1", 3)
			r := watch(t, l, "s-1", 0, 0, 0)
			if err := r.drain(3); err != nil {
				t.Fatal(err)
			}
			tc.end(l, r.c)
			select {
			case <-r.ready:
			case <-time.After(10 * time.Second):
				t.Fatal("no notify when the cursor ended")
			}
			if _, _, err := next(r.c, context.Background(), 0, 0); !tc.check(err) {
				t.Errorf("Next after the end: %v", err)
			}
			if got := l.Watched(); len(got) != 0 {
				t.Errorf("sessions still watched after the end: %v", got)
			}
		})
	}
}

// TestCursorStoreFailure: a cursor that cannot read the store fails with
// code internal, and a Watch that fails leaves nothing watched. The log
// reading is not the one that wrote the events (another daemon's, or the
// same daemon's after a restart): it asks the store for the last seq.
func TestCursorStoreFailure(t *testing.T) {
	br := &brokenReads{EventStore: newMemEvents("s-1")}
	appendN(t, newLog(t, br), "s-1", 3)
	l := newLog(t, br)
	br.failLastSeq.Store(true)
	if _, err := l.Watch(context.Background(), "s-1", 0, nil); !errors.Is(err, errInjected) || errs.CodeOf(err) != errcode.Internal {
		t.Errorf("Watch with a failing store: %v, want the failure with code internal", err)
	}
	br.failLastSeq.Store(false)
	if got := l.Watched(); len(got) != 0 {
		t.Errorf("a failed Watch left %v watched", got)
	}
	br.failRead.Store(true)
	c, err := l.Watch(context.Background(), "s-1", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 2; i++ { // the error stays
		if evs, _, err := next(c, context.Background(), 0, 0); len(evs) > 0 || !errors.Is(err, errInjected) || errs.CodeOf(err) != errcode.Internal {
			t.Errorf("Next on a failing store: %d events, %v; want the failure with code internal", len(evs), err)
		}
	}
}

// A cursor watching from afterSeq -1 starts at the session's end: it
// replays nothing, is caught up at the last stored seq, and gets what
// follows.
func TestCursorFromEnd(t *testing.T) {
	l := newLog(t, newMemEvents("s-1"))
	appendN(t, l, "s-1", 3)
	r := watch(t, l, "s-1", -1, 0, 0)
	r.last = 3
	appendN(t, l, "s-1", 2)
	if err := r.drain(5); err != nil {
		t.Fatal(err)
	}
	if r.lastAtCU != 3 {
		t.Errorf("caught up at %d, want 3", r.lastAtCU)
	}
}

// TestCursorsDuringHeavyAppends: cursors with small buffers and various
// bounds, read by goroutines that wait on notify, while several goroutines
// append and Wake fires: each sees every seq once, in order (run with
// -race).
func TestCursorsDuringHeavyAppends(t *testing.T) {
	const writers, perWriter = 4, 300
	l := newLog(t, newMemEvents("s-1"), eventlog.WithSubscriberBuffer(8), eventlog.WithReplayPage(16))
	appendN(t, l, "s-1", 50)
	bounds := []struct{ maxEv, maxBytes, after int }{{0, 0, 0}, {1, 0, 10}, {5, 64, 25}, {0, 200, 50}, {3, 0, 0}}
	readers := make([]*cursorReader, len(bounds))
	for i, b := range bounds {
		readers[i] = watch(t, l, "s-1", int64(b.after), b.maxEv, b.maxBytes)
	}
	const total = 50 + writers*perWriter
	var wg sync.WaitGroup
	errc := make(chan error, len(readers))
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- r.drain(total)
		}()
	}
	var wwg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for i := 0; i < perWriter; i++ {
				ev, err := l.Append(context.Background(), "s-1", "message.delta", map[string]int{"i": i})
				if err != nil {
					errc <- err
					return
				}
				if i%50 == 0 {
					l.Wake("s-1", ev.Seq)
				}
			}
		}()
	}
	wwg.Wait()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	for i, r := range readers {
		if r.last != total {
			t.Errorf("reader %d: last seq %d, want %d", i, r.last, total)
		}
	}
}

// Held events (the store cannot write) reach a cursor from memory, and the
// stored form later is not delivered twice.
func TestCursorHeldEvents(t *testing.T) {
	var fail atomic.Bool
	l := newLog(t, &flakyStore{EventStore: newMemEvents("s-1"), fail: func([]store.Event) bool { return fail.Load() }})
	appendN(t, l, "s-1", 2)
	r := watch(t, l, "s-1", 0, 0, 0)
	if err := r.drain(2); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	for i := 0; i < 3; i++ {
		if _, err := l.Append(context.Background(), "s-1", "message.delta", map[string]int{"i": i}); !errors.Is(err, eventlog.ErrHeld) {
			t.Fatalf("Append with a failing store: %v, want ErrHeld", err)
		}
	}
	if err := r.drain(5); err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	appendN(t, l, "s-1", 1)
	if err := r.drain(6); err != nil {
		t.Fatal(err)
	}
	// A cursor opened while events were held reads them from memory.
	r2 := watch(t, l, "s-1", 0, 2, 0)
	if err := r2.drain(6); err != nil {
		t.Fatal(err)
	}
}

// Visit hands over the events through the store's ScanEvents (rows from
// the driver's buffers), within its bounds;
// the events past a bound are read again by the next call, and Behind
// says whether any are left; an error of visit is returned as it is.
func TestCursorVisit(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, "s-1")
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	var want []string
	var evs []store.Event
	for i := int64(1); i <= 40; i++ {
		kind := "message.delta"
		if i%4 == 0 {
			kind = "turn.done"
		}
		e := store.Event{SessionID: "s-1", Seq: i, Kind: kind, TS: ts, Payload: []byte(fmt.Sprintf(`{"turnId":"t%d"}`, i))}
		evs = append(evs, e)
		if i > 2 {
			want = append(want, fmt.Sprintf("%d %s %s %s", e.Seq, e.Kind, e.TS.Format(time.RFC3339Nano), e.Payload))
		}
	}
	if err := st.AppendEvents(ctx, store.Unfenced(), evs); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		st   store.EventStore
	}{{"scanner", st}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t, tc.st)
			c, err := l.Watch(ctx, "s-1", 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var got []string
			visit := func(e *store.Event) error {
				got = append(got, fmt.Sprintf("%d %s %s %s", e.Seq, e.Kind, e.TS.Format(time.RFC3339Nano), e.Payload))
				return nil
			}
			// Two events of about 20 bytes and Overhead each fit in 300.
			for calls := 0; ; calls++ {
				n, cu, err := c.Visit(ctx, 0, 300, visit)
				if err != nil || n > 2 || calls > 40 {
					t.Fatalf("Visit = %d, %v, %v after %d calls", n, cu, err, calls)
				}
				if cu {
					break
				}
				if !c.Behind() {
					t.Fatalf("not behind at %d, before caught up", c.Last())
				}
			}
			if c.Behind() || !slices.Equal(got, want) {
				t.Errorf("behind %v, got\n%q\nwant\n%q", c.Behind(), got, want)
			}
			c2, err := l.Watch(ctx, "s-1", 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			if n, _, err := c2.Visit(ctx, 5, 0, func(*store.Event) error { return boom }); err != boom || n != 1 {
				t.Errorf("an error of visit: %d, %v; want 1, boom", n, err)
			}
		})
	}
}

// countingReads counts the store reads.
type countingReads struct {
	store.EventStore
	reads atomic.Int64
}

func (c *countingReads) ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*store.EventRow) error) error {
	c.reads.Add(1)
	return c.EventStore.ScanEvents(ctx, sessionID, afterSeq, limit, fn)
}

// A Visit bounded in bytes (a ResumeSession answer) reads the store once,
// ends before the first event that does not fit, and the next Visit starts
// with that event: no gap, no duplicate, whatever the events' sizes.
func TestBoundedVisitIsOneRead(t *testing.T) {
	ctx := context.Background()
	mem := newMemEvents("s-1")
	var evs []store.Event
	for i := int64(1); i <= 2000; i++ {
		payload := `{"text":"x"}`
		if i%97 == 0 {
			payload = `{"text":"` + strings.Repeat("y", 3000) + `"}`
		}
		evs = append(evs, store.Event{SessionID: "s-1", Seq: i, Kind: "message.delta", TS: time.Unix(0, 0), Payload: []byte(payload)})
	}
	if err := mem.AppendEvents(ctx, store.Unfenced(), evs); err != nil {
		t.Fatal(err)
	}
	st := &countingReads{EventStore: mem}
	l := newLog(t, st)
	const maxBytes = 64 << 10
	next := int64(1)
	for answers := 1; next <= 2000; answers++ {
		c, err := l.Watch(ctx, "s-1", next-1, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := st.reads.Load()
		size := 0
		n, _, err := c.Visit(ctx, 0, maxBytes, func(e *store.Event) error {
			if e.Seq != next {
				t.Fatalf("answer %d: seq %d, want %d", answers, e.Seq, next)
			}
			next++
			size += len(e.Payload) + eventlog.Overhead
			return nil
		})
		behind := c.Behind()
		c.Close()
		if err != nil || n == 0 {
			t.Fatalf("answer %d: %d events, %v", answers, n, err)
		}
		if reads := st.reads.Load() - before; reads != 1 {
			t.Errorf("answer %d (%d events): %d store reads, want 1", answers, n, reads)
		}
		if size > maxBytes || (next <= 2000 && size+len(evs[next-1].Payload)+eventlog.Overhead <= maxBytes && n < 4096) {
			t.Fatalf("answer %d: %d bytes of events, and the next (%d bytes) would fit in %d", answers, size, len(evs[next-1].Payload), maxBytes)
		}
		if behind != (next <= 2000) {
			t.Fatalf("answer %d ends at %d: behind %v", answers, next-1, behind)
		}
	}
}
