package llm

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
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

// Limiter enforces Limits. One Limiter is shared by every call to one
// provider, so that all the daemon's sessions wait their turn rather than
// all meet the provider's own limit at once. A nil *Limiter limits
// nothing. It is safe for concurrent use.
type Limiter struct {
	slots *semaphore.Weighted
	rate  *rate.Limiter

	mu sync.Mutex
	// until is when the vendor said its exhausted rate limit refills
	// (Hold): no request is sent before it.
	until time.Time
}

// NewHeaderLimiter returns a limiter for l that also honours the vendor's
// rate-limit headers (Hold), even when l bounds nothing.
func NewHeaderLimiter(l Limits) *Limiter {
	if lim := NewLimiter(l); lim != nil {
		return lim
	}
	return &Limiter{}
}

// Hold keeps every request of the limiter's provider from being sent
// before until: a response said that one of the vendor's rate limits is
// exhausted until then (RateLimitWait). A later until extends the hold; an
// earlier one changes nothing.
func (l *Limiter) Hold(until time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.until) {
		l.until = until
	}
}

// HeldUntil is the time before which no request is sent (zero: none).
func (l *Limiter) HeldUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// waitHold waits until the hold is over, or ctx ends.
func (l *Limiter) waitHold(ctx context.Context) error {
	for {
		d := time.Until(l.HeldUntil())
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// NewLimiter returns a limiter for l, or nil when l bounds nothing.
func NewLimiter(l Limits) *Limiter {
	if l.Concurrency <= 0 && l.PerMinute <= 0 {
		return nil
	}
	var lim Limiter
	if l.Concurrency > 0 {
		lim.slots = semaphore.NewWeighted(int64(l.Concurrency))
	}
	if l.PerMinute > 0 {
		lim.rate = rate.NewLimiter(rate.Limit(float64(l.PerMinute)/60), max(1, l.PerMinute/60))
	}
	return &lim
}

// acquire waits for a slot, then for the rate's allowance, and returns the
// function that gives the slot back (safe to call more than once). A
// caller that gives up (ctx ends) holds nothing and has used no allowance.
func (l *Limiter) acquire(ctx context.Context) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	if err := l.waitHold(ctx); err != nil {
		return nil, err
	}
	if l.slots != nil {
		if err := l.slots.Acquire(ctx, 1); err != nil {
			return nil, err
		}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if l.slots != nil {
				l.slots.Release(1)
			}
		})
	}
	if l.rate != nil {
		if err := l.rate.Wait(ctx); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}
