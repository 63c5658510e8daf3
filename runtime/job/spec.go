package job

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // CRON_TZ works on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// Kinds of schedule (job.list kind).
const (
	KindCron     = "cron"
	KindInterval = "interval"
	KindOnce     = "once"
)

// MinInterval is the shortest @every interval accepted.
const MinInterval = time.Second

// ErrInvalidSpec is the cause of every spec parsing error.
var ErrInvalidSpec = errors.New("invalid schedule spec")

// SpecError says what is wrong with a spec, in words a person can act on.
type SpecError struct {
	Spec   string
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("spec %q: %s (accepted: a 5-field cron expression such as \"*/5 * * * *\", optionally after CRON_TZ=<zone>; @hourly, @daily, @weekly; @every <duration> such as @every 10m; once <RFC3339 time>; or words such as \"every 15 minutes\", \"every day at 9am\", \"weekdays at 18:30\" (UTC unless after CRON_TZ=<zone>))", e.Spec, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidSpec) hold.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// descriptors are the named cron schedules accepted.
var descriptors = map[string]string{
	"@hourly": "0 * * * *",
	"@daily":  "0 0 * * *",
	"@weekly": "0 0 * * 0",
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Schedule is a parsed spec. Its slots are the times at which it fires.
type Schedule struct {
	kind  string
	every time.Duration      // KindInterval
	at    time.Time          // KindOnce
	cron  *cron.SpecSchedule // KindCron
}

// Kind is KindCron, KindInterval or KindOnce.
func (s Schedule) Kind() string { return s.kind }

// ParseSpec parses a schedule spec: a 5-field cron expression (minute hour
// day-of-month month day-of-week), "@hourly", "@daily", "@weekly", any of
// those after "CRON_TZ=<IANA zone> " (UTC otherwise), "@every <duration>"
// (at least MinInterval), "once <RFC3339 time>", or the natural-language
// forms of naturalSpec ("every day at 9am"). Errors are *SpecError.
func ParseSpec(spec string) (Schedule, error) {
	text := strings.TrimSpace(spec)
	bad := func(format string, args ...any) (Schedule, error) {
		return Schedule{}, &SpecError{Spec: spec, Reason: fmt.Sprintf(format, args...)}
	}
	if text == "" {
		return bad("empty")
	}
	loc, tzName := time.UTC, ""
	if rest, ok := strings.CutPrefix(text, "CRON_TZ="); ok {
		name, after, _ := strings.Cut(rest, " ")
		if name == "" {
			return bad("CRON_TZ= names no time zone")
		}
		l, err := time.LoadLocation(name)
		if err != nil || strings.EqualFold(name, "local") {
			return bad("unknown time zone %q in CRON_TZ (use an IANA name such as Europe/Paris)", name)
		}
		loc, tzName, text = l, name, strings.TrimSpace(after)
		if text == "" {
			return bad("nothing follows CRON_TZ=%s", name)
		}
	}
	if nat, ok, reason := naturalSpec(text); ok {
		text = nat
	} else if reason != "" {
		return bad("%s", reason)
	}
	head, arg, _ := strings.Cut(text, " ")
	arg = strings.TrimSpace(arg)
	switch {
	case head == "@every":
		if tzName != "" {
			return bad("CRON_TZ does not apply to @every")
		}
		if arg == "" {
			return bad("@every needs a duration such as 30s, 10m or 1h30m")
		}
		d, err := time.ParseDuration(arg)
		if err != nil {
			return bad("%q is not a duration (write it like 30s, 10m or 1h30m)", arg)
		}
		if d < MinInterval {
			return bad("interval %s is shorter than the minimum %s", d, MinInterval)
		}
		return Schedule{kind: KindInterval, every: d}, nil
	case head == "once":
		if tzName != "" {
			return bad("CRON_TZ does not apply to once: give the offset in the time itself")
		}
		if arg == "" {
			return bad("once needs an RFC3339 time such as 2030-01-02T15:04:05Z")
		}
		at, err := time.Parse(time.RFC3339Nano, arg)
		if err != nil {
			return bad("%q is not an RFC3339 time such as 2030-01-02T15:04:05Z", arg)
		}
		return Schedule{kind: KindOnce, at: at.UTC()}, nil
	case strings.HasPrefix(head, "@"):
		expr, ok := descriptors[head]
		if !ok {
			return bad("unknown descriptor %s", head)
		}
		if arg != "" {
			return bad("%s takes nothing after it", head)
		}
		text = expr
	}
	if n := len(strings.Fields(text)); n != 5 {
		return bad("a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has %d", n)
	}
	parsed, err := cronParser.Parse(text)
	if err != nil {
		return bad("%v", err)
	}
	cs, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return bad("not a cron expression")
	}
	cs.Location = loc
	s := Schedule{kind: KindCron, cron: cs}
	// robfig/cron gives up after five years without a match (30 February).
	if cs.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return bad("no date ever matches this expression")
	}
	return s, nil
}

// Next returns the first slot strictly after t, or the zero time when the
// schedule never fires again. anchor is the time the job was scheduled: the
// slots of @every are anchor + k×interval (k ≥ 1).
func (s Schedule) Next(anchor, t time.Time) time.Time {
	switch s.kind {
	case KindInterval:
		if t.Before(anchor) {
			return anchor.Add(s.every).UTC()
		}
		k := t.Sub(anchor)/s.every + 1
		return anchor.Add(k * s.every).UTC()
	case KindOnce:
		if t.Before(s.at) {
			return s.at
		}
		return time.Time{}
	case KindCron:
		return s.cron.Next(t).UTC()
	}
	return time.Time{}
}

// maxSlotWalk bounds the slots lastSlot steps through.
const maxSlotWalk = 1 << 20

// lastSlot returns the latest slot at or before now, starting from the slot
// from (returned when no later slot has passed).
func (s Schedule) lastSlot(anchor, from, now time.Time) time.Time {
	if s.kind == KindInterval && !now.Before(anchor) {
		last := anchor.Add(now.Sub(anchor) / s.every * s.every).UTC()
		if last.After(from) {
			return last
		}
		return from
	}
	last := from
	for range maxSlotWalk {
		n := s.Next(anchor, last)
		if n.IsZero() || n.After(now) {
			break
		}
		last = n
	}
	return last
}
