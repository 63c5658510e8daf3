package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
)

// reader drains a subscription in the background and checks, as it goes,
// that events arrive in seq order from afterSeq+1 with no gap, no duplicate,
// and exactly one CaughtUp marker.
type reader struct {
	t        *testing.T
	sub      *eventlog.Subscription
	mu       sync.Mutex
	last     int64
	caughtUp int
	lastAtCU int64
	bad      error
	progress chan struct{}
	done     chan struct{}
}

func startReader(t *testing.T, sub *eventlog.Subscription, afterSeq int64, slow bool) *reader {
	r := &reader{t: t, sub: sub, last: afterSeq, progress: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for it := range sub.Items() {
			r.mu.Lock()
			switch {
			case it.CaughtUp:
				r.caughtUp++
				r.lastAtCU = r.last
				if r.caughtUp > 1 && r.bad == nil {
					r.bad = errors.New("second CaughtUp marker")
				}
			case it.Event.Seq != r.last+1 && r.bad == nil:
				r.bad = fmt.Errorf("got seq %d after %d", it.Event.Seq, r.last)
			case it.Event.Unstored && r.bad == nil:
				r.bad = fmt.Errorf("seq %d delivered from memory (Unstored): a subscription delivers stored events only", it.Event.Seq)
			default:
				r.last = it.Event.Seq
			}
			r.mu.Unlock()
			select {
			case r.progress <- struct{}{}:
			default:
			}
			if slow && r.last%97 == 0 {
				time.Sleep(time.Millisecond) // a consumer that lags behind now and then
			}
		}
	}()
	return r
}

// waitFor waits until the reader has delivered seq n and the CaughtUp
// marker (or failed). A subscription that starts near the end of the log
// delivers its last replayed event just before its marker: waiting for the
// seq alone would check the reader between the two.
func (r *reader) waitFor(n int64, timeout time.Duration) {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		last, caughtUp, bad := r.last, r.caughtUp, r.bad
		r.mu.Unlock()
		if bad != nil {
			r.t.Fatal(bad)
		}
		if last >= n && caughtUp > 0 {
			return
		}
		select {
		case <-r.progress:
		case <-r.done:
			r.t.Fatalf("subscription ended at seq %d before %d: %v", r.last, n, r.sub.Err())
		case <-deadline:
			r.t.Fatalf("timed out at seq %d waiting for %d", last, n)
		}
	}
}

func (r *reader) check(wantLast int64) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad != nil {
		r.t.Fatal(r.bad)
	}
	if r.caughtUp != 1 {
		r.t.Errorf("CaughtUp seen %d times, want 1", r.caughtUp)
	}
	if r.last != wantLast {
		r.t.Errorf("last seq %d, want %d", r.last, wantLast)
	}
}

func appendN(t *testing.T, l *eventlog.Log, sessionID string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), sessionID, "message.delta", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSubscribeReplayThenLive(t *testing.T) {
	tests := []struct {
		name     string
		afterSeq int64
		wantCU   int64 // last seq delivered before CaughtUp
	}{
		{"from the start", 0, 10},
		{"from the middle", 4, 10},
		{"from the end", 10, 10},
		{"from beyond the end", 12, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, "s-1", "s-2")
			l := newLog(t, st)
			appendN(t, l, "s-1", 10)
			appendN(t, l, "s-2", 3)
			sub, err := l.Subscribe(context.Background(), "s-1", tc.afterSeq)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			r := startReader(t, sub, tc.afterSeq, false)
			appendN(t, l, "s-1", 5)
			appendN(t, l, "s-2", 5)
			r.waitFor(15, 10*time.Second)
			r.check(15)
			if r.lastAtCU != tc.wantCU {
				t.Errorf("CaughtUp after seq %d, want %d", r.lastAtCU, tc.wantCU)
			}
		})
	}
}

// backends are the stores the volume tests run on: the in-memory one at
// full size, SQLite (slow under the race detector) smaller.
var backends = []struct {
	name  string
	open  func(t *testing.T, sessions ...string) store.EventStore
	scale int // divides the event counts
}{
	{"memory", func(_ *testing.T, sessions ...string) store.EventStore { return newMemEvents(sessions...) }, 1},
	{"sqlite", func(t *testing.T, sessions ...string) store.EventStore { return openStore(t, sessions...) }, 20},
}

// TestSubscribeDuringHeavyAppends starts subscribers, some with a buffer
// small enough to overflow and consumers that lag, while several goroutines
// append: each sees every seq once, in order.
func TestSubscribeDuringHeavyAppends(t *testing.T) {
	tests := []struct {
		name   string
		buffer int
		slow   bool
	}{
		{"default buffer", 0, false},
		{"tiny buffer, lagging consumers", 4, true},
	}
	for _, be := range backends {
		for _, tc := range tests {
			t.Run(be.name+"/"+tc.name, func(t *testing.T) {
				writers, perWriter := 8, 2000/be.scale
				total := int64(writers * perWriter)
				st := be.open(t, "s-1", "s-noise")
				l := newLog(t, st, eventlog.WithSubscriberBuffer(tc.buffer), eventlog.WithReplayPage(64))
				ctx := context.Background()
				var wg sync.WaitGroup
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := 0; n < perWriter; n++ {
							if _, err := l.Append(ctx, "s-1", "x", n); err != nil {
								t.Error(err)
								return
							}
							if n%5 == 0 {
								l.Append(ctx, "s-noise", "x", n)
							}
						}
					}()
				}
				var readers []*reader
				for i := 0; i < 6; i++ {
					// Subscribe at different points of the stream, some from 0
					// and some from wherever the log is now.
					last, _ := l.LastSeq(ctx, "s-1")
					after := int64(0)
					if i%2 == 1 {
						after = last
					}
					sub, err := l.Subscribe(ctx, "s-1", after)
					if err != nil {
						t.Fatal(err)
					}
					defer sub.Close()
					readers = append(readers, startReader(t, sub, after, tc.slow))
					for now := last; now < last+total/10 && now < total; {
						runtime.Gosched()
						now, _ = l.LastSeq(ctx, "s-1")
					}
				}
				wg.Wait()
				for _, r := range readers {
					r.waitFor(total, 20*time.Second)
					r.check(total)
				}
			})
		}
	}
}

// TestStalledSubscriberGetsEverything: a subscriber that reads nothing
// while 100,000 events are appended then receives all of them once, in
// order. (That it does not slow Append is BenchmarkAppendStalledSubscriber.)
func TestStalledSubscriberGetsEverything(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			total := int64(100_000 / be.scale)
			const writers = 32
			st := be.open(t, "s-1")
			l := newLog(t, st)
			ctx := context.Background()
			sub, err := l.Subscribe(ctx, "s-1", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := w; n < int(total); n += writers {
						if _, err := l.Append(ctx, "s-1", "x", n); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			r := startReader(t, sub, 0, false)
			r.waitFor(total, 60*time.Second)
			r.check(total)
			if r.lastAtCU != 0 {
				t.Errorf("CaughtUp after seq %d, want 0 (nothing was stored when it subscribed)", r.lastAtCU)
			}
		})
	}
}

func TestTwoSubscribers(t *testing.T) {
	st := openStore(t, "s-1")
	l := newLog(t, st, eventlog.WithSubscriberBuffer(16))
	ctx := context.Background()
	appendN(t, l, "s-1", 20)
	fast, err := l.Subscribe(ctx, "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := l.Subscribe(ctx, "s-1", 5)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	rf := startReader(t, fast, 0, false)
	rs := startReader(t, slow, 5, true)
	appendN(t, l, "s-1", 480)
	rf.waitFor(500, 10*time.Second)
	rs.waitFor(500, 10*time.Second)
	rf.check(500)
	rs.check(500)
}

// TestSubscriptionEndsWithoutLeak ends subscriptions in each possible way,
// some of them blocked on a full channel, and checks that the channel
// closes, Err says why, and no goroutine is left.
func TestSubscriptionEndsWithoutLeak(t *testing.T) {
	tests := []struct {
		name    string
		end     func(sub *eventlog.Subscription, cancel context.CancelFunc, l *eventlog.Log)
		wantErr error
	}{
		{"Close", func(sub *eventlog.Subscription, _ context.CancelFunc, _ *eventlog.Log) { sub.Close() }, nil},
		{"cancel", func(_ *eventlog.Subscription, cancel context.CancelFunc, _ *eventlog.Log) { cancel() }, context.Canceled},
		{"log Close", func(_ *eventlog.Subscription, _ context.CancelFunc, l *eventlog.Log) { l.Close() }, eventlog.ErrClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, "s-1")
			l := newLog(t, st, eventlog.WithSubscriberBuffer(8))
			appendN(t, l, "s-1", 3)
			before := runtime.NumGoroutine()
			var subs []*eventlog.Subscription
			var cancels []context.CancelFunc
			for i := 0; i < 4; i++ {
				ctx, cancel := context.WithCancel(context.Background())
				sub, err := l.Subscribe(ctx, "s-1", 0)
				if err != nil {
					t.Fatal(err)
				}
				subs, cancels = append(subs, sub), append(cancels, cancel)
			}
			// Two subscriptions read a little, all are left blocked mid-stream
			// (one in replay, others with an overflowing buffer).
			for _, sub := range subs[:2] {
				<-sub.Items()
			}
			appendN(t, l, "s-1", 50)
			for i, sub := range subs {
				tc.end(sub, cancels[i], l)
			}
			for i, sub := range subs {
				deadline := time.After(5 * time.Second)
			drain:
				for {
					select {
					case _, ok := <-sub.Items():
						if !ok {
							break drain
						}
					case <-deadline:
						t.Fatalf("subscription %d: channel not closed", i)
					}
				}
				if err := sub.Err(); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
					t.Errorf("subscription %d: Err = %v, want %v", i, err, tc.wantErr)
				}
				sub.Close() // idempotent, also after the end
				cancels[i]()
			}
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<16)
					t.Fatalf("%d goroutines, %d before the subscriptions:\n%s",
						runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				}
				runtime.Gosched()
			}
		})
	}
}

// brokenReads fails LastSeq or ReadEvents on demand.
type brokenReads struct {
	store.EventStore
	failLastSeq, failRead atomic.Bool
}

func (b *brokenReads) LastSeq(ctx context.Context, id string) (int64, error) {
	if b.failLastSeq.Load() {
		return 0, errInjected
	}
	return b.EventStore.LastSeq(ctx, id)
}

func (b *brokenReads) ScanEvents(ctx context.Context, id string, after int64, limit int, fn func(*store.EventRow) error) error {
	if b.failRead.Load() {
		return errInjected
	}
	return b.EventStore.ScanEvents(ctx, id, after, limit, fn)
}

func TestSubscribeStoreFailures(t *testing.T) {
	mem := newMemEvents("s-1")
	br := &brokenReads{EventStore: mem}
	appendN(t, newLog(t, br), "s-1", 3) // written by another log: l asks the store
	l := newLog(t, br)
	ctx := context.Background()

	br.failLastSeq.Store(true)
	if _, err := l.Subscribe(ctx, "s-1", 0); !errors.Is(err, errInjected) || errs.CodeOf(err) != errcode.Internal {
		t.Errorf("Subscribe with a failing store: %v (code %q), want the failure with code internal", err, errs.CodeOf(err))
	}
	br.failLastSeq.Store(false)

	br.failRead.Store(true)
	sub, err := l.Subscribe(ctx, "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	for it := range sub.Items() {
		t.Errorf("got %+v from a replay that cannot read", it)
	}
	if err := sub.Err(); !errors.Is(err, errInjected) || errs.CodeOf(err) != errcode.Internal {
		t.Errorf("Err = %v (code %q), want the read failure with code internal", err, errs.CodeOf(err))
	}
	sub.Close()
}
