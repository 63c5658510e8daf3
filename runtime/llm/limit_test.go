package llm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/llm"
)

func hello(context.Context) (llm.Stream, error) {
	return &sliceStream{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "hi"}}}, nil
}

// TestLimiterConcurrency: a call past the bound waits until a stream is
// closed, and an ended context ends the wait.
func TestLimiterConcurrency(t *testing.T) {
	p := llm.RetryPolicy{Limiter: llm.NewLimiter(llm.Limits{Concurrency: 1})}
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
	p := llm.RetryPolicy{Limiter: llm.NewLimiter(llm.Limits{Concurrency: 1})}
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
	lim := llm.NewLimiter(llm.Limits{Concurrency: 1})
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

func TestNewLimiterNoBounds(t *testing.T) {
	if l := llm.NewLimiter(llm.Limits{}); l != nil {
		t.Errorf("NewLimiter(zero) = %v, want nil", l)
	}
}

// TestLimiterPerMinute: past the allowance a call waits; one that cannot
// wait that long gives up and holds no slot.
func TestLimiterPerMinute(t *testing.T) {
	p := llm.RetryPolicy{Limiter: llm.NewLimiter(llm.Limits{Concurrency: 1, PerMinute: 60})}
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
	s, err = p.Open(context.Background(), hello) // the next allowance, within a second
	if err != nil {
		t.Fatalf("a call once the allowance refilled: %v", err)
	}
	s.Close()
}
