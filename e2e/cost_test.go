package e2e

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// costPrices overrides the built-in price of gpt-4.1; claude-sonnet-4-5
// keeps its built-in one. Written as the test's expectations read them:
// US dollars per million tokens, as decimals.
const costPrices = `
[openai."gpt-4.1"]
input = 2.10
output = 8.40
cache-read = 0.525
`

// costPrice is one model's prices as exact decimals (dollars per million
// tokens), independent of the daemon's arithmetic.
type costPrice struct{ input, output, cacheRead, cacheWrite string }

var costTable = map[string]costPrice{
	"openai/gpt-4.1":              {"2.10", "8.40", "0.525", "2.10"},
	"anthropic/claude-sonnet-4-5": {"3.00", "15.00", "0.30", "3.75"},
}

// costCall is one scripted provider call's token counts.
type costCall struct {
	vendor, model                            string
	uncached, cacheRead, cacheWrite, outputs int64
	reasoning                                int64
}

// exactCost is the call's cost in dollars, as an exact fraction.
func (c costCall) exactCost(t *testing.T) *big.Rat {
	p := costTable[c.vendor+"/"+c.model]
	total := new(big.Rat)
	for _, part := range []struct {
		tokens int64
		price  string
	}{{c.uncached, p.input}, {c.cacheRead, p.cacheRead}, {c.cacheWrite, p.cacheWrite}, {c.outputs, p.output}} {
		price, ok := new(big.Rat).SetString(part.price)
		if !ok {
			t.Fatalf("price %q", part.price)
		}
		total.Add(total, new(big.Rat).Mul(price, big.NewRat(part.tokens, 1_000_000)))
	}
	return total
}

// roundTo rounds r to units of 1/denom (half up) and returns the count.
func roundTo(r *big.Rat, denom int64) int64 {
	scaled := new(big.Rat).Mul(r, big.NewRat(denom, 1))
	scaled.Add(scaled, big.NewRat(1, 2))
	return new(big.Int).Quo(scaled.Num(), scaled.Denom()).Int64()
}

// TestCostTwentyTurns: twenty turns, ten against a local server speaking
// Anthropic's streaming Messages format and ten against one speaking
// OpenAI's Chat Completions, each reporting cached tokens: every usage
// event records the tokens as the servers reported them and the cost the
// price table (the built-in one under a --prices file) gives them, to the
// micro-dollar, and the session totals match the exact cost to the cent;
// usage.summary grouped each way and session.usage agree with the events;
// the Prometheus counters carry the cost by model.
func TestCostTwentyTurns(t *testing.T) {
	var calls []costCall
	anthropicSrv, openaiSrv := providertest.NewServer(t), providertest.NewServer(t)
	for i := range int64(10) {
		c := costCall{vendor: "anthropic", model: "claude-sonnet-4-5", uncached: 500 + 37*i, cacheRead: 1500*i + i%7, outputs: 40 + 13*i}
		if i%3 == 0 {
			c.cacheWrite = 2048 + i
		}
		calls = append(calls, c)
		anthropicSrv.Enqueue(providertest.NewAnthropicCachedStream(c.model, int(c.uncached), int(c.cacheWrite), int(c.cacheRead)).
			Text(fmt.Sprintf("Answer %d.", i)).Reply("end_turn", int(c.outputs)))
	}
	for i := range int64(10) {
		prompt := 3000 + 211*i
		c := costCall{vendor: "openai", model: "gpt-4.1", cacheRead: min(1024*i, prompt-100), reasoning: 5 * i, outputs: 60 + 12*i}
		c.uncached = prompt - c.cacheRead
		calls = append(calls, c)
		openaiSrv.Enqueue(providertest.NewOpenAIStream(c.model).Text(fmt.Sprintf("Answer %d.", i)).Finish("stop").
			CachedUsage(int(prompt), int(c.cacheRead), int(c.outputs), int(c.reasoning)).Reply())
	}
	for k, v := range map[string]string{
		"ANTHROPIC_API_KEY": "sk-ant-cost", "ANTHROPIC_BASE_URL": anthropicSrv.URL,
		"OPENAI_API_KEY": "sk-cost", "OPENAI_BASE_URL": openaiSrv.URL + "/v1",
	} {
		t.Setenv(k, v)
	}
	prices := filepath.Join(t.TempDir(), "prices.toml")
	if err := os.WriteFile(prices, []byte(costPrices), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir(), Prices: prices})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := helloWS(t, d)
	a := createSession(t, c, map[string]any{"provider": "anthropic", "model": "claude-sonnet-4-5"})
	o := createSession(t, c, map[string]any{"provider": "openai", "model": "gpt-4.1"})
	for i := range 10 {
		promptComplete(t, c, a, fmt.Sprintf("question %d", i))
	}
	for i := range 10 {
		promptComplete(t, c, o, fmt.Sprintf("question %d", i))
	}

	evs := readUsage(t, c, a, o)
	if len(evs) != len(calls) {
		t.Fatalf("%d usage events, want %d", len(evs), len(calls))
	}
	exact := map[string]*big.Rat{a: new(big.Rat), o: new(big.Rat)}
	recorded := map[string]int64{}
	turns := map[string]bool{}
	for i, e := range evs {
		w := calls[i]
		if e.provider != w.vendor || e.model != w.model || e.in != w.uncached+w.cacheRead+w.cacheWrite || e.out != w.outputs ||
			e.cacheRead != w.cacheRead || e.cacheWrite != w.cacheWrite || e.reasoning != w.reasoning || !e.priced {
			t.Fatalf("call %d: usage event %+v, want the tokens of %+v, priced", i, e, w)
		}
		cost := w.exactCost(t)
		if want := roundTo(cost, 1_000_000); e.cost != want {
			t.Fatalf("call %d: costMicroUsd %d, want %d (%s dollars)", i, e.cost, want, cost.FloatString(9))
		}
		exact[e.session].Add(exact[e.session], cost)
		recorded[e.session] += e.cost
		turns[e.turn] = true
	}
	if len(turns) != 20 {
		t.Fatalf("the calls belong to %d turns, want 20", len(turns))
	}
	for id, want := range exact {
		if got, wantCents := roundTo(big.NewRat(recorded[id], 1_000_000), 100), roundTo(want, 100); got != wantCents {
			t.Fatalf("session %s: recorded %d micro-dollars = %d cents, the price table says %s dollars = %d cents", id, recorded[id], got, want.FloatString(6), wantCents)
		}
		t.Logf("session %s: %d micro-dollars recorded, exactly %s dollars", id, recorded[id], want.FloatString(8))
	}
	checkUsageSums(t, c, evs, a, o)

	status, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", d.HTTPPort()), "")
	for _, series := range []string{
		`trellis_provider_cost_usd_total{model="claude-sonnet-4-5",vendor="anthropic"}`,
		`trellis_provider_cost_usd_total{model="gpt-4.1",vendor="openai"}`,
		`trellis_provider_token_details_total{kind="cache_write",model="claude-sonnet-4-5",vendor="anthropic"}`,
		`trellis_provider_token_details_total{kind="cache_read",model="gpt-4.1",vendor="openai"}`,
		`trellis_provider_token_details_total{kind="reasoning",model="gpt-4.1",vendor="openai"}`,
	} {
		if status != 200 || !strings.Contains(string(body), series) {
			t.Errorf("GET /metrics (%d) lacks %s", status, series)
		}
	}
}

// TestCostBadPriceFile: a price file that is refused stops the daemon at
// start-up with every problem, each naming its key.
func TestCostBadPriceFile(t *testing.T) {
	prices := filepath.Join(t.TempDir(), "prices.toml")
	bad := "[openai.\"gpt-4.1\"]\ninput = -2\noutput = \"8\"\n\n[openia.\"gpt-4o\"]\ninput = 1\noutput = 1\n"
	if err := os.WriteFile(prices, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: t.TempDir(), Prices: prices, Provider: "fake"})
	if err == nil {
		d.Stop()
		t.Fatal("the daemon started with a bad price file")
	}
	for _, want := range []string{
		`prices.toml:2: openai."gpt-4.1".input: -2 is negative`,
		`prices.toml:3: openai."gpt-4.1".output: want a number (US dollars per million tokens, such as 2.50), not the string "8"`,
		`prices.toml:5: openia: unknown vendor`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start-up error %q lacks %q", err, want)
		}
	}
}
