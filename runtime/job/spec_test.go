package job

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseSpecNext(t *testing.T) {
	anchor := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		spec     string
		kind     string
		after    string // RFC3339
		wantNext string // RFC3339, "" = never
	}{
		{"*/5 * * * *", KindCron, "2030-01-02T10:02:30Z", "2030-01-02T10:05:00Z"},
		{"0 9 * * 1-5", KindCron, "2030-01-04T09:00:00Z", "2030-01-07T09:00:00Z"}, // Friday → Monday
		{"  0 0 1 1 *  ", KindCron, "2030-06-01T00:00:00Z", "2031-01-01T00:00:00Z"},
		{"@hourly", KindCron, "2030-01-02T10:00:00Z", "2030-01-02T11:00:00Z"},
		{"@daily", KindCron, "2030-01-02T10:00:00Z", "2030-01-03T00:00:00Z"},
		{"@weekly", KindCron, "2030-01-02T10:00:00Z", "2030-01-06T00:00:00Z"}, // Sunday
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", KindCron, "2030-01-02T01:00:00Z", "2030-01-03T00:00:00Z"},
		{"CRON_TZ=Europe/Paris @daily", KindCron, "2030-01-02T10:00:00Z", "2030-01-02T23:00:00Z"},
		{"@every 2s", KindInterval, "2030-01-02T10:00:00Z", "2030-01-02T10:00:02Z"},
		{"@every 2s", KindInterval, "2030-01-02T10:00:03Z", "2030-01-02T10:00:04Z"},
		{"@every 2s", KindInterval, "2030-01-02T09:00:00Z", "2030-01-02T10:00:02Z"}, // before the anchor
		{"@every 1h30m", KindInterval, "2030-01-02T11:30:00Z", "2030-01-02T13:00:00Z"},
		{"once 2030-01-02T12:00:00+02:00", KindOnce, "2030-01-02T09:59:59Z", "2030-01-02T10:00:00Z"},
		{"once 2030-01-02T12:00:00+02:00", KindOnce, "2030-01-02T10:00:00Z", ""},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s, err := ParseSpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind() != tt.kind {
				t.Errorf("kind %s, want %s", s.Kind(), tt.kind)
			}
			got := s.Next(anchor, mustTime(t, tt.after))
			if tt.wantNext == "" {
				if !got.IsZero() {
					t.Errorf("next %v, want none", got)
				}
				return
			}
			if want := mustTime(t, tt.wantNext); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("next %v, want %v (UTC)", got, want)
			}
		})
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct{ spec, reason string }{
		{"", "empty"},
		{"   ", "empty"},
		{"* * * *", "has 4"},
		{"* * * * * *", "has 6"},
		{"61 * * * *", "above maximum"},
		{"x * * * *", "x"},
		{"0 0 30 2 *", "no date ever matches"},
		{"@monthly", "unknown descriptor @monthly"},
		{"@reboot", "unknown descriptor"},
		{"@daily 5", "takes nothing after it"},
		{"@every", "needs a duration"},
		{"@every soon", `"soon" is not a duration`},
		{"@every 500ms", "shorter than the minimum 1s"},
		{"@every -5s", "shorter than the minimum"},
		{"once", "needs an RFC3339 time"},
		{"once tomorrow", `"tomorrow" is not an RFC3339 time`},
		{"once 2030-01-02 12:00", "not an RFC3339 time"},
		{"CRON_TZ=Mars/Olympus 0 9 * * *", `unknown time zone "Mars/Olympus"`},
		{"CRON_TZ=Local 0 9 * * *", "unknown time zone"},
		{"CRON_TZ= 0 9 * * *", "names no time zone"},
		{"CRON_TZ=UTC", "nothing follows"},
		{"CRON_TZ=UTC @every 5s", "does not apply to @every"},
		{"CRON_TZ=UTC once 2030-01-02T12:00:00Z", "does not apply to once"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := ParseSpec(tt.spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err %v, want ErrInvalidSpec", err)
			}
			var se *SpecError
			if !errors.As(err, &se) || !strings.Contains(se.Reason, tt.reason) {
				t.Fatalf("reason %q, want it to contain %q", se.Reason, tt.reason)
			}
			if !strings.Contains(err.Error(), "accepted:") {
				t.Errorf("message %q does not say what is accepted", err)
			}
		})
	}
}

func TestLastSlot(t *testing.T) {
	anchor := mustTime(t, "2030-01-02T10:00:00Z")
	tests := []struct{ spec, from, now, want string }{
		{"@every 2s", "2030-01-02T10:00:02Z", "2030-01-02T10:00:09Z", "2030-01-02T10:00:08Z"},
		{"@every 2s", "2030-01-02T10:00:02Z", "2030-01-02T10:00:02Z", "2030-01-02T10:00:02Z"},
		{"*/5 * * * *", "2030-01-02T10:05:00Z", "2030-01-02T10:21:00Z", "2030-01-02T10:20:00Z"},
		{"*/5 * * * *", "2030-01-02T10:05:00Z", "2030-01-02T10:06:00Z", "2030-01-02T10:05:00Z"},
		{"once 2030-01-02T10:05:00Z", "2030-01-02T10:05:00Z", "2030-01-03T00:00:00Z", "2030-01-02T10:05:00Z"},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.lastSlot(anchor, mustTime(t, tt.from), mustTime(t, tt.now)); !got.Equal(mustTime(t, tt.want)) {
			t.Errorf("%s from %s at %s: %v, want %s", tt.spec, tt.from, tt.now, got, tt.want)
		}
	}
}

// FuzzParseSpec: no spec panics the parser; an accepted spec's next slot is
// strictly later than the time asked about (or there is none), and errors
// are always *SpecError.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "@every 10m", "@daily", "once 2030-01-02T15:04:05Z",
		"CRON_TZ=Europe/Paris 0 9 * * 1-5", "0 0 30 2 *", "@every 0s", "1-5/2 * * * *", "@every 1µs"} {
		f.Add(s)
	}
	anchor := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSpec(spec)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v is not a *SpecError", err, err)
			}
			return
		}
		at := anchor.Add(90 * time.Minute)
		if next := s.Next(anchor, at); !next.IsZero() && !next.After(at) {
			t.Fatalf("%q: next %v is not after %v", spec, next, at)
		}
	})
}
