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
