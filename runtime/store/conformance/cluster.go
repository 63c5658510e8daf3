package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

func testDaemons(t *testing.T, st store.Store) {
	ctx := context.Background()
	wantErr(t, st.RegisterDaemon(ctx, store.Daemon{GRPCAddr: "x"}), store.ErrInvalid)
	must(t, st.RegisterDaemon(ctx, store.Daemon{ID: "d-b", GRPCAddr: "127.0.0.1:2", Version: "0.1.0"}))
	must(t, st.RegisterDaemon(ctx, store.Daemon{ID: "d-a", GRPCAddr: "127.0.0.1:1"}))
	list, err := st.ListDaemons(ctx)
	must(t, err)
	if len(list) != 2 || list[0].ID != "d-a" || list[1].GRPCAddr != "127.0.0.1:2" || list[0].Version != "" || list[1].Version != "0.1.0" {
		t.Fatalf("daemons = %+v, want d-a (no version), d-b 0.1.0", list)
	}
	first := list[0].HeartbeatAt
	if first.IsZero() || first.Location() != time.UTC {
		t.Fatalf("heartbeat %v: want a UTC time", first)
	}
	// A refresh moves the heartbeat and may change the address.
	deadline := time.Now().Add(10 * time.Second)
	for {
		must(t, st.RegisterDaemon(ctx, store.Daemon{ID: "d-a", GRPCAddr: "127.0.0.1:3", Version: "0.2.0"}))
		list, err = st.ListDaemons(ctx)
		must(t, err)
		if list[0].HeartbeatAt.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat did not move past %v", first)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if list[0].GRPCAddr != "127.0.0.1:3" || list[0].Version != "0.2.0" {
		t.Fatalf("address and version after refresh (a restart on a new build) = %q, %q", list[0].GRPCAddr, list[0].Version)
	}
	must(t, st.RemoveDaemon(ctx, "d-a"))
	must(t, st.RemoveDaemon(ctx, "d-unknown"))
	list, err = st.ListDaemons(ctx)
	must(t, err)
	if len(list) != 1 || list[0].ID != "d-b" {
		t.Fatalf("daemons after remove = %+v", list)
	}
}

func testLeaseAcquire(t *testing.T, st store.Store) {
	ctx := context.Background()
	must(t, st.RegisterDaemon(ctx, store.Daemon{ID: "d-a", GRPCAddr: "10.0.0.1:7001", Version: "0.3.1"}))
	_, err := st.GetLease(ctx, "s-1")
	wantErr(t, err, store.ErrNotFound)
	for _, bad := range []struct{ s, o string }{{"", "d-a"}, {"s-1", ""}} {
		_, err := st.AcquireLease(ctx, bad.s, bad.o, time.Minute)
		wantErr(t, err, store.ErrInvalid)
	}
	a, err := st.AcquireLease(ctx, "s-1", "d-a", time.Minute)
	must(t, err)
	if a.OwnerID != "d-a" || a.Epoch != 1 || !a.ExpiresAt.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("first lease = %+v", a)
	}
	held, err := st.AcquireLease(ctx, "s-1", "d-b", time.Minute)
	var he *store.LeaseHeldError
	if !errors.As(err, &he) || !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("acquire of a held lease: %v, want a LeaseHeldError", err)
	}
	if he.Lease.OwnerID != "d-a" || he.Lease.Epoch != 1 || he.Lease.OwnerAddr != "10.0.0.1:7001" || held.OwnerAddr != "10.0.0.1:7001" ||
		he.Lease.OwnerVersion != "0.3.1" {
		t.Fatalf("held lease = %+v / %+v, want d-a 0.3.1 at 10.0.0.1:7001 epoch 1", he.Lease, held)
	}
	// The owner acquiring again (a restart) gets a new epoch.
	a2, err := st.AcquireLease(ctx, "s-1", "d-a", time.Minute)
	must(t, err)
	if a2.Epoch != 2 {
		t.Fatalf("re-acquire by the owner: epoch %d, want 2", a2.Epoch)
	}
	got, err := st.GetLease(ctx, "s-1")
	must(t, err)
	if got.OwnerID != "d-a" || got.Epoch != 2 || got.OwnerAddr != "10.0.0.1:7001" {
		t.Fatalf("GetLease = %+v", got)
	}
	// Released: anyone takes it at once, and the epoch keeps rising.
	must(t, st.ReleaseLease(ctx, a)) // stale epoch: no effect
	if _, err := st.AcquireLease(ctx, "s-1", "d-b", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("a release with a stale epoch freed the lease: %v", err)
	}
	must(t, st.ReleaseLease(ctx, a2))
	b, err := st.AcquireLease(ctx, "s-1", "d-b", time.Minute)
	must(t, err)
	if b.OwnerID != "d-b" || b.Epoch != 3 {
		t.Fatalf("lease after release = %+v, want d-b epoch 3", b)
	}
}

func testLeaseExpiryAndRenew(t *testing.T, st store.Store) {
	ctx := context.Background()
	a, err := st.AcquireLease(ctx, "s-short", "d-a", 100*time.Millisecond)
	must(t, err)
	long, err := st.AcquireLease(ctx, "s-long", "d-a", 100*time.Millisecond)
	must(t, err)
	// Renewing keeps s-long; s-short is left to expire and taken over.
	deadline := time.Now().Add(20 * time.Second)
	var b store.Lease
	for {
		kept, err := st.RenewLeases(ctx, "d-a", []store.Lease{long}, time.Minute)
		must(t, err)
		if len(kept) != 1 || kept[0] != "s-long" {
			t.Fatalf("renew kept %v, want [s-long]", kept)
		}
		b, err = st.AcquireLease(ctx, "s-short", "d-b", time.Minute)
		if err == nil {
			break
		}
		wantErr(t, err, store.ErrLeaseHeld)
		if time.Now().After(deadline) {
			t.Fatal("a 100 ms lease did not expire within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.OwnerID != "d-b" || b.Epoch != a.Epoch+1 {
		t.Fatalf("takeover lease = %+v, want d-b epoch %d", b, a.Epoch+1)
	}
	kept, err := st.RenewLeases(ctx, "d-a", []store.Lease{a, long}, time.Minute)
	must(t, err)
	if len(kept) != 1 || kept[0] != "s-long" {
		t.Fatalf("renew after takeover kept %v, want only s-long", kept)
	}
	if _, err := st.AcquireLease(ctx, "s-long", "d-b", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("a renewed lease was taken: %v", err)
	}
	kept, err = st.RenewLeases(ctx, "d-a", nil, time.Minute)
	must(t, err)
	if len(kept) != 0 {
		t.Fatalf("renew of nothing kept %v", kept)
	}
}

func testLeaseRace(t *testing.T, st store.Store) {
	ctx := context.Background()
	owners := []string{"d-1", "d-2", "d-3", "d-4", "d-5", "d-6"}
	for _, sid := range []string{"s-r1", "s-r2", "s-r3"} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []store.Lease
		for _, o := range owners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := st.AcquireLease(ctx, sid, o, time.Minute)
				if err == nil {
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrLeaseHeld) {
					t.Errorf("acquire %s by %s: %v", sid, o, err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 || won[0].Epoch != 1 {
			t.Fatalf("%s: %d daemons acquired the lease (%+v), want exactly 1 with epoch 1", sid, len(won), won)
		}
	}
}

func testFencedAppend(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-f", "s-other")
	a, err := st.AcquireLease(ctx, "s-f", "d-a", time.Minute)
	must(t, err)
	fa := store.Under(a.Fence())
	ev := func(id string, seq int64) store.Event {
		return store.Event{SessionID: id, Seq: seq, Kind: "k", Payload: raw(`{}`), TS: t0}
	}
	must(t, st.AppendEvents(ctx, fa, []store.Event{ev("s-f", 1)}))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-other", 1)}))
	// A writer with no fence on a session of the batch refuses all of it:
	// its other sessions are not written unfenced.
	wantErr(t, st.AppendEvents(ctx, fa, []store.Event{ev("s-f", 2), ev("s-other", 2)}), store.ErrLeaseLost)
	// Another daemon takes the session over (the lease was released).
	must(t, st.ReleaseLease(ctx, a))
	b, err := st.AcquireLease(ctx, "s-f", "d-b", time.Minute)
	must(t, err)
	wantErr(t, st.AppendEvents(ctx, fa, []store.Event{ev("s-f", 2)}), store.ErrLeaseLost)
	for id, want := range map[string]int64{"s-f": 1, "s-other": 1} {
		if last, err := st.LastSeq(ctx, id); err != nil || last != want {
			t.Fatalf("%s after a refused fenced append: last seq %d (%v), want %d: nothing of it kept", id, last, err, want)
		}
	}
	// A fence for a session that never had a lease is refused too, and so
	// is every write of the zero Writer (no lease at all).
	err = st.AppendEvents(ctx, store.Under(store.Fence{Key: "s-other", OwnerID: "d-a", Epoch: 1}), []store.Event{ev("s-other", 2)})
	wantErr(t, err, store.ErrLeaseLost)
	wantErr(t, st.AppendEvents(ctx, store.Writer{}, []store.Event{ev("s-other", 2)}), store.ErrLeaseLost)
	fb := store.Under(b.Fence())
	must(t, st.AppendEvents(ctx, fb, []store.Event{ev("s-f", 2)}))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{ev("s-other", 2)}))
	// Deleting the session removes its lease.
	n, err := st.DeleteSessions(ctx, fb, []string{"s-f"})
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d", n)
	}
	_, err = st.GetLease(ctx, "s-f")
	wantErr(t, err, store.ErrNotFound)
}

// testFencedWrites: after a takeover, every other write of the old owner
// (the session row, the history, a setting, a delete) is refused with
// ErrLeaseLost and changes nothing; the new owner's writes go through.
func testFencedWrites(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-w", "s-x")
	must(t, st.AppendHistory(ctx, store.Unfenced(), "s-w", rawList(`{"m":1}`)))
	must(t, st.PutSetting(ctx, store.Unfenced(), "ns", "s-w", raw(`["t1"]`)))
	a, err := st.AcquireLease(ctx, "s-w", "d-a", time.Minute)
	must(t, err)
	fa := store.Under(a.Fence())
	// While A holds the lease, its fenced writes go through.
	must(t, st.UpdateSession(ctx, fa, "s-w", store.SessionUpdate{Mode: ptr("plan")}))
	must(t, st.AppendHistory(ctx, fa, "s-w", rawList(`{"m":2}`)))
	must(t, st.PutSetting(ctx, fa, "ns", "s-w", raw(`["t2"]`)))
	// B takes the session over.
	must(t, st.ReleaseLease(ctx, a))
	b, err := st.AcquireLease(ctx, "s-w", "d-b", time.Minute)
	must(t, err)
	wantErr(t, st.UpdateSession(ctx, fa, "s-w", store.SessionUpdate{Mode: ptr("auto"), Closed: ptr(true), Title: ptr("stale")}), store.ErrLeaseLost)
	wantErr(t, st.UpdateSession(ctx, fa, "s-w", store.SessionUpdate{}), store.ErrLeaseLost)
	wantErr(t, st.AppendHistory(ctx, fa, "s-w", rawList(`{"m":"stale"}`)), store.ErrLeaseLost)
	wantErr(t, st.ReplaceHistory(ctx, fa, "s-w", rawList(`{"m":"stale"}`)), store.ErrLeaseLost)
	wantErr(t, st.ReplaceHistory(ctx, fa, "s-w", nil), store.ErrLeaseLost)
	wantErr(t, st.PutSetting(ctx, fa, "ns", "s-w", raw(`["stale"]`)), store.ErrLeaseLost)
	wantErr(t, st.DeleteSetting(ctx, fa, "ns", "s-w"), store.ErrLeaseLost)
	if up, ok := st.(store.SettingUpdater); ok {
		called := false
		err := up.UpdateSetting(ctx, fa, "ns", "s-w", func(json.RawMessage) (json.RawMessage, error) {
			called = true
			return raw(`["stale"]`), nil
		})
		wantErr(t, err, store.ErrLeaseLost)
		if called {
			t.Fatal("UpdateSetting ran the updater of a daemon that lost the lease")
		}
	}
	n, err := st.DeleteSessions(ctx, fa.With(store.Fence{Key: "s-x"}), []string{"s-x", "s-w"})
	wantErr(t, err, store.ErrLeaseLost)
	if n != 0 {
		t.Fatalf("a refused delete reports %d deleted", n)
	}
	// Nothing of the refused writes was kept.
	got, err := st.GetSession(ctx, "s-w")
	must(t, err)
	if got.Mode != "plan" || got.Closed || got.Title == "stale" {
		t.Fatalf("session after refused writes: mode %q closed %v title %q, want plan, open, not stale", got.Mode, got.Closed, got.Title)
	}
	hist, err := st.LoadHistory(ctx, "s-w")
	must(t, err)
	if len(hist) != 2 || !jsonEqual(hist[1], raw(`{"m":2}`)) {
		t.Fatalf("history after refused writes: %s", hist)
	}
	v, err := st.GetSetting(ctx, "ns", "s-w")
	must(t, err)
	if !jsonEqual(v, raw(`["t2"]`)) {
		t.Fatalf("setting after refused writes: %s", v)
	}
	if _, err := st.GetSession(ctx, "s-x"); err != nil {
		t.Fatalf("s-x after a refused delete naming it: %v", err)
	}
	// The new owner writes under its own fence; Unfenced writes are not checked.
	fb := store.Under(b.Fence())
	must(t, st.UpdateSession(ctx, fb, "s-w", store.SessionUpdate{Mode: ptr("auto")}))
	must(t, st.ReplaceHistory(ctx, fb, "s-w", rawList(`{"m":"b"}`)))
	must(t, st.DeleteSetting(ctx, fb, "ns", "s-w"))
	must(t, st.UpdateSession(ctx, store.Unfenced(), "s-x", store.SessionUpdate{Title: ptr("x")}))
	// A writer fenced on another session does not write s-w's row (no
	// fence on it), and a setting written with it is checked against it.
	fx := store.Under(store.Fence{Key: "s-x", OwnerID: "d-a", Epoch: 1})
	wantErr(t, st.UpdateSession(ctx, fx, "s-w", store.SessionUpdate{Title: ptr("w")}), store.ErrLeaseLost)
	wantErr(t, st.PutSetting(ctx, fx, "ns", "other", raw(`1`)), store.ErrLeaseLost)
	if _, err := st.GetSetting(ctx, "ns", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused setting was stored: %v", err)
	}
	// The zero Writer holds no lease: a setting written with it is refused.
	wantErr(t, st.PutSetting(ctx, store.Writer{}, "ns", "other", raw(`1`)), store.ErrLeaseLost)
	n, err = st.DeleteSessions(ctx, fb, []string{"s-w"})
	must(t, err)
	if n != 1 {
		t.Fatalf("the owner deleted %d sessions, want 1", n)
	}
}

// testDeposedOwner: daemon A's lease runs out and B takes the session over
// (epoch + 1) while A never learnt of it. Every write A makes with the
// writer of its lease is refused with ErrLeaseLost, and the session's rows
// (the session row, events, history, the settings A's lease guarded) are
// as B left them.
func testDeposedOwner(t *testing.T, st store.Store) {
	ctx := context.Background()
	createSessions(t, st, "s-d", "s-d2")
	// A's lease expires at once: A still writes under it until someone
	// takes it (expiry alone deposes nobody).
	a, err := st.AcquireLease(ctx, "s-d", "d-a", time.Microsecond)
	must(t, err)
	wa := store.Under(a.Fence())
	ev := func(seq int64, kind string) store.Event {
		return store.Event{SessionID: "s-d", Seq: seq, Kind: kind, Payload: raw(`{}`), TS: t0}
	}
	must(t, st.AppendEvents(ctx, wa, []store.Event{ev(1, "a")}))
	must(t, st.AppendHistory(ctx, wa, "s-d", rawList(`{"by":"a"}`)))
	must(t, st.UpdateSession(ctx, wa, "s-d", store.SessionUpdate{Title: ptr("a")}))
	must(t, st.PutSetting(ctx, wa, "ns", "s-d", raw(`"a"`)))
	must(t, st.PutSetting(ctx, wa, "ns", "s-d-gone", raw(`"a"`)))

	b, err := st.AcquireLease(ctx, "s-d", "d-b", time.Minute)
	must(t, err)
	if b.OwnerID != "d-b" || b.Epoch != a.Epoch+1 {
		t.Fatalf("takeover: lease %+v, want d-b at epoch %d", b, a.Epoch+1)
	}
	wb := store.Under(b.Fence())
	must(t, st.AppendEvents(ctx, wb, []store.Event{ev(2, "b")}))
	must(t, st.PutSetting(ctx, wb, "ns", "s-d", raw(`"b"`)))

	refused := map[string]error{
		"AppendEvents":   st.AppendEvents(ctx, wa, []store.Event{ev(3, "a")}),
		"UpdateSession":  st.UpdateSession(ctx, wa, "s-d", store.SessionUpdate{Title: ptr("stale"), Closed: ptr(true)}),
		"AppendHistory":  st.AppendHistory(ctx, wa, "s-d", rawList(`{"by":"stale"}`)),
		"ReplaceHistory": st.ReplaceHistory(ctx, wa, "s-d", nil),
		"PutSetting":     st.PutSetting(ctx, wa, "ns", "s-d", raw(`"stale"`)),
		"DeleteSetting":  st.DeleteSetting(ctx, wa, "ns", "s-d-gone"),
		// A's writer names no fence on s-d2: it cannot write it either.
		"AppendEvents of another session": st.AppendEvents(ctx, wa, []store.Event{{SessionID: "s-d2", Seq: 1, Kind: "a", TS: t0}}),
	}
	if up, ok := st.(store.SettingUpdater); ok {
		refused["UpdateSetting"] = up.UpdateSetting(ctx, wa, "ns", "s-d", func(json.RawMessage) (json.RawMessage, error) {
			t.Error("UpdateSetting ran the updater of a deposed daemon")
			return raw(`"stale"`), nil
		})
	}
	n, err := st.DeleteSessions(ctx, wa, []string{"s-d"})
	refused["DeleteSessions"] = err
	if n != 0 {
		t.Errorf("a deposed daemon's delete reports %d deleted", n)
	}
	for op, err := range refused {
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s by the deposed daemon: %v, want ErrLeaseLost", op, err)
		}
	}

	evs, err := st.ReadEvents(ctx, "s-d", 0, 0)
	must(t, err)
	if len(evs) != 2 || evs[0].Kind != "a" || evs[1].Kind != "b" {
		t.Fatalf("events after the deposed daemon's writes: %+v, want a then b", evs)
	}
	if last, err := st.LastSeq(ctx, "s-d2"); err != nil || last != 0 {
		t.Fatalf("s-d2 last seq %d (%v), want 0", last, err)
	}
	got, err := st.GetSession(ctx, "s-d")
	must(t, err)
	if got.Title != "a" || got.Closed {
		t.Fatalf("session after the deposed daemon's writes: title %q closed %v, want a, open", got.Title, got.Closed)
	}
	hist, err := st.LoadHistory(ctx, "s-d")
	must(t, err)
	if len(hist) != 1 || !jsonEqual(hist[0], raw(`{"by":"a"}`)) {
		t.Fatalf("history after the deposed daemon's writes: %s", hist)
	}
	for key, want := range map[string]string{"s-d": `"b"`, "s-d-gone": `"a"`} {
		v, err := st.GetSetting(ctx, "ns", key)
		must(t, err)
		if !jsonEqual(v, raw(want)) {
			t.Fatalf("setting %s after the deposed daemon's writes: %s, want %s", key, v, want)
		}
	}
	l, err := st.GetLease(ctx, "s-d")
	must(t, err)
	if l.OwnerID != "d-b" || l.Epoch != b.Epoch {
		t.Fatalf("lease after the deposed daemon's writes: %+v", l)
	}
}

func testUpdateSetting(t *testing.T, st store.Store) {
	ctx := context.Background()
	up, ok := st.(store.SettingUpdater)
	if !ok {
		t.Fatal("the store does not implement store.SettingUpdater")
	}
	incr := func(old json.RawMessage) (json.RawMessage, error) {
		var n int
		if err := json.Unmarshal(old, &n); err != nil {
			return nil, err
		}
		return json.Marshal(n + 1)
	}
	wantErr(t, up.UpdateSetting(ctx, store.Unfenced(), "ns", "absent", incr), store.ErrNotFound)
	must(t, st.PutSetting(ctx, store.Unfenced(), "ns", "n", raw(`0`)))
	boom := errors.New("boom")
	if err := up.UpdateSetting(ctx, store.Unfenced(), "ns", "n", func(json.RawMessage) (json.RawMessage, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("updater error = %v, want it returned as is", err)
	}
	wantErr(t, up.UpdateSetting(ctx, store.Unfenced(), "ns", "n", func(json.RawMessage) (json.RawMessage, error) { return raw(`{`), nil }), store.ErrInvalid)
	// Concurrent read-modify-write: no update lost.
	const workers, each = 4, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := up.UpdateSetting(ctx, store.Unfenced(), "ns", "n", incr); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := st.GetSetting(ctx, "ns", "n")
	must(t, err)
	if string(v) != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %s after %d concurrent increments", v, workers*each)
	}
}
