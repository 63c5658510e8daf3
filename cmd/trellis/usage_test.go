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
		Key                                               string
		Calls, InputTokens, OutputTokens, ReasoningTokens int64
	}
	var sum struct {
		GroupBy                                    string
		InputTokens, OutputTokens, ReasoningTokens int64
		Rows                                       []row
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
	want := []string{"SESSION CALLS INPUT OUTPUT REASONING"}
	for _, w := range sum.Rows {
		want = append(want, fmt.Sprintf("%s %d %d %d %d", w.Key, w.Calls, w.InputTokens, w.OutputTokens, w.ReasoningTokens))
	}
	want = append(want, fmt.Sprintf("TOTAL 2 %d %d %d", sum.InputTokens, sum.OutputTokens, sum.ReasoningTokens))
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
		{"default by model", []string{"usage"}, fmt.Sprintf("MODEL CALLS INPUT OUTPUT REASONING|TOTAL 2 %d %d 0", sum.InputTokens, sum.OutputTokens)},
		{"dates", []string{"usage", "--by", "day", "--since", "2000-01-01", "--until", tomorrow},
			fmt.Sprintf("DAY CALLS INPUT OUTPUT REASONING|TOTAL 2 %d %d 0", sum.InputTokens, sum.OutputTokens)},
		{"a window before the calls", []string{"usage", "--by", "provider", "--until", "2000-01-01T00:00:00Z"}, "PROVIDER CALLS INPUT OUTPUT REASONING|TOTAL 0 0 0 0"},
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
