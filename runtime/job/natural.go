package job

import (
	"fmt"
	"strconv"
	"strings"
)

// naturalSpec translates the natural-language schedules that protocol 1.x
// clients send ("every day at 9am", "every 15 minutes", "weekdays at
// 18:30", "every monday at noon", "hourly") into the equivalent cron
// expression or @every spec. ok is false when text is not one of these
// forms; reason then says what was wrong when text looked like one (it
// started with "every", "daily", ...), else it is "".
//
// The grammar, case-insensitive, words separated by spaces:
//
//	every N (second|minute|hour)[s]    every minute|hour|day
//	hourly | daily | weekly            [every] day|daily at TIME
//	[every] weekday[s] at TIME         [every] weekend[s] at TIME
//	[every] <day name>[s] at TIME      TIME = 9am | 9 am | 9:30pm | 18:30 | noon | midnight
func naturalSpec(text string) (spec string, ok bool, reason string) {
	words := strings.Fields(strings.ToLower(strings.TrimSpace(text)))
	if len(words) == 0 {
		return "", false, ""
	}
	switch words[0] {
	case "every", "daily", "hourly", "weekly", "weekdays", "weekday", "weekends", "weekend":
	default:
		if _, isDay := dayNumber(words[0]); !isDay {
			return "", false, ""
		}
	}
	fail := func(format string, args ...any) (string, bool, string) {
		return "", false, fmt.Sprintf(format, args...)
	}
	if len(words) == 1 {
		switch words[0] {
		case "hourly":
			return "0 * * * *", true, ""
		case "daily":
			return "0 0 * * *", true, ""
		case "weekly":
			return "0 0 * * 0", true, ""
		}
	}
	rest := words
	if rest[0] == "every" {
		rest = rest[1:]
		if len(rest) == 0 {
			return fail(`"every" needs what follows it: every 15 minutes, every day at 9am`)
		}
		// every N units
		if n, err := strconv.Atoi(rest[0]); err == nil {
			if len(rest) != 2 {
				return fail("write it as every <number> minutes (or seconds, hours)")
			}
			unit, ok := unitOf(rest[1])
			if !ok {
				return fail("unknown unit %q: use seconds, minutes or hours", rest[1])
			}
			if n <= 0 || n > 100000 {
				return fail("the number in every %d %s must be between 1 and 100000", n, rest[1])
			}
			return fmt.Sprintf("@every %d%s", n, unit), true, ""
		}
		if len(rest) == 1 {
			switch rest[0] {
			case "second":
				return "@every 1s", true, ""
			case "minute":
				return "@every 1m", true, ""
			case "hour":
				return "0 * * * *", true, ""
			case "day":
				return "0 0 * * *", true, ""
			case "week":
				return "0 0 * * 0", true, ""
			}
		}
	}
	// <days> at TIME
	if len(rest) < 3 || rest[1] != "at" {
		return fail("write a time of day as <days> at <time>, e.g. every day at 9am, weekdays at 18:30")
	}
	var dow string
	switch d := rest[0]; d {
	case "day", "daily":
		dow = "*"
	case "weekday", "weekdays":
		dow = "1-5"
	case "weekend", "weekends":
		dow = "0,6"
	default:
		n, ok := dayNumber(d)
		if !ok {
			return fail("unknown day %q: use day, weekdays, weekends or a day name", d)
		}
		dow = strconv.Itoa(n)
	}
	h, m, err := parseClock(strings.Join(rest[2:], " "))
	if err != nil {
		return fail("%v", err)
	}
	return fmt.Sprintf("%d %d * * %s", m, h, dow), true, ""
}

func unitOf(w string) (string, bool) {
	switch strings.TrimSuffix(w, "s") {
	case "second", "sec":
		return "s", true
	case "minute", "min":
		return "m", true
	case "hour", "hr":
		return "h", true
	}
	return "", false
}

var dayNames = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// dayNumber reads a day name, its plural or its three-letter form
// (0 = Sunday, as cron counts).
func dayNumber(w string) (int, bool) {
	w = strings.TrimSuffix(w, "s")
	for i, d := range dayNames {
		if w == d || w == d[:3] {
			return i, true
		}
	}
	return 0, false
}

// parseClock reads a time of day: 9am, 9 am, 9:30pm, 12am (midnight), 18:30,
// 7, noon, midnight.
func parseClock(s string) (hour, minute int, err error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), " ", "")
	switch s {
	case "noon":
		return 12, 0, nil
	case "midnight":
		return 0, 0, nil
	}
	bad := fmt.Errorf("%q is not a time of day: write 9am, 9:30pm or 18:30", s)
	suffix := ""
	for _, sfx := range []string{"am", "pm", "a.m.", "p.m."} {
		if rest, ok := strings.CutSuffix(s, sfx); ok {
			s, suffix = rest, sfx[:1]
			break
		}
	}
	hs, ms, hasMin := strings.Cut(s, ":")
	if hs == "" || len(hs) > 2 || hasMin && len(ms) != 2 {
		return 0, 0, bad
	}
	hour, err1 := strconv.Atoi(hs)
	if hasMin {
		var err2 error
		minute, err2 = strconv.Atoi(ms)
		if err2 != nil || minute < 0 || minute > 59 {
			return 0, 0, bad
		}
	}
	if err1 != nil || hour < 0 {
		return 0, 0, bad
	}
	switch suffix {
	case "a", "p":
		if hour < 1 || hour > 12 {
			return 0, 0, bad
		}
		hour %= 12
		if suffix == "p" {
			hour += 12
		}
	default:
		if hour > 23 {
			return 0, 0, bad
		}
	}
	return hour, minute, nil
}
