package duration

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90s", 90 * time.Second, true},
		{"720h", 720 * time.Hour, true},
		{"30d", 720 * time.Hour, true},
		{"2w", 14 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"1.5d", 36 * time.Hour, true},
		{"1w2d3h4m", (9*24+3)*time.Hour + 4*time.Minute, true},
		{"-1d", -24 * time.Hour, true},
		{"0", 0, true},
		{"0d", 0, true},
		{"", 0, false},
		{"30", 0, false},
		{"d", 0, false},
		{"30x", 0, false},
		{"1dd", 0, false},
		{"1.2.3d", 0, false},
		{"1d 2h", 0, false},
		{"999999999999w", 0, false}, // beyond time.Duration
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "30d") {
			t.Errorf("Parse(%q): the error %q shows no example", tc.in, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                  "0s",
		720 * time.Hour:    "30d",
		36 * time.Hour:     "36h0m0s",
		90 * time.Second:   "1m30s",
		-48 * time.Hour:    "-2d",
		7 * 24 * time.Hour: "7d",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Errorf("Parse(Format(%v)) = %v, %v", d, back, err)
		}
	}
}

// FuzzParse: Parse never panics; without d or w it agrees with
// time.ParseDuration; and what it reads, Format writes back readably.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"30d", "1w2d3h", "1.5d", "-1d", "90s", "0", "1dd", "d", "1.2.3d", "5µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if !strings.ContainsAny(s, "dw") {
			want, werr := time.ParseDuration(s)
			if (err == nil) != (werr == nil) || d != want {
				t.Fatalf("Parse(%q) = %v, %v; time.ParseDuration = %v, %v", s, d, err, want, werr)
			}
		}
		if err != nil {
			return
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Fatalf("Parse(Format(%v)) = %v, %v (from %q)", d, back, err, s)
		}
	})
}
