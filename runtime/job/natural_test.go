package job

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNaturalSpecs(t *testing.T) {
	for _, tt := range []struct {
		spec, want string // want: the equivalent canonical spec
	}{
		{"every day at 9am", "0 9 * * *"},
		{"Every Day at 9 AM", "0 9 * * *"},
		{"daily at 21:05", "5 21 * * *"},
		{"every 15 minutes", "@every 15m"},
		{"every 2 hours", "@every 2h"},
		{"every 30 seconds", "@every 30s"},
		{"every minute", "@every 1m"},
		{"every hour", "0 * * * *"},
		{"hourly", "0 * * * *"},
		{"daily", "0 0 * * *"},
		{"weekdays at 18:30", "30 18 * * 1-5"},
		{"every weekday at 7:15pm", "15 19 * * 1-5"},
		{"weekends at noon", "0 12 * * 0,6"},
		{"every monday at 12am", "0 0 * * 1"},
		{"fridays at 5pm", "0 17 * * 5"},
		{"every sun at midnight", "0 0 * * 0"},
		{"CRON_TZ=Europe/Paris every day at 9am", "CRON_TZ=Europe/Paris 0 9 * * *"},
	} {
		got, err := ParseSpec(tt.spec)
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", tt.spec, err)
			continue
		}
		want, err := ParseSpec(tt.want)
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", tt.want, err)
		}
		anchor := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
		for _, at := range []time.Time{anchor, anchor.Add(7 * time.Hour), anchor.Add(50 * time.Hour)} {
			if g, w := got.Next(anchor, at), want.Next(anchor, at); !g.Equal(w) || got.Kind() != want.Kind() {
				t.Errorf("%q after %s: next %s (%s), want %s (%s) like %q", tt.spec, at, g, got.Kind(), w, want.Kind(), tt.want)
			}
		}
	}
}

func TestNaturalSpecErrors(t *testing.T) {
	for _, tt := range []struct{ spec, msg string }{
		{"every day at 25:00", "not a time of day"},
		{"every day at 13pm", "not a time of day"},
		{"every day at 9:7", "not a time of day"},
		{"every 0 minutes", "between 1 and 100000"},
		{"every 5 fortnights", `unknown unit "fortnights"`},
		{"every", `"every" needs`},
		{"every blursday at 9am", `unknown day "blursday"`},
		{"weekdays 9am", "<days> at <time>"},
	} {
		_, err := ParseSpec(tt.spec)
		var se *SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseSpec(%q) = %v, want a SpecError saying %q", tt.spec, err, tt.msg)
		}
	}
}

// FuzzNaturalSpec: the natural-language parser never panics, and whatever it
// accepts is a spec ParseSpec accepts (it only ever produces canonical
// specs); a rejection that looked like a natural form says why.
func FuzzNaturalSpec(f *testing.F) {
	for _, s := range []string{"every day at 9am", "every 15 minutes", "weekdays at 18:30", "every monday at noon",
		"hourly", "every 99999999999 hours", "every day at 12:60pm", "sat at 0", "every day at :30", "every -1 minutes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		spec, ok, reason := naturalSpec(text)
		if !ok {
			if spec != "" {
				t.Fatalf("%q: rejected but produced %q", text, spec)
			}
			return
		}
		if reason != "" {
			t.Fatalf("%q: accepted with a reason %q", text, reason)
		}
		if _, err := ParseSpec(spec); err != nil {
			t.Fatalf("%q became %q, which ParseSpec refuses: %v", text, spec, err)
		}
	})
}
