package pricing_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/anthropic"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/llm/openai"
	"github.com/trellis-run/trellis/runtime/pricing"
)

// TestDefaultPricesTheListedModels: every model a provider lists when its
// configuration lists none has a price in the embedded table.
func TestDefaultPricesTheListedModels(t *testing.T) {
	lists := map[string][]string{openai.Vendor: openai.KnownModels, anthropic.Vendor: anthropic.KnownModels, fake.Vendor: {fake.DefaultModel}}
	for vendor, models := range lists {
		for _, m := range models {
			if _, ok := pricing.Default().Lookup(vendor, m); !ok {
				t.Errorf("%s:%s has no price in prices.toml", vendor, m)
			}
		}
	}
	data, err := os.ReadFile("prices.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pricing.Parse("prices.toml", data, []string{openai.Vendor, anthropic.Vendor, fake.Vendor}); err != nil {
		t.Fatal(err)
	}
}

func TestCost(t *testing.T) {
	sonnet, _ := pricing.Default().Lookup(anthropic.Vendor, "claude-sonnet-4-5")
	if want := (pricing.Price{Input: 3_000_000, Output: 15_000_000, CacheRead: 300_000, CacheWrite: 3_750_000, Reasoning: 15_000_000}); sonnet != want {
		t.Fatalf("sonnet %+v, want %+v", sonnet, want)
	}
	mini, _ := pricing.Default().Lookup(openai.Vendor, "gpt-4o-mini")
	tests := []struct {
		name string
		p    pricing.Price
		u    llm.Usage
		want int64 // micro-US-dollars
	}{
		{"nothing", sonnet, llm.Usage{}, 0},
		// 1000 × 3 + 200 × 15 dollars per million tokens.
		{"plain", sonnet, llm.Usage{InputTokens: 1000, OutputTokens: 200}, 6000},
		// 10 × 3 + 30000 × 0.30 + 2048 × 3.75 + 7 × 15.
		{"cached", sonnet, llm.Usage{InputTokens: 10 + 30000 + 2048, OutputTokens: 7, CacheReadTokens: 30000, CacheWriteTokens: 2048}, 30 + 9000 + 7680 + 105},
		// 86 × 0.15 + 1920 × 0.075 + 300 × 0.60 = 12.9 + 144 + 180, rounded.
		{"openai cached", mini, llm.Usage{InputTokens: 2006, OutputTokens: 300, ReasoningTokens: 256, CacheReadTokens: 1920}, 337},
		// Half a micro-dollar rounds up.
		{"half", pricing.Price{Input: 500_000}, llm.Usage{InputTokens: 1}, 1},
		{"below half", pricing.Price{Input: 499_999}, llm.Usage{InputTokens: 1}, 0},
		// Reasoning at its own price when one is given.
		{"reasoning", pricing.Price{Output: 1_000_000, Reasoning: 2_000_000}, llm.Usage{OutputTokens: 10, ReasoningTokens: 4}, 6 + 8},
		// Counts above their whole are taken as the whole; negative as 0.
		{"inconsistent", pricing.Price{Input: 1_000_000, CacheRead: 0}, llm.Usage{InputTokens: 5, CacheReadTokens: 9, OutputTokens: -3}, 0},
		// A product beyond 64 bits is still exact.
		{"large", pricing.Price{Input: 1_000_000 * 1_000_000}, llm.Usage{InputTokens: 1 << 40}, 1 << 40 * 1_000_000},
	}
	for _, tt := range tests {
		if got := tt.p.Cost(tt.u); got != tt.want {
			t.Errorf("%s: cost %d µ$, want %d", tt.name, got, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	tab := pricing.Default()
	for _, c := range [][2]string{{"anthropic", "claude-sonnet-4-5-20250929"}, {"openai", "gpt-4o-2024-08-06"}} {
		if _, ok := tab.Lookup(c[0], c[1]); !ok {
			t.Errorf("%s: not priced by its undated name", c[1])
		}
	}
	for _, c := range [][2]string{{"openai", "gpt-4o-mini-tts"}, {"openai", "claude-sonnet-4-5"}, {"openai", "my-local-model"}, {"nobody", "gpt-4o"}} {
		if cost, ok := tab.Cost(c[0], c[1], llm.Usage{InputTokens: 100, OutputTokens: 100}); ok || cost != 0 {
			t.Errorf("%s:%s priced %d, %v; want unpriced 0", c[0], c[1], cost, ok)
		}
	}
}

func TestOverride(t *testing.T) {
	over, err := pricing.Parse("mine.toml", []byte(`
[openai."gpt-4o"]
input = 1
output = 2

[openai."my-local-model"]
input = 0.001
output = 0.002
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	tab := pricing.Default().Override(over)
	if p, _ := tab.Lookup("openai", "gpt-4o"); p != (pricing.Price{Input: 1e6, Output: 2e6, CacheRead: 1e6, CacheWrite: 1e6, Reasoning: 2e6}) {
		t.Errorf("gpt-4o overridden: %+v (an entry replaces the default's whole: cache-read defaults to its input)", p)
	}
	if p, ok := tab.Lookup("openai", "my-local-model"); !ok || p.Input != 1000 {
		t.Errorf("my-local-model: %+v, %v", p, ok)
	}
	if _, ok := tab.Lookup("anthropic", "claude-sonnet-4-5"); !ok {
		t.Error("the default's other entries are gone")
	}
	if _, ok := pricing.Default().Lookup("openai", "my-local-model"); ok {
		t.Error("Override changed the default table")
	}
}

// TestBadFiles: each problem names its key (and line), all at once.
func TestBadFiles(t *testing.T) {
	vendors := []string{"openai", "anthropic", "fake"}
	tests := []struct {
		name, file string
		want       []string
	}{
		{"not TOML", "[openai.\"gpt-4o\"\ninput = 1", []string{"bad.toml:2: not TOML"}},
		{"negative", "[openai.\"gpt-4o\"]\ninput = -1\noutput = 2", []string{`bad.toml:2: openai."gpt-4o".input: -1 is negative`}},
		{"not a number", "[openai.\"gpt-4o\"]\ninput = \"2.50\"\noutput = 2", []string{`bad.toml:2: openai."gpt-4o".input: want a number (US dollars per million tokens, such as 2.50), not the string "2.50"`}},
		{"unknown field", "[openai.\"gpt-4o\"]\ninput = 1\noutput = 2\ncached = 1", []string{`bad.toml:4: openai."gpt-4o".cached: unknown field (the fields are input, output, cache-read, cache-write, reasoning)`}},
		{"missing output", "[openai.\"gpt-4o\"]\ninput = 1", []string{`openai."gpt-4o": output is missing`}},
		{"unknown vendor", "[openia.\"gpt-4o\"]\ninput = 1\noutput = 2", []string{`openia: unknown vendor (the vendors are openai, anthropic, fake)`}},
		{"vendor not a table", "openai = 3", []string{`bad.toml:1: openai: want a table of models`}},
		{"model not a table", "[openai]\n\"gpt-4o\" = 3", []string{`bad.toml:2: openai."gpt-4o": want a table of prices`}},
		{"too fine", "[openai.\"gpt-4o\"]\ninput = 0.0000001\noutput = 2", []string{`openai."gpt-4o".input: 0.0000001 is finer than a millionth of a dollar`}},
		{"too large", "[openai.\"gpt-4o\"]\ninput = 1e9\noutput = 2", []string{`openai."gpt-4o".input: 1000000000 is above 1000000 US dollars`}},
		{"nan", "[openai.\"gpt-4o\"]\ninput = nan\noutput = 2", []string{`openai."gpt-4o".input: NaN is not a price`}},
		{"every problem", "[openai.\"gpt-4o\"]\ninput = -1\noutput = true\n[anthropic.x]\ninput = 1\noutput = 1\nwrite = 2",
			[]string{`bad.toml:2: openai."gpt-4o".input`, `bad.toml:3: openai."gpt-4o".output: want a number`, `bad.toml:7: anthropic."x".write: unknown field`}},
	}
	for _, tt := range tests {
		_, err := pricing.Parse("bad.toml", []byte(tt.file), vendors)
		var pe *pricing.Error
		if err == nil || !errors.As(err, &pe) {
			t.Errorf("%s: err %v, want a *pricing.Error", tt.name, err)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tt.want) {
			t.Errorf("%s: %d problems, want %d:\n%v", tt.name, len(lines), len(tt.want), err)
			continue
		}
		for i, w := range tt.want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("%s: problem %q, want it to hold %q", tt.name, lines[i], w)
			}
		}
	}
}

// TestExactDecimals: a price is the decimal written, not its binary float.
func TestExactDecimals(t *testing.T) {
	tab, err := pricing.Parse("p.toml", []byte("[openai.m]\ninput = 0.075\noutput = 0.1\ncache-read = 1.000001\nreasoning = 7\ncache-write = 0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tab.Lookup("openai", "m"); p != (pricing.Price{Input: 75_000, Output: 100_000, CacheRead: 1_000_001, CacheWrite: 0, Reasoning: 7_000_000}) {
		t.Errorf("price %+v", p)
	}
}
