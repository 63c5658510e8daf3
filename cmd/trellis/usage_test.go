package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestUsageCommand pins trellis usage: the table (a row per group and a
// TOTAL row) and --json show usage.summary's totals, --by groups, dates
// bound the window, and a daemon's answer is checked against itself.
func TestUsageCommand(t *testing.T) {
	e := newEnv(t)
	first := sessionOf(t, e.run("", "run", "hello"))
	second := sessionOf(t, e.run("", "run", "something else entirely"))

	type row struct {
		Key                                                                                                               string
		Calls, InputTokens, OutputTokens, ReasoningTokens, CacheReadTokens, CacheWriteTokens, CostMicroUsd, UnpricedCalls int64
	}
	var sum struct {
		GroupBy                                                                                                           string
		Calls, InputTokens, OutputTokens, ReasoningTokens, CacheReadTokens, CacheWriteTokens, CostMicroUsd, UnpricedCalls int64
		Rows                                                                                                              []row
	}
	r := e.run("", "usage", "--by", "session", "--json")
	if r.code != 0 {
		t.Fatalf("usage --json: exit %d, stderr %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		t.Fatalf("usage --json: %v: %s", err, r.stdout)
	}
	if sum.GroupBy != "session" || len(sum.Rows) != 2 {
		t.Fatalf("usage --by session --json: %s, want a row for each of %s and %s", r.stdout, first, second)
	}
	var in, out int64
	for _, w := range sum.Rows {
		if (w.Key != first && w.Key != second) || w.Calls != 1 || w.InputTokens == 0 || w.OutputTokens == 0 {
			t.Fatalf("row %+v: want one call of %s or %s with tokens", w, first, second)
		}
		in, out = in+w.InputTokens, out+w.OutputTokens
	}
	if in != sum.InputTokens || out != sum.OutputTokens {
		t.Fatalf("rows add up to %d in, %d out; totals say %d, %d", in, out, sum.InputTokens, sum.OutputTokens)
	}

	// The table shows the same numbers.
	r = e.run("", "usage", "--by", "session")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("usage --by session: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	// The fake model is priced, at nothing.
	if sum.Calls != 2 || sum.CostMicroUsd != 0 || sum.UnpricedCalls != 0 {
		t.Fatalf("usage --json: %s, want 2 priced calls that cost 0", r.stdout)
	}
	want := []string{"SESSION CALLS INPUT CACHE-READ CACHE-WRITE OUTPUT REASONING COST"}
	for _, w := range sum.Rows {
		want = append(want, fmt.Sprintf("%s %d %d 0 0 %d %d $0", w.Key, w.Calls, w.InputTokens, w.OutputTokens, w.ReasoningTokens))
	}
	want = append(want, fmt.Sprintf("TOTAL 2 %d 0 0 %d %d $0", sum.InputTokens, sum.OutputTokens, sum.ReasoningTokens))
	for i, line := range lines {
		if got := strings.Join(strings.Fields(line), " "); got != want[i] {
			t.Errorf("table line %d = %q, want %q", i+1, got, want[i])
		}
	}

	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	for _, tc := range []struct {
		name string
		args []string
		want string // the table's first and last line, fields joined by one space
	}{
		{"default by model", []string{"usage"}, fmt.Sprintf("MODEL CALLS INPUT CACHE-READ CACHE-WRITE OUTPUT REASONING COST|TOTAL 2 %d 0 0 %d 0 $0", sum.InputTokens, sum.OutputTokens)},
		{"dates", []string{"usage", "--by", "day", "--since", "2000-01-01", "--until", tomorrow},
			fmt.Sprintf("DAY CALLS INPUT CACHE-READ CACHE-WRITE OUTPUT REASONING COST|TOTAL 2 %d 0 0 %d 0 $0", sum.InputTokens, sum.OutputTokens)},
		{"a window before the calls", []string{"usage", "--by", "provider", "--until", "2000-01-01T00:00:00Z"}, "PROVIDER CALLS INPUT CACHE-READ CACHE-WRITE OUTPUT REASONING COST|TOTAL 0 0 0 0 0 0 $0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run("", tc.args...)
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			got := strings.Join(strings.Fields(lines[0]), " ") + "|" + strings.Join(strings.Fields(lines[len(lines)-1]), " ")
			if r.code != 0 || got != tc.want {
				t.Fatalf("%v: exit %d, stdout %q, stderr %s; want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
	if r := e.run("", "usage", "--since", "2026-12-02", "--until", "2026-12-01"); r.code != exitFailed || !strings.Contains(r.stderr, "invalid_params") {
		t.Fatalf("until before since: exit %d, stderr %s; want %d and invalid_params", r.code, r.stderr, exitFailed)
	}
}

// TestCostText: dollars from micro-dollars, exact to the ten-thousandth,
// and what is said of calls without a price.
func TestCostText(t *testing.T) {
	for _, tc := range []struct {
		micro, calls, unpriced int64
		want                   string
	}{
		{0, 0, 0, "$0"},
		{0, 3, 0, "$0"},
		{42, 1, 0, "$0.000042"},
		{337, 1, 0, "$0.0003"},
		{12_350, 2, 0, "$0.0124"},
		{1_234_567_890, 20, 0, "$1234.5679"},
		{0, 2, 2, "cost unknown"},
		{6000, 2, 1, "$0.0060 + 1 unpriced call"},
		{6000, 5, 3, "$0.0060 + 3 unpriced calls"},
	} {
		if got := costText(tc.micro, tc.calls, tc.unpriced); got != tc.want {
			t.Errorf("costText(%d, %d, %d) = %q, want %q", tc.micro, tc.calls, tc.unpriced, got, tc.want)
		}
	}
}
