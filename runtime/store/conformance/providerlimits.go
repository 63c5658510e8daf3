package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

func take(t *testing.T, st store.Store, tk store.ProviderTake) time.Duration {
	t.Helper()
	wait, err := st.TakeProviderSlot(context.Background(), tk)
	must(t, err)
	return wait
}

func providerState(t *testing.T, st store.Store, provider string) store.ProviderLimitState {
	t.Helper()
	s, err := st.ProviderLimitState(context.Background(), provider)
	must(t, err)
	return s
}

// testProviderSlots: acquirers of two "daemons" (owners) taking slots at
// once never hold more than the bound, and every one gets its turn.
func testProviderSlots(t *testing.T, st store.Store) {
	ctx := context.Background()
	const slots, workers, each = 3, 12, 4
	var (
		mu            sync.Mutex
		inFlight, top int
		wg            sync.WaitGroup
		errs          = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tk := store.ProviderTake{Provider: "p", Holder: fmt.Sprintf("h-%d-%d", w, i), Owner: fmt.Sprintf("d-%d", w%2),
					Slots: slots, Lease: time.Minute}
				for {
					wait, err := st.TakeProviderSlot(ctx, tk)
					if err != nil {
						errs <- err
						return
					}
					if wait == 0 {
						break
					}
					if wait > time.Minute {
						errs <- fmt.Errorf("told to wait %v for a slot whose lease is a minute", wait)
						return
					}
					time.Sleep(time.Millisecond) // a release wakes real waiters; here, look again soon
				}
				mu.Lock()
				inFlight++
				top = max(top, inFlight)
				mu.Unlock()
				s, err := st.ProviderLimitState(ctx, "p")
				if err == nil && (s.Slots < 1 || s.Slots > slots) {
					err = fmt.Errorf("%d live slots while one is held, bound %d", s.Slots, slots)
				}
				mu.Lock()
				inFlight--
				mu.Unlock()
				if err == nil {
					err = st.ReleaseProviderSlot(ctx, "p", tk.Holder)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if top > slots {
		t.Fatalf("%d slots held at once, bound %d", top, slots)
	}
	if s := providerState(t, st, "p"); s.Slots != 0 {
		t.Fatalf("%d slots live after every release", s.Slots)
	}
	// Another provider's slots are its own.
	if w := take(t, st, store.ProviderTake{Provider: "q", Holder: "x", Slots: 1, Lease: time.Minute}); w != 0 {
		t.Fatalf("provider q's first take waits %v", w)
	}
}

// testProviderLeaseExpiry: a slot nobody renews (its daemon died) is
// reclaimed when its lease ends; a renewed one stays held; a renewal of a
// reclaimed slot reports it gone; ClearProviderSlots frees an owner's.
func testProviderLeaseExpiry(t *testing.T, st store.Store) {
	ctx := context.Background()
	a := store.ProviderTake{Provider: "p", Holder: "a", Owner: "d1", Slots: 1, Lease: 50 * time.Millisecond}
	b := a
	b.Holder, b.Owner = "b", "d2"
	if w := take(t, st, a); w != 0 {
		t.Fatalf("first take waits %v", w)
	}
	wait := take(t, st, b)
	if wait <= 0 || wait > a.Lease {
		t.Fatalf("the second take while a holds the only slot waits %v, want (0, %v]", wait, a.Lease)
	}
	kept, err := st.RenewProviderSlots(ctx, "p", []string{"a", "nobody"}, time.Hour)
	must(t, err)
	if len(kept) != 1 || kept[0] != "a" {
		t.Fatalf("renewed %v, want [a]", kept)
	}
	time.Sleep(wait) // the lease a had before its renewal
	if w := take(t, st, b); w < 50*time.Minute {
		t.Fatalf("a renewed for an hour, yet b waits only %v", w)
	}
	// a's daemon dies: nobody renews it, the lease (shortened here) ends.
	_, err = st.RenewProviderSlots(ctx, "p", []string{"a"}, 20*time.Millisecond)
	must(t, err)
	for range 100 {
		if wait = take(t, st, b); wait == 0 {
			break
		}
		time.Sleep(wait)
	}
	if wait != 0 {
		t.Fatal("the expired slot of a was never reclaimed")
	}
	if kept, err := st.RenewProviderSlots(ctx, "p", []string{"a"}, time.Hour); err != nil || len(kept) != 0 {
		t.Fatalf("renewing the reclaimed slot: kept %v, %v; want none", kept, err)
	}
	// b's daemon restarts: its slots of the previous run go at once.
	must(t, st.ClearProviderSlots(ctx, "d2"))
	if s := providerState(t, st, "p"); s.Slots != 0 {
		t.Fatalf("%d slots live after the owner's were cleared", s.Slots)
	}
}

// testProviderAllowance: past its allowance a take waits about the time
// one request takes to refill, and goes once it has; a take that waits for
// a slot uses no allowance.
func testProviderAllowance(t *testing.T, st store.Store) {
	const perMinute = 600 // 10 a second, at most 10 at once
	tk := store.ProviderTake{Provider: "p", PerMinute: perMinute}
	for i := range perMinute / 60 {
		if w := take(t, st, tk); w != 0 {
			t.Fatalf("take %d of a full allowance waits %v", i+1, w)
		}
	}
	// The allowance refills at 10 a second while the takes run: on a slow
	// machine the take after the tenth may find a new one. Take until one
	// waits; the refill alone cannot keep up with takes for long.
	var wait time.Duration
	for range perMinute {
		if wait = take(t, st, tk); wait != 0 {
			break
		}
	}
	if wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("the take past the allowance waits %v, want (0, 100ms]", wait)
	}
	for range 100 {
		time.Sleep(wait)
		if wait = take(t, st, tk); wait == 0 {
			break
		}
	}
	if wait != 0 {
		t.Fatal("the allowance never refilled")
	}

	// Two requests of allowance; a take refused for its slot uses none.
	q := store.ProviderTake{Provider: "q", Holder: "a", Slots: 1, PerMinute: 120, Lease: time.Minute}
	if w := take(t, st, q); w != 0 {
		t.Fatalf("first take waits %v", w)
	}
	q.Holder = "b"
	if w := take(t, st, q); w == 0 {
		t.Fatal("a second take got the only slot")
	}
	must(t, st.ReleaseProviderSlot(context.Background(), "q", "a"))
	q.Holder = "c"
	if w := take(t, st, q); w != 0 {
		t.Fatalf("after the release the take waits %v: the refused take used the allowance", w)
	}
}

// testProviderHold: a hold stops every take until it ends and only moves
// later; a take refused by it takes nothing.
func testProviderHold(t *testing.T, st store.Store) {
	ctx := context.Background()
	if s := providerState(t, st, "p"); s.HeldFor != 0 || s.Slots != 0 {
		t.Fatalf("an unknown provider: %+v", s)
	}
	must(t, st.HoldProvider(ctx, "p", time.Hour))
	must(t, st.HoldProvider(ctx, "p", time.Minute))
	if s := providerState(t, st, "p"); s.HeldFor < 59*time.Minute || s.HeldFor > time.Hour {
		t.Fatalf("held for %v after holds of an hour then a minute, want about an hour", s.HeldFor)
	}
	for _, tk := range []store.ProviderTake{
		{Provider: "p"},
		{Provider: "p", Holder: "a", Slots: 2, PerMinute: 60, Lease: time.Minute},
	} {
		if w := take(t, st, tk); w < 59*time.Minute {
			t.Fatalf("take %+v under the hold waits %v", tk, w)
		}
	}
	if s := providerState(t, st, "p"); s.Slots != 0 {
		t.Fatalf("%d slots held after takes refused by the hold", s.Slots)
	}
	// A hold that has passed delays nothing.
	must(t, st.HoldProvider(ctx, "q", time.Millisecond))
	must(t, st.HoldProvider(ctx, "q", -time.Hour))
	time.Sleep(2 * time.Millisecond)
	if w := take(t, st, store.ProviderTake{Provider: "q", Holder: "a", Slots: 1, Lease: time.Minute}); w != 0 {
		t.Fatalf("a take after the hold passed waits %v", w)
	}
}

// testProviderGiveUp: a take whose context has ended holds nothing and
// uses no allowance.
func testProviderGiveUp(t *testing.T, st store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tk := store.ProviderTake{Provider: "p", Holder: "a", Slots: 1, PerMinute: 60, Lease: time.Minute}
	if _, err := st.TakeProviderSlot(ctx, tk); err == nil {
		t.Fatal("a take with an ended context succeeded")
	}
	if s := providerState(t, st, "p"); s.Slots != 0 {
		t.Fatalf("%d slots held after a take that gave up", s.Slots)
	}
	tk.Holder = "b"
	if w := take(t, st, tk); w != 0 {
		t.Fatalf("the next take waits %v: the one that gave up took the slot or the allowance", w)
	}
	_, err := st.TakeProviderSlot(context.Background(), store.ProviderTake{Provider: "p", Slots: 1})
	wantErr(t, err, store.ErrInvalid) // a slot needs a holder and a lease
}
