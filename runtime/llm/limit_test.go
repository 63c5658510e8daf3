package llm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

// openStore opens a new SQLite store, the limits' state of one daemon (or
// of several, given to each).
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// limiterOn returns daemon owner's limiter of provider "p" on st.
func limiterOn(t *testing.T, st store.ProviderLimitStore, owner string, l llm.Limits, lease time.Duration) *llm.Limiter {
	t.Helper()
	lim, err := llm.NewLimiter(llm.LimiterOptions{Store: st, Provider: "p", Owner: owner, Limits: l, Lease: lease, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func newLimiter(t *testing.T, l llm.Limits) *llm.Limiter {
	t.Helper()
	return limiterOn(t, openStore(t), "d1", l, 0)
}

func hello(context.Context) (llm.Stream, error) {
	return &sliceStream{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "hi"}}}, nil
}

// TestLimiterConcurrency: a call past the bound waits until a stream is
// closed, and an ended context ends the wait.
func TestLimiterConcurrency(t *testing.T) {
	p := llm.RetryPolicy{Limiter: newLimiter(t, llm.Limits{Concurrency: 1})}
	first, err := p.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Open(ctx, hello); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Open while the first streams = %v, want to wait until the context ends", err)
	}
	got := make(chan error, 1)
	go func() {
		s, err := p.Open(context.Background(), hello)
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	first.Close()
	if err := <-got; err != nil {
		t.Fatalf("Open after the first stream closed: %v", err)
	}
}

// TestLimiterReleasesAtTheEnd: a stream read to its end gives its slot
// back even before it is closed.
func TestLimiterReleasesAtTheEnd(t *testing.T) {
	p := llm.RetryPolicy{Limiter: newLimiter(t, llm.Limits{Concurrency: 1})}
	s, err := p.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llm.Collect(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s2, err := p.Open(ctx, hello)
	if err != nil {
		t.Fatalf("Open after the first stream ended: %v", err)
	}
	s2.Close()
}

// TestLimiterFreeDuringRetryWait: a call waiting to retry holds no slot, so
// another call goes first.
func TestLimiterFreeDuringRetryWait(t *testing.T) {
	lim := newLimiter(t, llm.Limits{Concurrency: 1})
	other := make(chan error, 1)
	p := llm.RetryPolicy{Limiter: lim, Sleep: func(ctx context.Context, d time.Duration) error {
		s, err := llm.RetryPolicy{Limiter: lim}.Open(ctx, hello)
		if err == nil {
			s.Close()
		}
		other <- err
		return nil
	}}
	s := &scripted{errs: []error{llm.Transient(llm.NewError("v", 429, "v: HTTP 429"), 0)}, chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "hi"}}}
	st, err := p.Open(context.Background(), s.open)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := <-other; err != nil {
		t.Fatalf("a call during the retry wait: %v", err)
	}
}

// TestLimiterNoBounds: with no bound, calls go at once, any number at a
// time, and hold no slot.
func TestLimiterNoBounds(t *testing.T) {
	st := openStore(t)
	p := llm.RetryPolicy{Limiter: limiterOn(t, st, "d1", llm.Limits{}, 0)}
	var open []llm.Stream
	for range 10 {
		s, err := p.Open(context.Background(), hello)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	if s, err := st.ProviderLimitState(context.Background(), "p"); err != nil || s.Slots != 0 {
		t.Fatalf("state %+v, %v with ten calls streaming; want no slot", s, err)
	}
	for _, s := range open {
		s.Close()
	}
}

// TestLimiterSharedByDaemons: two daemons' limiters on one store share its
// bound: the second daemon's call waits until the first daemon's stream is
// closed, and one that gives up holds nothing.
func TestLimiterSharedByDaemons(t *testing.T) {
	st := openStore(t)
	a := llm.RetryPolicy{Limiter: limiterOn(t, st, "d1", llm.Limits{Concurrency: 1}, 0)}
	b := llm.RetryPolicy{Limiter: limiterOn(t, st, "d2", llm.Limits{Concurrency: 1}, 0)}
	first, err := a.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Open(ctx, hello); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("daemon 2's Open while daemon 1's call streams = %v, want to wait until the context ends", err)
	}
	got := make(chan error, 1)
	go func() {
		s, err := b.Open(context.Background(), hello)
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	first.Close()
	if err := <-got; err != nil {
		t.Fatalf("daemon 2's Open after daemon 1's stream closed: %v", err)
	}
	if s, err := st.ProviderLimitState(context.Background(), "p"); err != nil || s.Slots != 0 {
		t.Fatalf("state %+v, %v after every stream closed; want no slot", s, err)
	}
}

// TestLimiterKeepsItsSlotPastTheLease: a call that streams for many times
// its slot's lease keeps the slot (it is renewed), and gives it back at
// its end.
func TestLimiterKeepsItsSlotPastTheLease(t *testing.T) {
	st := openStore(t)
	const lease = 300 * time.Millisecond
	a := llm.RetryPolicy{Limiter: limiterOn(t, st, "d1", llm.Limits{Concurrency: 1}, lease)}
	b := llm.RetryPolicy{Limiter: limiterOn(t, st, "d2", llm.Limits{Concurrency: 1}, lease)}
	first, err := a.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*lease)
	defer cancel()
	if s, err := b.Open(ctx, hello); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open while a call streams for five leases = %v, want to wait until the context ends", err)
	}
	first.Close()
	s, err := b.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestLimiterPerMinute: past the allowance a call waits; one that cannot
// wait that long gives up and holds no slot.
func TestLimiterPerMinute(t *testing.T) {
	p := llm.RetryPolicy{Limiter: newLimiter(t, llm.Limits{Concurrency: 1, PerMinute: 60})}
	s, err := p.Open(context.Background(), hello)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Open(ctx, hello); err == nil {
		t.Fatal("a second call within the same second started, want it to wait for the allowance")
	}
	if held, err := p.Limiter.HeldUntil(context.Background()); err != nil || !held.IsZero() {
		t.Fatalf("held until %v, %v; want no hold", held, err)
	}
	s, err = p.Open(context.Background(), hello) // the next allowance, within a second
	if err != nil {
		t.Fatalf("a call once the allowance refilled: %v", err)
	}
	s.Close()
}

// TestLimiterHold: a response whose headers say a rate limit is exhausted
// holds the provider's limiter until its reset, whatever its status; a
// call waiting for the hold ends with its context and holds nothing; a
// hold that has passed delays nothing.
func TestLimiterHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		held   bool
	}{
		{"openai success, requests exhausted", 200, map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s"}, true},
		{"anthropic 429, tokens exhausted", 429, map[string]string{"anthropic-ratelimit-tokens-remaining": "0",
			"anthropic-ratelimit-tokens-reset": time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)}, true},
		{"some left", 200, map[string]string{"x-ratelimit-remaining-requests": "7", "x-ratelimit-reset-requests": "30s"}, false},
		{"no headers", 200, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			lim := newLimiter(t, llm.Limits{})
			rec := &llm.FailureRecorder{Limiter: lim}
			req, _ := http.NewRequest("POST", srv.URL, nil)
			resp, err := rec.Middleware(req, http.DefaultClient.Do)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			until, err := lim.HeldUntil(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if held := until.After(time.Now()); held != tc.held {
				t.Fatalf("held until %v: held %v, want %v", until, held, tc.held)
			}
			p := llm.RetryPolicy{Limiter: lim}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.held {
				cancel() // a caller that gives up while the limit is exhausted
			}
			defer cancel()
			opened := false
			_, err = p.Open(ctx, func(context.Context) (llm.Stream, error) {
				opened = true
				return nil, errors.New("opened")
			})
			if tc.held && (opened || !errors.Is(err, context.Canceled)) {
				t.Fatalf("under a hold: opened %v, err %v; want no request and the context's error", opened, err)
			}
			if !tc.held && !opened {
				t.Fatalf("no hold, yet the request was not sent: %v", err)
			}
		})
	}
	// A later reset extends the hold, an earlier one does not shorten it;
	// the store keeps it as a time from its own clock's now.
	lim := newLimiter(t, llm.Limits{})
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	if err := lim.Hold(ctx, at); err != nil {
		t.Fatal(err)
	}
	if err := lim.Hold(ctx, at.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if held, err := lim.HeldUntil(ctx); err != nil || held.Before(at.Add(-time.Minute)) || held.After(at.Add(time.Minute)) {
		t.Fatalf("held until %v, %v; want %v", held, err, at)
	}
}
