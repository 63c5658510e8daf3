package llm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// rateLimitPairs are the vendors' headers saying how much of a rate limit
// is left and when it refills: OpenAI's x-ratelimit-remaining-* with
// x-ratelimit-reset-* (a duration such as "1s", "6m0s" or "20ms"), and
// Anthropic's anthropic-ratelimit-*-remaining with
// anthropic-ratelimit-*-reset (an RFC 3339 time).
var rateLimitPairs = []struct{ remaining, reset string }{
	{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// RateLimitWait reads the vendors' rate-limit headers of a response and
// returns how long until every exhausted limit (remaining 0) refills: the
// latest of their resets. It returns 0 when no limit is exhausted, or the
// headers of those that are say nothing usable.
func RateLimitWait(h http.Header, now time.Time) time.Duration {
	var wait time.Duration
	for _, p := range rateLimitPairs {
		left, err := strconv.ParseFloat(strings.TrimSpace(h.Get(p.remaining)), 64)
		if err != nil || left > 0 {
			continue
		}
		if d := ParseRateLimitReset(h.Get(p.reset), now); d > wait {
			wait = d
		}
	}
	return wait
}

// maxRateLimitReset bounds what a reset header is believed to say: a
// limit that refills in more than a day is a misread header.
const maxRateLimitReset = 24 * time.Hour

// ParseRateLimitReset reads a rate-limit reset header: a Go-style duration
// (OpenAI's "1s", "6m0s", "1m30.5s", "20ms"), a number of seconds ("1.5"),
// or an RFC 3339 time (Anthropic's "2026-12-06T08:00:00Z"). It returns how
// long from now until the reset, 0 for a reset passed, a value it cannot
// read, or one more than a day away.
func ParseRateLimitReset(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s != s || s <= 0 || s > maxRateLimitReset.Seconds() {
			return 0
		}
		d = time.Duration(s * float64(time.Second))
	} else if pd, err := time.ParseDuration(v); err == nil {
		d = pd
	} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		d = t.Sub(now)
	} else {
		return 0
	}
	if d <= 0 || d > maxRateLimitReset {
		return 0
	}
	return d
}
