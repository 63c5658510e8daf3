package store

import (
	"context"
	"fmt"
	"time"
)

// ProviderTake asks for one request to a model provider
// (TakeProviderSlot): a slot among Slots when Slots is positive, and one
// request of the per-minute allowance when PerMinute is positive.
type ProviderTake struct {
	// Provider names the limits; every daemon of the store uses the same
	// name for the same vendor ("openai").
	Provider string
	// Holder names the slot the take inserts (one per call, unique);
	// Owner is the daemon that holds it (ClearProviderSlots).
	Holder, Owner string
	// Slots is the most slots of the provider held at once; 0 takes none.
	Slots int
	// PerMinute is the allowance: it refills at PerMinute/60 requests a
	// second and holds at most a second's worth (at least one); 0 means
	// no allowance is used.
	PerMinute int
	// Lease is how long the slot stays held unless renewed.
	Lease time.Duration
}

// TakeWith is TakeProviderSlot's frame, shared by the backends: it checks
// t, answers a take of nothing (no slot, no allowance) from the provider's
// hold alone (state: no lock, no write), and otherwise returns what take,
// the backend's decision with the provider's row held, does.
func (t ProviderTake) TakeWith(ctx context.Context, state func(context.Context, string) (ProviderLimitState, error),
	take func(context.Context, ProviderTake) (time.Duration, error)) (time.Duration, error) {
	if err := t.Check(); err != nil {
		return 0, err
	}
	if t.Slots == 0 && t.PerMinute == 0 {
		st, err := state(ctx, t.Provider)
		return st.HeldFor, err
	}
	return take(ctx, t)
}

// Check reports what makes t unfit for TakeProviderSlot (a wrapped
// ErrInvalid), or nil.
func (t ProviderTake) Check() error {
	switch {
	case t.Provider == "":
		return fmt.Errorf("provider take: no provider: %w", ErrInvalid)
	case t.Slots < 0 || t.PerMinute < 0:
		return fmt.Errorf("provider take of %s: negative limits %d/%d: %w", t.Provider, t.Slots, t.PerMinute, ErrInvalid)
	case t.Slots > 0 && (t.Holder == "" || t.Lease <= 0):
		return fmt.Errorf("provider take of %s: a slot needs a holder and a positive lease: %w", t.Provider, ErrInvalid)
	}
	return nil
}

// ProviderRow is the stored state of one provider's limits: its
// allowance (Tokens at RefilledAt) and its hold (zero: none).
type ProviderRow struct {
	Tokens     float64
	RefilledAt time.Time
	HeldUntil  time.Time
}

// Decide is the rule every backend applies, inside the transaction that
// holds the provider's row, at the store's time now: live slots are held
// and the earliest of them ends at earliest. It answers go (wait 0) with
// the row to store, or how long to wait before asking again: until the
// hold ends, until the earliest slot's lease ends (a release usually comes
// sooner), or until the allowance has a request.
func (t ProviderTake) Decide(now time.Time, row ProviderRow, live int, earliest time.Time) (wait time.Duration, next ProviderRow) {
	next = row
	if d := row.HeldUntil.Sub(now); d > 0 {
		return d, row
	}
	if t.Slots > 0 && live >= t.Slots {
		return max(earliest.Sub(now), time.Millisecond), row
	}
	if t.PerMinute <= 0 {
		return 0, row
	}
	rate := float64(t.PerMinute) / 60
	burst := float64(max(1, t.PerMinute/60))
	tokens := row.Tokens
	if row.RefilledAt.IsZero() {
		tokens = burst // a provider's first take
	} else if elapsed := now.Sub(row.RefilledAt); elapsed > 0 {
		tokens += elapsed.Seconds() * rate
	}
	tokens = min(tokens, burst)
	next.RefilledAt = now
	if row.RefilledAt.After(now) {
		next.RefilledAt = row.RefilledAt // another daemon's clock, or a transaction begun earlier
	}
	if tokens < 1 {
		return max(time.Duration((1-tokens)/rate*float64(time.Second)), time.Millisecond), row
	}
	next.Tokens = tokens - 1
	return 0, next
}

// ProviderLimitState is what ProviderLimitState reads of a provider.
type ProviderLimitState struct {
	// HeldFor is how long the provider's hold lasts from now (0: none).
	HeldFor time.Duration
	// Slots counts the live slots.
	Slots int
}

// ProviderLimitStore keeps the state of the limits on the requests each
// model provider is sent (llm.Limiter): concurrency slots as leased rows,
// the per-minute allowance as a token bucket, and the hold the vendor's
// rate-limit headers asked for. Every daemon of the store shares them. Time
// is the store's clock (the database server's on PostgreSQL).
type ProviderLimitStore interface {
	// TakeProviderSlot decides t in one transaction holding the provider's
	// row (ProviderTake.Decide): on go it inserts t's slot (when t.Slots
	// is positive), uses one request of the allowance (when t.PerMinute is
	// positive) and answers 0; else it changes nothing and answers how
	// long to wait before asking again. Expired slots are deleted on the
	// way.
	TakeProviderSlot(ctx context.Context, t ProviderTake) (wait time.Duration, err error)
	// RenewProviderSlots extends for lease each of the provider's slots
	// named by holders that still exists, and returns those it extended.
	RenewProviderSlots(ctx context.Context, provider string, holders []string, lease time.Duration) ([]string, error)
	// ReleaseProviderSlot deletes the slot (an unknown one is not an
	// error) and, on a store several daemons share, announces it.
	ReleaseProviderSlot(ctx context.Context, provider, holder string) error
	// ClearProviderSlots deletes every slot owner holds, of any provider
	// (a restarted daemon's calls of its previous run are gone).
	ClearProviderSlots(ctx context.Context, owner string) error
	// HoldProvider keeps the provider from being sent a request for d from
	// now: a hold only moves later, a shorter one changes nothing.
	HoldProvider(ctx context.Context, provider string, d time.Duration) error
	// ProviderLimitState reads the provider's hold and live slots.
	ProviderLimitState(ctx context.Context, provider string) (ProviderLimitState, error)
}

// ProviderLimitNotifier is implemented by stores several daemons share:
// ListenProviderLimits calls fn(provider) for every slot a daemon released
// until ctx ends; after a lost connection it calls fn("") (look again at
// every provider).
type ProviderLimitNotifier interface {
	ListenProviderLimits(ctx context.Context, fn func(provider string)) error
}
