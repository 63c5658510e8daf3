package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// openStore returns a fresh SQLite store with the given sessions created.
func openStore(tb testing.TB, sessions ...string) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(filepath.Join(tb.TempDir(), sqlite.FileName))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	for _, id := range sessions {
		err := st.CreateSession(context.Background(), store.Session{SessionID: id, Workdir: "/w", Kind: store.KindChat, CreatedAt: time.Now()})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

func newLog(tb testing.TB, st store.EventStore, opts ...eventlog.Option) *eventlog.Log {
	tb.Helper()
	l := eventlog.New(st, opts...)
	tb.Cleanup(func() { l.Close() })
	return l
}

func sessionIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s-%03d", i)
	}
	return out
}

type delta struct {
	Writer int `json:"w"`
	N      int `json:"n"`
}

// checkStored asserts that the session's stored events are exactly seqs
// 1..n and returns them.
func checkStored(t *testing.T, st store.EventStore, sessionID string, n int) []store.Event {
	t.Helper()
	evs, err := st.ReadEvents(context.Background(), sessionID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%s: %d stored events, want %d", sessionID, len(evs), n)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("%s: stored event %d has seq %d (gap or duplicate)", sessionID, i, e.Seq)
		}
	}
	return evs
}

func TestAppendConcurrentSeqsAreContiguous(t *testing.T) {
	const sessions, writers, perWriter = 12, 4, 60
	ids := sessionIDs(sessions)
	st := openStore(t, ids...)
	l := newLog(t, st)
	ctx := context.Background()

	var mu sync.Mutex
	got := map[string]map[int64]store.Event{}
	for _, id := range ids {
		got[id] = map[int64]store.Event{}
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < perWriter; n++ {
					ev, err := l.Append(ctx, id, "message.delta", delta{w, n})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if _, dup := got[id][ev.Seq]; dup {
						t.Errorf("%s: seq %d returned twice", id, ev.Seq)
					}
					got[id][ev.Seq] = ev
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for _, id := range ids {
		stored := checkStored(t, st, id, writers*perWriter)
		var prev time.Time
		for _, e := range stored {
			r := got[id][e.Seq]
			if string(r.Payload) != string(e.Payload) || r.Kind != e.Kind || !r.TS.Equal(e.TS) {
				t.Fatalf("%s seq %d: Append returned %+v, store has %+v", id, e.Seq, r, e)
			}
			if e.TS.Before(prev) {
				t.Fatalf("%s seq %d: timestamp went backwards", id, e.Seq)
			}
			prev = e.TS
		}
		last, err := l.LastSeq(ctx, id)
		if err != nil || last != writers*perWriter {
			t.Errorf("LastSeq(%s) = %d, %v; want %d", id, last, err, writers*perWriter)
		}
	}
}

func TestAppendContinuesStoredSeqs(t *testing.T) {
	st := openStore(t, "s-1")
	ctx := context.Background()
	var pre []store.Event
	for i := int64(1); i <= 5; i++ {
		pre = append(pre, store.Event{SessionID: "s-1", Seq: i, Kind: "x", Payload: json.RawMessage(`{}`), TS: time.Now()})
	}
	if err := st.AppendEvents(ctx, store.Unfenced(), pre); err != nil {
		t.Fatal(err)
	}
	for round, want := range []int64{6, 7} {
		l := eventlog.New(st) // a new daemon run over the same store
		last, err := l.LastSeq(ctx, "s-1")
		if err != nil || last != want-1 {
			t.Errorf("round %d: LastSeq = %d, %v; want %d", round, last, err, want-1)
		}
		ev, err := l.Append(ctx, "s-1", "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != want {
			t.Errorf("round %d: seq = %d, want %d", round, ev.Seq, want)
		}
		l.Close()
	}
}

func TestAppendPayloadsAndArguments(t *testing.T) {
	st := openStore(t, "s-1")
	l := newLog(t, st, eventlog.WithClock(func() time.Time {
		return time.Date(2025, 1, 2, 3, 4, 5, 6_789_123, time.FixedZone("X", 7200))
	}))
	ctx := context.Background()
	tests := []struct {
		name        string
		session     string
		kind        string
		payload     any
		wantPayload string
		wantCode    string
	}{
		{"struct", "s-1", "turn.started", struct {
			TurnID string `json:"turnId"`
		}{"t-1"}, `{"turnId":"t-1"}`, ""},
		{"map", "s-1", "mode.changed", map[string]string{"mode": "plan"}, `{"mode":"plan"}`, ""},
		{"raw JSON kept as is", "s-1", "x", json.RawMessage(`{"a": 1}`), `{"a": 1}`, ""},
		{"nil", "s-1", "x", nil, `null`, ""},
		{"nil raw", "s-1", "x", json.RawMessage(nil), `null`, ""},
		{"bad raw JSON", "s-1", "x", json.RawMessage(`{`), "", errcode.Internal},
		{"not encodable", "s-1", "x", make(chan int), "", errcode.Internal},
		{"empty kind", "s-1", "", nil, "", errcode.InvalidParams},
		{"empty session", "", "x", nil, "", errcode.InvalidParams},
		{"session without a row", "s-none", "x", nil, "", errcode.NotFound},
	}
	wantSeq := int64(1)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := l.Append(ctx, tc.session, tc.kind, tc.payload)
			if tc.wantCode != "" {
				if got := errs.CodeOf(err); got != tc.wantCode {
					t.Fatalf("error %v has code %q, want %q", err, got, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Seq != wantSeq || string(ev.Payload) != tc.wantPayload || ev.Kind != tc.kind || ev.SessionID != tc.session {
				t.Errorf("Append = %+v (%s), want seq %d payload %s", ev, ev.Payload, wantSeq, tc.wantPayload)
			}
			if want := time.Date(2025, 1, 2, 1, 4, 5, 6_789_000, time.UTC); !ev.TS.Equal(want) || ev.TS.Location() != time.UTC {
				t.Errorf("TS = %v, want %v (UTC, microseconds)", ev.TS, want)
			}
			wantSeq++
		})
	}
	checkStored(t, st, "s-1", int(wantSeq-1))
}

// flakyStore fails AppendEvents when fail says so.
type flakyStore struct {
	store.EventStore
	fail func(evs []store.Event) bool
}

var errInjected = errors.New("injected commit failure")

func (f *flakyStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	if f.fail(evs) {
		return errInjected
	}
	return f.EventStore.AppendEvents(ctx, w, evs)
}

// TestFailedCommitIsHeld: a commit the store cannot write is held, not
// dropped: Append fails with ErrHeld (store_unavailable) but the event keeps
// its seq, subscribers get it from memory marked Unstored, and it is stored
// before the next event, so the stored log has no gap.
func TestFailedCommitIsHeld(t *testing.T) {
	st := openStore(t, "s-1")
	var failNext atomic.Bool
	l := newLog(t, &flakyStore{st, func([]store.Event) bool { return failNext.Swap(false) }})
	ctx := context.Background()
	sub, err := l.Subscribe(ctx, "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	steps := []bool{false, false, true, false, true, true, false}
	for i, fail := range steps {
		failNext.Store(fail)
		ev, err := l.Append(ctx, "s-1", "x", i)
		if fail {
			if !errors.Is(err, eventlog.ErrHeld) || !errors.Is(err, errInjected) || errs.CodeOf(err) != errcode.StoreUnavailable {
				t.Fatalf("step %d: err = %v (code %q), want ErrHeld with code store_unavailable", i, err, errs.CodeOf(err))
			}
			if !ev.Unstored || ev.Seq != int64(i+1) {
				t.Fatalf("step %d: held event %+v, want seq %d marked Unstored", i, ev, i+1)
			}
			if n := l.Held("s-1"); n == 0 {
				t.Fatalf("step %d: Held = 0 after a held append", i)
			}
			continue
		}
		if err != nil || ev.Seq != int64(i+1) || ev.Unstored {
			t.Fatalf("step %d: Append = %+v, %v; want seq %d stored", i, ev, err, i+1)
		}
		if n := l.Held("s-1"); n != 0 {
			t.Fatalf("step %d: %d events still held after a commit", i, n)
		}
	}
	checkStored(t, st, "s-1", len(steps))
	if last, _ := l.LastSeq(ctx, "s-1"); last != int64(len(steps)) {
		t.Errorf("LastSeq = %d, want %d", last, len(steps))
	}
	// The subscription (the runtime's own consumers) saw every seq once, in
	// order, each as stored: the held ones once the store took them, never
	// from memory.
	<-sub.Items() // CaughtUp
	for i := range steps {
		it := <-sub.Items()
		if it.Event == nil || it.Event.Seq != int64(i+1) || it.Event.Unstored {
			t.Fatalf("delivery %d: %+v, want seq %d as stored", i, it.Event, i+1)
		}
	}
}

// TestHeldEventsAreRetried: while the store cannot write, events are held;
// once it can, the log stores them by itself (no further append needed),
// and a subscription that started during the outage gets them in order,
// as stored (the reader fails on an Unstored delivery).
func TestHeldEventsAreRetried(t *testing.T) {
	st := openStore(t, "s-1")
	var failing atomic.Bool
	l := newLog(t, &flakyStore{st, func([]store.Event) bool { return failing.Load() }})
	ctx := context.Background()
	if _, err := l.Append(ctx, "s-1", "x", 0); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	for i := 1; i <= 3; i++ {
		if ev, err := l.Append(ctx, "s-1", "x", i); !errors.Is(err, eventlog.ErrHeld) || ev.Seq != int64(i+1) {
			t.Fatalf("append %d during the outage: %+v %v", i, ev, err)
		}
	}
	late, err := l.Subscribe(ctx, "s-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	r := startReader(t, late, 0, false)
	if _, err := l.Append(ctx, "s-1", "x", 4); !errors.Is(err, eventlog.ErrHeld) {
		t.Fatalf("append during the outage: %v", err)
	}
	r.waitFor(1, 10*time.Second) // the stored one; the held ones wait for the store
	failing.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for l.Held("s-1") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still held 10 s after the store recovered", l.Held("s-1"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkStored(t, st, "s-1", 5)
	if ev, err := l.Append(ctx, "s-1", "x", 5); err != nil || ev.Seq != 6 {
		t.Fatalf("append after the recovery: %+v %v", ev, err)
	}
	r.waitFor(6, 10*time.Second)
	r.check(6)
}

// TestHeldEventsSurviveATimedOutCommit: a commit that carries a session's
// held events and times out (a lock held elsewhere) fails its own events
// (store_busy, not recorded) but keeps the held ones, as a retry that
// times out does: once the store writes again they are stored under the
// seqs they were sent with, and the next event follows them.
func TestHeldEventsSurviveATimedOutCommit(t *testing.T) {
	st := openStore(t, "s-1")
	var mode atomic.Int32 // 0 writes, 1 cannot write (held), 2 times out
	l := newLog(t, &erringStore{st, func() error {
		switch mode.Load() {
		case 1:
			return errInjected
		case 2:
			return fmt.Errorf("append: %w", store.ErrTimeout)
		}
		return nil
	}})
	ctx := context.Background()
	if _, err := l.Append(ctx, "s-1", "x", "first"); err != nil {
		t.Fatal(err)
	}
	mode.Store(1)
	if ev, err := l.Append(ctx, "s-1", "x", "held"); !errors.Is(err, eventlog.ErrHeld) || ev.Seq != 2 {
		t.Fatalf("append while the store cannot write: %+v %v", ev, err)
	}
	mode.Store(2)
	if _, err := l.Append(ctx, "s-1", "x", "timed out"); errs.CodeOf(err) != errcode.StoreBusy {
		t.Fatalf("append while the store times out: %v (code %q), want store_busy", err, errs.CodeOf(err))
	}
	if n := l.Held("s-1"); n != 1 {
		t.Fatalf("Held = %d after a timed-out commit, want the 1 held event kept", n)
	}
	mode.Store(0)
	ev, err := l.Append(ctx, "s-1", "x", "after")
	if err != nil || ev.Seq != 3 {
		t.Fatalf("append once the store writes: %+v %v, want seq 3", ev, err)
	}
	evs := checkStored(t, st, "s-1", 3)
	for i, want := range []string{`"first"`, `"held"`, `"after"`} {
		if string(evs[i].Payload) != want {
			t.Errorf("stored seq %d: %s, want %s", i+1, evs[i].Payload, want)
		}
	}
}

// erringStore fails AppendEvents with what fail returns (nil: writes).
type erringStore struct {
	store.EventStore
	fail func() error
}

func (f *erringStore) AppendEvents(ctx context.Context, w store.Writer, evs []store.Event) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.EventStore.AppendEvents(ctx, w, evs)
}

// TestFailedCommitsUnderLoad fails commits at random points while many
// goroutines append: every append is stored in the end (the failed ones
// held, then retried) under the seq Append reported, with no gap, and
// subscribers see each seq once, in order.
func TestFailedCommitsUnderLoad(t *testing.T) {
	ids := sessionIDs(3)
	st := openStore(t, ids...)
	// The first attempt to store every 5th event of the first session
	// fails.
	var failedMu sync.Mutex
	failed := map[int64]bool{}
	l := newLog(t, &flakyStore{st, func(evs []store.Event) bool {
		failedMu.Lock()
		defer failedMu.Unlock()
		for _, e := range evs {
			if e.SessionID == ids[0] && e.Seq%5 == 0 && !failed[e.Seq] {
				failed[e.Seq] = true
				return true
			}
		}
		return false
	}}, eventlog.WithSubscriberBuffer(4))
	ctx := context.Background()
	var mu sync.Mutex
	ok := map[string]map[int64]string{}
	for _, id := range ids {
		ok[id] = map[int64]string{}
	}
	readers := map[string]*reader{}
	for _, id := range ids {
		sub, err := l.Subscribe(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		readers[id] = startReader(t, sub, 0, true)
	}
	var failures atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 80; n++ {
				id := ids[(w+n)%len(ids)]
				ev, err := l.Append(ctx, id, "x", delta{w, n})
				if err != nil {
					if !errors.Is(err, eventlog.ErrHeld) || !errors.Is(err, errInjected) {
						t.Errorf("unexpected error: %v", err)
					}
					failures.Add(1)
				}
				mu.Lock()
				ok[id][ev.Seq] = string(ev.Payload)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failures.Load() == 0 {
		t.Fatal("no commit failed; the test did not test anything")
	}
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for l.Held(id) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		for _, e := range checkStored(t, st, id, len(ok[id])) {
			if ok[id][e.Seq] != string(e.Payload) {
				t.Fatalf("%s seq %d: stored %s, Append reported %s", id, e.Seq, e.Payload, ok[id][e.Seq])
			}
		}
		readers[id].waitFor(int64(len(ok[id])), 10*time.Second)
		readers[id].check(int64(len(ok[id])))
	}
	t.Logf("%d appends held, then stored; every stored seq contiguous", failures.Load())
}

// TestFailingSessionDoesNotFailOthers appends to a session without a row
// alongside healthy ones, so that they share batches.
func TestFailingSessionDoesNotFailOthers(t *testing.T) {
	ids := sessionIDs(4)
	st := openStore(t, ids...)
	l := newLog(t, st)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 50; n++ {
				if w%4 == 0 {
					if _, err := l.Append(ctx, "s-gone", "x", n); errs.CodeOf(err) != errcode.NotFound {
						t.Errorf("append to a session without a row: %v, want code not_found", err)
					}
					continue
				}
				if _, err := l.Append(ctx, ids[w%len(ids)], "x", n); err != nil {
					t.Errorf("healthy session failed: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		n := 0
		for w := 0; w < 8; w++ {
			if w%4 != 0 && ids[w%len(ids)] == id {
				n += 50
			}
		}
		checkStored(t, st, id, n)
	}
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	st := openStore(t, "s-1")
	l := eventlog.New(st)
	ctx := context.Background()
	var stored atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				_, err := l.Append(ctx, "s-1", "x", n)
				if n == 5 {
					once.Do(func() { close(started) })
				}
				if errors.Is(err, eventlog.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				stored.Add(1)
			}
		}()
	}
	<-started
	l.Close()
	wg.Wait()
	checkStored(t, st, "s-1", int(stored.Load()))
	if _, err := l.Subscribe(ctx, "s-1", 0); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	l.Close() // idempotent
}
