// Package duration reads the durations people write for ages and
// timeouts: Go's units ("90s", "5m", "1h30m") and whole days and weeks
// ("30d", "2w", "1d12h"), which time.ParseDuration refuses.
package duration

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Pattern is a regular expression (JSON Schema) of what Parse accepts,
// sign aside.
const Pattern = `^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h|d|w))+$|^0$`

// Parse reads s as time.ParseDuration does, with two more units: d (24
// hours) and w (7 days). A day here is 24 hours, whatever the calendar.
func Parse(s string) (time.Duration, error) {
	goForm, err := hoursForDays(s)
	if err == nil {
		var d time.Duration
		if d, err = time.ParseDuration(goForm); err == nil {
			return d, nil
		}
	}
	return 0, fmt.Errorf("invalid duration %q: want a number and a unit (s, m, h, d for days, w for weeks), such as 90s, 720h or 30d", s)
}

// hoursForDays rewrites each "<n>d" and "<n>w" of s as hours, leaving the
// rest as it is for time.ParseDuration to judge.
func hoursForDays(s string) (string, error) {
	if !strings.ContainsAny(s, "dw") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		if j > i && j < len(s) && (s[j] == 'd' || s[j] == 'w') {
			n, err := strconv.ParseFloat(s[i:j], 64)
			if err != nil {
				return "", err
			}
			hours := n * 24
			if s[j] == 'w' {
				hours *= 7
			}
			b.WriteString(strconv.FormatFloat(hours, 'f', -1, 64))
			b.WriteByte('h')
			i = j + 1
			continue
		}
		if j == i {
			j++ // a sign or a unit's letter
		}
		b.WriteString(s[i:j])
		i = j
	}
	return b.String(), nil
}

// Format writes d in days when it is a whole number of them ("30d"),
// else as time.Duration.String does; Parse reads either back.
func Format(d time.Duration) string {
	const day = 24 * time.Hour
	if d != 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// Value is a command-line flag (flag.Value and pflag.Value) holding a
// duration Parse reads.
type Value struct{ D *time.Duration }

// String is the flag's value as Format writes it.
func (v Value) String() string {
	if v.D == nil {
		return "0s"
	}
	return Format(*v.D)
}

// Set parses the flag's argument.
func (v Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// Type names the flag's kind in help text.
func (Value) Type() string { return "duration" }
