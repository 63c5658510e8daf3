package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// TestProviderRetryEvent: a 429 with Retry-After: 2 then an answer; the
// turn completes and its clients saw one provider.retry saying why and how
// long the daemon waits (the figure, not the clock, is checked).
func TestProviderRetryEvent(t *testing.T) {
	srv := providertest.NewServer(t,
		providertest.OpenAIError(429, "Rate limit reached for gpt-4.1", "requests", "rate_limit_exceeded", map[string]string{"Retry-After": "2"}),
		providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(10, 2).Reply())
	t.Setenv("OPENAI_API_KEY", "sk-retry")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	id := createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	evs := promptComplete(t, c, id, "hello")

	var retries []map[string]any
	for _, ev := range evs {
		if ev["kind"] == "provider.retry" {
			retries = append(retries, payloadOf(ev))
		}
	}
	if len(retries) != 1 {
		t.Fatalf("%d provider.retry events, want 1: %v", len(retries), eventKinds(evs))
	}
	p := retries[0]
	wait, _ := p["waitMs"].(float64)
	if p["attempt"] != float64(1) || p["reason"] != "rate_limited" || p["status"] != float64(429) ||
		p["provider"] != "openai" || p["model"] != "gpt-4.1" || wait < 2000 || wait > 2200 || p["turnId"] == "" {
		t.Errorf("provider.retry = %v, want attempt 1, rate_limited, status 429, openai gpt-4.1, waitMs from 2000", p)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("the server got %d requests, want 2", n)
	}
}

// TestProviderConcurrencyLimit: twenty sessions prompt at once against a
// server that serves five requests at a time and answers 429 beyond that;
// with --provider-concurrency 5 every turn completes and the server never
// serves more than five at once, nor refuses one. The first five answers
// are held until five requests are in, so the bound is reached.
func TestProviderConcurrencyLimit(t *testing.T) {
	const sessions, capacity = 20, 5
	srv := providertest.NewServer(t)
	srv.SetCapacity(capacity)
	hold := make(chan struct{})
	for i := range sessions {
		r := providertest.NewOpenAIStream("gpt-4.1").Text(fmt.Sprintf("Answer %d.", i)).Finish("stop").Usage(10, 2).Reply()
		r.Hold, r.HoldAfter = hold, 1
		srv.Enqueue(r)
	}
	t.Setenv("OPENAI_API_KEY", "sk-limit")
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir(), ProviderConcurrency: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	}
	for i, id := range ids {
		if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": fmt.Sprintf("question %d", i)}, nil); err != nil {
			t.Fatalf("session.prompt: %v", err)
		}
	}
	srv.WaitRequests(t, capacity, 30*time.Second)
	close(hold)

	failed, retries := 0, 0
	for _, id := range ids {
		evs := collect(t, c.Events(id), "turn.done", 1)
		for _, ev := range evs {
			if ev["kind"] == "provider.retry" {
				retries++
			}
		}
		if p := payloadOf(evs[len(evs)-1]); p["reason"] != "complete" {
			failed++
			t.Errorf("session %s: turn ended %v: %v", id, p, eventKinds(evs))
		}
	}
	most, refused := srv.Load()
	t.Logf("%d turns, %d failed; the server served at most %d at once, refused %d; %d provider.retry events", sessions, failed, most, refused, retries)
	if most > capacity || refused != 0 || retries != 0 {
		t.Errorf("the server served up to %d at once and refused %d (%d retries), want at most %d and none", most, refused, retries, capacity)
	}
	if n := len(srv.Requests()); n != sessions {
		t.Errorf("the server got %d requests, want %d", n, sessions)
	}
}

// TestProviderRateLimitHeaders: a 429 without Retry-After whose vendor
// rate-limit headers say which limit is exhausted and when it refills
// (OpenAI's x-ratelimit-remaining-*/x-ratelimit-reset-* as durations,
// Anthropic's anthropic-ratelimit-*-remaining/-reset as RFC 3339 times),
// or Anthropic's retry-after-ms: the daemon waits for that reset (the
// provider.retry's waitMs, not the clock, is checked), then the turn
// completes.
func TestProviderRateLimitHeaders(t *testing.T) {
	soon := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name, vendor, model string
		refusal             func() providertest.Reply // made when the subtest starts
		answer              providertest.Reply
		minMs, maxMs        float64
	}{
		{name: "openai requests exhausted", vendor: "openai", model: "gpt-4.1",
			refusal: func() providertest.Reply {
				return providertest.OpenAIError(429, "Rate limit reached", "requests", "rate_limit_exceeded", map[string]string{
					"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s",
					"x-ratelimit-remaining-tokens": "90000", "x-ratelimit-reset-tokens": "40s"})
			},
			answer: providertest.NewOpenAIStream("gpt-4.1").Text("Done.").Finish("stop").Usage(10, 2).Reply(), minMs: 1500, maxMs: 1650},
		{name: "anthropic tokens exhausted", vendor: "anthropic", model: "claude-sonnet-4-5",
			// The reset is 5 s after the subtest starts; the daemon's start
			// takes some of it, backoff alone would wait about 1 s.
			refusal: func() providertest.Reply {
				return providertest.AnthropicError(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", map[string]string{
					"anthropic-ratelimit-requests-remaining": "40", "anthropic-ratelimit-requests-reset": soon(50 * time.Second),
					"anthropic-ratelimit-input-tokens-remaining": "0", "anthropic-ratelimit-input-tokens-reset": soon(5 * time.Second)})
			},
			answer: providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Text("Done.").Reply("end_turn", 2), minMs: 2500, maxMs: 5500},
		{name: "anthropic retry-after-ms", vendor: "anthropic", model: "claude-sonnet-4-5",
			refusal: func() providertest.Reply {
				return providertest.AnthropicError(429, "rate_limit_error", "Rate limited", map[string]string{"retry-after-ms": "1200"})
			},
			answer: providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Text("Done.").Reply("end_turn", 2), minMs: 1200, maxMs: 1320},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewServer(t, tc.refusal(), tc.answer)
			if tc.vendor == "openai" {
				t.Setenv("OPENAI_API_KEY", "sk-headers")
				t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
			} else {
				t.Setenv("ANTHROPIC_API_KEY", "sk-ant-headers")
				t.Setenv("ANTHROPIC_BASE_URL", srv.URL)
			}
			d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Stop)
			c := helloWS(t, d)
			id := createSession(t, c, map[string]any{"provider": tc.vendor, "model": tc.model})
			evs := promptComplete(t, c, id, "hello")
			var retries []map[string]any
			for _, ev := range evs {
				if ev["kind"] == "provider.retry" {
					retries = append(retries, payloadOf(ev))
				}
			}
			if len(retries) != 1 {
				t.Fatalf("%d provider.retry events, want 1: %v", len(retries), eventKinds(evs))
			}
			if wait, _ := retries[0]["waitMs"].(float64); retries[0]["reason"] != "rate_limited" || wait < tc.minMs || wait > tc.maxMs {
				t.Errorf("provider.retry = %v, want rate_limited waiting %v-%v ms", retries[0], tc.minMs, tc.maxMs)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("the server got %d requests, want 2", n)
			}
		})
	}
}
