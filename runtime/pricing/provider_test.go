package pricing_test

import (
	"math"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/pricing"
)

func f(v float64) *float64 { return &v }

// TestEntries: a provider configuration's prices become exact
// micro-dollar prices with the file's defaults; every bad field is named.
func TestEntries(t *testing.T) {
	got, err := pricing.Entries("openai", map[string]pricing.Entry{
		"gpt-4.1":  {Input: 1, Output: 4, CacheRead: f(0.25)},
		"llama-3":  {Input: 0.1, Output: 0.3, Reasoning: f(0.35), CacheWrite: f(0.123456)},
		"free-one": {},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pricing.Price{
		"gpt-4.1":  {Input: 1_000_000, Output: 4_000_000, CacheRead: 250_000, CacheWrite: 1_000_000, Reasoning: 4_000_000},
		"llama-3":  {Input: 100_000, Output: 300_000, CacheRead: 100_000, CacheWrite: 123_456, Reasoning: 350_000},
		"free-one": {},
	}
	for m, p := range want {
		if got[m] != p {
			t.Errorf("%s: %+v, want %+v", m, got[m], p)
		}
	}
	_, err = pricing.Entries("openai", map[string]pricing.Entry{
		"a": {Input: -1, Output: 0.0000001},
		"b": {Input: 1, Output: 1, CacheRead: f(2_000_000), Reasoning: f(math.NaN())},
		"":  {Input: 1, Output: 1},
	})
	for _, key := range []string{`prices."a".input`, `prices."a".output`, `prices."b".cache_read`, `prices."b".reasoning`, `prices."": a model name is empty`} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
}

// TestOverlay: the provider's own price of a model (date suffix rule
// included) wins over the table; other models and vendors keep the table's.
func TestOverlay(t *testing.T) {
	own := map[string]pricing.Price{"gpt-4.1": {Input: 1_000_000, Output: 4_000_000, CacheRead: 1_000_000, CacheWrite: 1_000_000, Reasoning: 4_000_000}}
	o := pricing.Overlay{Own: func(vendor string) map[string]pricing.Price {
		if vendor == "openai" {
			return own
		}
		return nil
	}, Base: pricing.Default()}
	u := llm.Usage{InputTokens: 100_000, OutputTokens: 20}
	for _, tc := range []struct {
		vendor, model string
		want          int64
		priced        bool
	}{
		{"openai", "gpt-4.1", 100_080, true},
		{"openai", "gpt-4.1-2025-04-14", 100_080, true},
	} {
		got, priced := o.Cost(tc.vendor, tc.model, u)
		if got != tc.want || priced != tc.priced {
			t.Errorf("%s %s: %d %v, want %d %v", tc.vendor, tc.model, got, priced, tc.want, tc.priced)
		}
	}
	// A model the provider does not price keeps the table's price.
	base, basePriced := pricing.Default().Cost("openai", "gpt-4o", u)
	if got, priced := o.Cost("openai", "gpt-4o", u); got != base || priced != basePriced {
		t.Errorf("gpt-4o: %d %v, want the table's %d %v", got, priced, base, basePriced)
	}
	if got, priced := o.Cost("anthropic", "gpt-4.1", u); priced || got != 0 {
		t.Errorf("another vendor's unknown model: %d %v", got, priced)
	}
}
