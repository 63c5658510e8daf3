package llm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// Limits bound the requests one provider makes, whoever makes them. Zero
// fields mean no bound.
type Limits struct {
	// Concurrency is the most requests in flight at once: a request holds
	// its slot from the moment it is sent until its answer has streamed to
	// the end (or failed, or was closed).
	Concurrency int
	// PerMinute is the most requests started in any minute, spread evenly:
	// the allowance refills at PerMinute/60 a second, and at most a
	// second's worth (at least one) may start together.
	PerMinute int
}

// The defaults of LimiterOptions.
const (
	// DefaultSlotLease is how long a slot of a daemon that stopped
	// renewing it (killed) stays held.
	DefaultSlotLease = 10 * time.Second
	// DefaultLimitPoll is the longest a waiting call goes without asking
	// the store again, when no release wakes it first.
	DefaultLimitPoll = time.Second
)

// LimiterOptions configure a Limiter.
type LimiterOptions struct {
	// Store keeps the limits' state: every daemon of the store shares it.
	Store store.ProviderLimitStore
	// Provider names the limits in the store (the vendor, "openai").
	Provider string
	// Owner is this daemon (its cluster id): its slots of a previous run
	// are cleared at its start (store.ProviderLimitStore.ClearProviderSlots).
	Owner  string
	Limits Limits
	// Lease is a slot's lease, renewed every third of it while the call
	// streams (0 = DefaultSlotLease).
	Lease time.Duration
	// Poll bounds a wait that no release ends (0 = DefaultLimitPoll).
	Poll time.Duration
	Log  *slog.Logger
}

// Limiter enforces Limits and the vendor's holds on one provider, with
// their state in the store: one Limiter is shared by every call to the
// provider in a daemon, and the store by every daemon, so that all the
// sessions of the cluster wait their turn rather than all meet the
// provider's own limit at once. A nil *Limiter limits nothing. It is safe
// for concurrent use.
type Limiter struct {
	o LimiterOptions

	mu sync.Mutex
	// wake is closed, and replaced, when a slot of the provider is
	// released here or, as the store announced, by another daemon.
	wake chan struct{}
}

// NewLimiter returns the limiter of o.Provider.
func NewLimiter(o LimiterOptions) (*Limiter, error) {
	if o.Store == nil || o.Provider == "" {
		return nil, errors.New("llm: LimiterOptions.Store and Provider are required")
	}
	if o.Lease <= 0 {
		o.Lease = DefaultSlotLease
	}
	if o.Poll <= 0 {
		o.Poll = DefaultLimitPoll
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{o: o, wake: make(chan struct{})}, nil
}

// Wake ends the current waits, which ask the store again: a slot was
// released by another daemon.
func (l *Limiter) Wake() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *Limiter) woken() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// Hold keeps every request of the limiter's provider, on every daemon,
// from being sent before until: a response said that one of the vendor's
// rate limits is exhausted until then (RateLimitWait). A later until
// extends the hold; an earlier one changes nothing.
func (l *Limiter) Hold(ctx context.Context, until time.Time) error {
	if l == nil {
		return nil
	}
	return l.o.Store.HoldProvider(ctx, l.o.Provider, time.Until(until))
}

// HeldUntil is the time before which no request is sent (zero: none).
func (l *Limiter) HeldUntil(ctx context.Context) (time.Time, error) {
	if l == nil {
		return time.Time{}, nil
	}
	st, err := l.o.Store.ProviderLimitState(ctx, l.o.Provider)
	if err != nil || st.HeldFor <= 0 {
		return time.Time{}, err
	}
	return time.Now().Add(st.HeldFor), nil
}

// acquire waits until the store grants the call a slot and the rate's
// allowance, with the provider not held, and returns the function that
// gives the slot back (safe to call more than once). A caller that gives
// up (ctx ends) holds nothing and has used no allowance: the store grants
// both at once or neither.
func (l *Limiter) acquire(ctx context.Context) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	t := store.ProviderTake{Provider: l.o.Provider, Owner: l.o.Owner, Slots: l.o.Limits.Concurrency,
		PerMinute: l.o.Limits.PerMinute, Lease: l.o.Lease}
	if t.Slots > 0 {
		t.Holder = l.o.Owner + "/" + rand.Text()
	}
	for {
		wake := l.woken() // before asking, so that a release meanwhile is not missed
		wait, err := l.o.Store.TakeProviderSlot(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				// The take may have committed unseen: give it back.
				l.give(t.Holder)
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("provider %s: the limits in the store: %w", l.o.Provider, err)
		}
		if wait <= 0 {
			break
		}
		timer := time.NewTimer(min(wait, l.o.Poll))
		select {
		case <-timer.C:
		case <-wake:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
	}
	if t.Holder == "" {
		return func() {}, nil
	}
	renewing, stop := context.WithCancel(context.Background())
	go l.renew(renewing, t.Holder)
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			l.give(t.Holder)
		})
	}, nil
}

// give releases the slot of holder and wakes this daemon's waiters. A
// release the store refuses is left to the lease.
func (l *Limiter) give(holder string) {
	if holder == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Lease)
	defer cancel()
	if err := l.o.Store.ReleaseProviderSlot(ctx, l.o.Provider, holder); err != nil {
		l.o.Log.Warn("could not release a provider slot; it comes back when its lease ends", "provider", l.o.Provider,
			"lease", l.o.Lease.String(), "err", err)
	}
	l.Wake()
}

// renew extends the slot's lease every third of it until ctx ends, so that
// a call streaming longer than the lease keeps its slot.
func (l *Limiter) renew(ctx context.Context, holder string) {
	tick := time.NewTicker(l.o.Lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		kept, err := l.o.Store.RenewProviderSlots(ctx, l.o.Provider, []string{holder}, l.o.Lease)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.o.Log.Warn("could not renew a provider slot", "provider", l.o.Provider, "err", err)
		case len(kept) == 0:
			// The lease ended before a renewal reached the store (it was
			// unreachable): the call goes on, one over the bound for a while.
			l.o.Log.Warn("a provider slot's lease ended while its call streams", "provider", l.o.Provider, "lease", l.o.Lease.String())
			return
		}
	}
}
