package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/trellis-run/trellis/runtime/errs"
)

// The defaults of RetryPolicy.
const (
	DefaultRetryAttempts  = 4
	DefaultRetryBaseDelay = 500 * time.Millisecond
	DefaultRetryMaxDelay  = 8 * time.Second
	DefaultMaxRetryAfter  = 60 * time.Second
)

// Logged returns the policy with each retry logged as a warning naming
// the provider by label, unless the policy has an OnRetry of its own.
func (p RetryPolicy) Logged(log *slog.Logger, label string) RetryPolicy {
	if p.OnRetry == nil {
		p.OnRetry = func(attempt int, wait time.Duration, err error) {
			log.Warn("model call failed; retrying", "provider", label, "attempt", attempt,
				"wait", wait.Round(time.Millisecond).String(), "err", err.Error())
		}
	}
	return p
}

// RetryPolicy decides how a model call that fails before its first token is
// tried again: a bounded number of attempts, exponential backoff with jitter,
// and the server's own Retry-After when it sends one. Once a token has
// arrived a failure is final: the model's answer cannot be replayed.
// Zero fields mean the defaults.
type RetryPolicy struct {
	// Attempts counts every try, the first included (default 4).
	Attempts int
	// BaseDelay is the backoff before the second try; it doubles each time
	// up to MaxDelay. The wait is drawn from [d/2, d) so that many clients
	// that failed together do not retry together.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After honoured; a server asking for
	// a longer pause fails the call at once rather than hold the turn.
	MaxRetryAfter time.Duration
	// OnRetry, when set, hears of each retry before its wait (for logs).
	OnRetry func(attempt int, wait time.Duration, err error)
	// Sleep waits d or until ctx ends; nil uses a timer. Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter returns a number in [0, 1); nil uses math/rand/v2.
	Jitter func() float64
	// Limiter, when set, bounds every try: each waits for its slot and
	// allowance before it is sent, and gives the slot back when its
	// stream ends, so that a call waiting to retry holds none.
	Limiter *Limiter
}

// TransientError marks a failure that another attempt may cure: a 429, a
// 5xx, a connection reset. Err is what the caller sees if no attempt does.
type TransientError struct {
	Err error
	// RetryAfter is how long the server asked us to wait (0 = not said).
	RetryAfter time.Duration
}

func (e *TransientError) Error() string { return e.Err.Error() }

func (e *TransientError) Unwrap() error { return e.Err }

// Transient wraps err as worth retrying after retryAfter (0 = backoff).
func Transient(err error, retryAfter time.Duration) error {
	return &TransientError{Err: err, RetryAfter: retryAfter}
}

// IsTransient reports whether err is marked worth retrying.
func IsTransient(err error) bool {
	var t *TransientError
	return errors.As(err, &t)
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetryAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultRetryBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryMaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	return p
}

// Delay is the wait before try attempt+1 after a failure of try attempt
// (1-based) whose server asked for retryAfter. ok is false when the server
// asked for more than MaxRetryAfter.
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration) (wait time.Duration, ok bool) {
	p = p.withDefaults()
	if retryAfter > 0 {
		if retryAfter > p.MaxRetryAfter {
			return 0, false
		}
		// A little jitter on top, never less than asked.
		return retryAfter + time.Duration(p.Jitter()*float64(retryAfter)/10), true
	}
	d := p.BaseDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	return d/2 + time.Duration(p.Jitter()*float64(d/2)), true
}

// Open starts a model call with open and waits for its first chunk,
// retrying while open or that first Next fails with a TransientError. The
// stream it returns replays the first chunk; later failures reach the
// caller unchanged (a TransientError is unwrapped, since nothing retries
// it). Cancelling ctx ends the waits at once.
func (p RetryPolicy) Open(ctx context.Context, open func(ctx context.Context) (Stream, error)) (Stream, error) {
	p = p.withDefaults()
	for attempt := 1; ; attempt++ {
		s, err := p.try(ctx, open)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var t *TransientError
		if !errors.As(err, &t) {
			return nil, err
		}
		if attempt >= p.Attempts {
			return nil, gaveUp(t.Err, attempt)
		}
		wait, ok := p.Delay(attempt, t.RetryAfter)
		if !ok {
			return nil, t.Err
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, wait, t.Err)
		}
		if hear, ok := ctx.Value(retryObserverKey{}).(func(Retry)); ok {
			status := StatusOf(t.Err)
			hear(Retry{Attempt: attempt, Wait: wait, Status: status, Reason: RetryReason(status), Err: t.Err})
		}
		if err := p.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// Retry describes one retry of a model call, told before its wait.
type Retry struct {
	// Attempt is the 1-based try that failed.
	Attempt int
	// Wait is how long the call waits before the next try.
	Wait time.Duration
	// Status is the HTTP status of the failed try, 0 when there was none.
	Status int
	// Reason names the failure (RetryReason of Status).
	Reason string
	Err    error
}

type retryObserverKey struct{}

// WithRetryObserver returns a context under which Open tells hear of each
// retry, before its wait, on the goroutine that called Open. The agent loop
// uses it to report retries to clients.
func WithRetryObserver(ctx context.Context, hear func(Retry)) context.Context {
	return context.WithValue(ctx, retryObserverKey{}, hear)
}

// StatusOf returns the HTTP status a provider_error carries (NewError), or
// 0 when it carries none.
func StatusOf(err error) int {
	var e *errs.Error
	if errors.As(err, &e) {
		if n, ok := e.Data["status"].(int); ok {
			return n
		}
	}
	return 0
}

// RetryReason names why a model call whose try got the HTTP status is
// retried: rate_limited (429), overloaded (503, 529), server_error (another
// 5xx), timeout (408), conflict (409), connection (no status), else the
// status as text.
func RetryReason(status int) string {
	switch {
	case status == 0:
		return "connection"
	case status == 429:
		return "rate_limited"
	case status == 503 || status == 529:
		return "overloaded"
	case status == 408:
		return "timeout"
	case status == 409:
		return "conflict"
	case status >= 500:
		return "server_error"
	}
	return strconv.Itoa(status)
}

// try makes one attempt under the policy's Limiter.
func (p RetryPolicy) try(ctx context.Context, open func(ctx context.Context) (Stream, error)) (Stream, error) {
	release, err := p.Limiter.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s, err := openFirst(ctx, open)
	if err != nil {
		release()
		return nil, err
	}
	s.release = release
	if s.eof {
		release()
	}
	return s, nil
}

func openFirst(ctx context.Context, open func(ctx context.Context) (Stream, error)) (*primedStream, error) {
	s, err := open(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.Next()
	switch {
	case err == nil:
		return &primedStream{s: s, first: &c}, nil
	case errors.Is(err, io.EOF):
		return &primedStream{s: s, eof: true}, nil
	default:
		s.Close()
		return nil, err
	}
}

// gaveUp says how many attempts were made, on a copy of the final error.
func gaveUp(err error, attempts int) error {
	var e *errs.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%w (gave up after %d attempts)", err, attempts)
	}
	c := *e
	c.Msg = fmt.Sprintf("%s (gave up after %d attempts)", e.Msg, attempts)
	return &c
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// primedStream replays the first chunk that Open already read, and gives
// back the call's limiter slot once the stream ends or is closed.
type primedStream struct {
	s       Stream
	first   *Chunk
	eof     bool
	release func() // nil until try sets it; safe to call more than once
}

func (p *primedStream) done() {
	if p.release != nil {
		p.release()
	}
}

func (p *primedStream) Next() (Chunk, error) {
	if c := p.first; c != nil {
		p.first = nil
		return *c, nil
	}
	if p.eof {
		return Chunk{}, io.EOF
	}
	c, err := p.s.Next()
	if err != nil {
		p.done()
	}
	var t *TransientError
	if errors.As(err, &t) {
		err = t.Err
	}
	return c, err
}

func (p *primedStream) Close() error {
	err := p.s.Close()
	p.done()
	return err
}
