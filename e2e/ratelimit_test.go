package e2e

import (
	"context"
	"testing"

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
