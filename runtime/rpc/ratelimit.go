package rpc

import (
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
)

// keyLimiter keeps one token bucket per API key with a rate (key.create
// ratePerSecond): rate tokens a second, at most a second's worth saved up.
// Buckets live in this daemon's memory: behind a load balancer each daemon
// allows a key its rate.
type keyLimiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	now     func() time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the limiter's memory; past it the buckets are dropped
// (every key starts full again), which errs on the side of allowing.
const maxBuckets = 100_000

func newKeyLimiter() *keyLimiter {
	return &keyLimiter{buckets: map[string]*bucket{}, now: time.Now}
}

// allow takes a token for the principal's key, or says how long until one
// is there. Calls without a key rate are always allowed.
func (l *keyLimiter) allow(p auth.Principal) (ok bool, retryAfter time.Duration) {
	if l == nil || p.KeyID == "" || p.KeyRate <= 0 {
		return true, 0
	}
	rate := float64(p.KeyRate)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[p.KeyID]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			clear(l.buckets)
		}
		b = &bucket{tokens: rate, last: now}
		l.buckets[p.KeyID] = b
	}
	b.tokens = math.Min(rate, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// rateLimited is the refusal of a call over its key's rate.
func rateLimited(p auth.Principal, retryAfter time.Duration) error {
	ms := retryAfter.Milliseconds() + 1
	return statusWithInfo(codes.ResourceExhausted, errcode.RateLimited,
		fmt.Sprintf("API key %s is over its rate of %d calls a second; retry after %d ms", p.KeyID, p.KeyRate, ms),
		map[string]any{"retryAfterMs": ms, "limit": "keyRatePerSecond", "value": p.KeyRate})
}
