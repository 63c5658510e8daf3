package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DiscordAPIEnv overrides the Discord REST API base URL (tests).
const DiscordAPIEnv = "TRELLIS_DISCORD_API"

// DiscordOptions configure Discord bindings; zero values mean the defaults.
type DiscordOptions struct {
	// API is the REST API base URL (default $TRELLIS_DISCORD_API, else
	// https://discord.com/api/v10). The Gateway's URL comes from its
	// GET /gateway/bot.
	API string
	// EditInterval bounds how often a streamed answer's message is edited
	// (default 1 s: Discord allows about 5 edits per 5 s per channel).
	EditInterval time.Duration
	// ReidentifyDelay is the wait after an Invalid Session (op 9) before a
	// new Identify (default 1–5 s at random, as Discord asks).
	ReidentifyDelay time.Duration
	// MaxRetries bounds the retries of a rate-limited (429) request
	// (default 5).
	MaxRetries int
}

func (o DiscordOptions) withDefaults(getenv func(string) string) DiscordOptions {
	if o.API == "" {
		o.API = getenv(DiscordAPIEnv)
	}
	if o.API == "" {
		o.API = "https://discord.com/api/v10"
	}
	o.API = strings.TrimRight(o.API, "/")
	if o.EditInterval <= 0 {
		o.EditInterval = time.Second
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 5
	}
	return o
}

// dcLimits is the REST rate-limit state of one bot token: per route, the
// bucket Discord named (X-RateLimit-Bucket) and per bucket (and major
// parameter, the channel) the requests left and when they come back; and
// the global limit's end.
type dcLimits struct {
	mu          sync.Mutex
	routes      map[string]string // route key → bucket hash
	buckets     map[string]*dcBucket
	globalUntil time.Time
}

type dcBucket struct {
	remaining int
	reset     time.Time
}

// discordLimits returns the limits of a token (one per binding's token).
func (s *Service) discordLimits(b *binding) *dcLimits {
	v, _ := s.discord.LoadOrStore(b.secret, &dcLimits{routes: map[string]string{}, buckets: map[string]*dcBucket{}})
	return v.(*dcLimits)
}

// key is the state key of a route: its bucket's hash with the major
// parameter when Discord named one, else the route itself.
func (l *dcLimits) key(route, major string) string {
	if h := l.routes[route]; h != "" {
		return h + ":" + major
	}
	return route
}

// wait returns how long to wait before a request on route may go out.
func (l *dcLimits) wait(route, major string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.globalUntil.Sub(now)
	if bk := l.buckets[l.key(route, major)]; bk != nil && bk.remaining <= 0 {
		d = max(d, bk.reset.Sub(now))
	}
	return max(d, 0)
}

// note takes in the rate-limit headers of a response.
func (l *dcLimits) note(route, major string, h http.Header, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hash := h.Get("X-RateLimit-Bucket"); hash != "" {
		l.routes[route] = hash
	}
	rem, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	after, err2 := strconv.ParseFloat(h.Get("X-RateLimit-Reset-After"), 64)
	if err1 != nil || err2 != nil {
		return
	}
	k := l.key(route, major)
	l.buckets[k] = &dcBucket{remaining: rem, reset: now.Add(seconds64(after))}
}

// limited takes in a 429: the global limit or the route's bucket is shut
// for retry.
func (l *dcLimits) limited(route, major string, global bool, retry time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if global {
		l.globalUntil = now.Add(retry)
		return
	}
	l.buckets[l.key(route, major)] = &dcBucket{remaining: 0, reset: now.Add(retry)}
}

func seconds64(f float64) time.Duration {
	if f < 0 || f > 3600 {
		f = min(max(f, 0), 3600)
	}
	return time.Duration(f * float64(time.Second))
}

// dcRateLimited is the body of a 429.
type dcRateLimited struct {
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after"`
	Global     bool    `json:"global"`
}

// parseRetry reads how long a 429 asks to wait: the body's retry_after
// (seconds, fractional), else the Retry-After header (seconds); global
// from the body or X-RateLimit-Global / X-RateLimit-Scope: global.
func parseRetry(h http.Header, body []byte) (time.Duration, bool) {
	var rl dcRateLimited
	_ = json.Unmarshal(body, &rl)
	global := rl.Global || strings.EqualFold(h.Get("X-RateLimit-Global"), "true") || h.Get("X-RateLimit-Scope") == "global"
	if rl.RetryAfter > 0 {
		return seconds64(rl.RetryAfter), global
	}
	if f, err := strconv.ParseFloat(h.Get("Retry-After"), 64); err == nil && f > 0 {
		return seconds64(f), global
	}
	return time.Second, global
}

// dcAPIError is a Discord REST error answer.
type dcAPIError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

// discordREST calls the REST API as b's bot: method on path (which starts
// with "/"), with body as JSON (nil: none), decoding the answer into out
// (nil: ignored). route is the rate-limit route ("POST /channels/{id}/messages")
// and major its major parameter (the channel id). It waits out the known
// limits first and retries a 429 after its retry_after. Errors never carry
// the token.
func (s *Service) discordREST(ctx context.Context, b *binding, method, path, route, major string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	lim := s.discordLimits(b)
	what := "discord " + method + " " + path
	for attempt := 0; ; attempt++ {
		if d := lim.wait(route, major, time.Now()); d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return err
			}
		}
		var rd io.Reader
		if raw != nil {
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequestWithContext(ctx, method, s.opts.Discord.API+path, rd)
		if err != nil {
			return fmt.Errorf("%s: bad API base URL", what)
		}
		req.Header.Set("Authorization", "Bot "+b.secret)
		req.Header.Set("User-Agent", "DiscordBot (https://github.com/trellis-run/trellis, 1)")
		if raw != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := s.opts.Client.Do(req)
		if err != nil {
			return s.unanswered(b, what, err)
		}
		ans, rerr := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		now := time.Now()
		lim.note(route, major, resp.Header, now)
		if resp.StatusCode == http.StatusTooManyRequests {
			retry, global := parseRetry(resp.Header, ans)
			lim.limited(route, major, global, retry, now)
			if attempt >= s.opts.Discord.MaxRetries {
				return fmt.Errorf("%s: HTTP 429: still rate limited after %d retries", what, attempt)
			}
			s.log.Info("discord rate limit: waiting", "bindingId", b.rec.BindingID, "route", route, "retryAfter", retry, "global", global)
			continue
		}
		if rerr != nil {
			return fmt.Errorf("%s: read the answer: %w", what, rerr)
		}
		if resp.StatusCode/100 != 2 {
			var ae dcAPIError
			if json.Unmarshal(ans, &ae) == nil && ae.Message != "" {
				return fmt.Errorf("%s: HTTP %d: %s (code %d)", what, resp.StatusCode, s.scrub(b, ae.Message), ae.Code)
			}
			return fmt.Errorf("%s: HTTP %d", what, resp.StatusCode)
		}
		if out != nil && len(ans) > 0 {
			if err := json.Unmarshal(ans, out); err != nil {
				return fmt.Errorf("%s: unexpected answer: %w", what, err)
			}
		}
		return nil
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// dcMessageOut is the body of a message create or edit.
type dcMessageOut struct {
	Content          string          `json:"content"`
	Components       []dcComponent   `json:"components"`
	MessageReference *dcMessageRef   `json:"message_reference,omitempty"`
	AllowedMentions  *dcAllowedMents `json:"allowed_mentions,omitempty"`
}

type dcMessageRef struct {
	MessageID       string `json:"message_id"`
	FailIfNotExists bool   `json:"fail_if_not_exists"`
}

// dcAllowedMents: an answer pings nobody.
type dcAllowedMents struct {
	Parse []string `json:"parse"`
}

// dcComponent is an action row (type 1) or a button (type 2).
type dcComponent struct {
	Type       int           `json:"type"`
	Style      int           `json:"style,omitempty"`
	Label      string        `json:"label,omitempty"`
	CustomID   string        `json:"custom_id,omitempty"`
	Components []dcComponent `json:"components,omitempty"`
}

// dcMaxContent is the longest message content Discord takes.
const dcMaxContent = 2000

// discordSend posts a message to channel and returns its id.
func (s *Service) discordSend(ctx context.Context, b *binding, channel string, m dcMessageOut) (string, error) {
	if m.AllowedMentions == nil {
		m.AllowedMentions = &dcAllowedMents{Parse: []string{}}
	}
	if m.Components == nil {
		m.Components = []dcComponent{}
	}
	var out struct {
		ID string `json:"id"`
	}
	err := s.discordREST(ctx, b, http.MethodPost, "/channels/"+channel+"/messages", "POST /channels/{channel}/messages", channel, m, &out)
	return out.ID, err
}

// discordEdit edits message mid of channel.
func (s *Service) discordEdit(ctx context.Context, b *binding, channel, mid string, m dcMessageOut) error {
	if m.Components == nil {
		m.Components = []dcComponent{}
	}
	return s.discordREST(ctx, b, http.MethodPatch, "/channels/"+channel+"/messages/"+mid, "PATCH /channels/{channel}/messages/{message}", channel, m, nil)
}

// splitContent cuts text into pieces Discord takes (at most dcMaxContent
// runes each, cut at a line break when one is near).
func splitContent(text string) []string {
	var out []string
	r := []rune(text)
	for len(r) > dcMaxContent {
		cut := dcMaxContent
		for i := dcMaxContent - 1; i > dcMaxContent-200; i-- {
			if r[i] == '\n' {
				cut = i + 1
				break
			}
		}
		out = append(out, string(r[:cut]))
		r = r[cut:]
	}
	return append(out, string(r))
}
