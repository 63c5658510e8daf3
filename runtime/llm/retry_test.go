package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

func TestRetryDelay(t *testing.T) {
	low := llm.RetryPolicy{Jitter: func() float64 { return 0 }}
	high := llm.RetryPolicy{Jitter: func() float64 { return 0.999 }}
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		min, max   time.Duration
		ok         bool
	}{
		{1, 0, 250 * time.Millisecond, 500 * time.Millisecond, true},
		{2, 0, 500 * time.Millisecond, time.Second, true},
		{3, 0, time.Second, 2 * time.Second, true},
		{10, 0, 4 * time.Second, 8 * time.Second, true}, // capped at MaxDelay
		{1, time.Second, time.Second, 1100 * time.Millisecond, true},
		{1, 61 * time.Second, 0, 0, false},
	}
	for _, tc := range tests {
		a, okA := low.Delay(tc.attempt, tc.retryAfter)
		b, okB := high.Delay(tc.attempt, tc.retryAfter)
		if okA != tc.ok || okB != tc.ok || a < tc.min || b > tc.max || a > b {
			t.Errorf("Delay(%d, %v) = [%v, %v] %v, want within [%v, %v] %v", tc.attempt, tc.retryAfter, a, b, okA, tc.min, tc.max, tc.ok)
		}
	}
}

// scripted is an open function failing with errs in turn, then streaming.
type scripted struct {
	errs   []error
	chunks []llm.Chunk
	after  error // the stream's error after its chunks (io.EOF when nil)
	opens  int
}

func (s *scripted) open(ctx context.Context) (llm.Stream, error) {
	s.opens++
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	return &sliceStream{chunks: append([]llm.Chunk(nil), s.chunks...), err: s.after}, nil
}

func TestRetryOpen(t *testing.T) {
	boom := llm.NewError("v", 500, "v: HTTP 500")
	denied := llm.NewError("v", 401, "v: HTTP 401")
	hello := llm.Chunk{Kind: llm.ChunkText, Text: "hello"}
	tests := []struct {
		name    string
		s       *scripted
		opens   int
		waits   int
		wantErr error
		msg     string
	}{
		{name: "first try", s: &scripted{chunks: []llm.Chunk{hello}}, opens: 1},
		{name: "transient then success", s: &scripted{errs: []error{llm.Transient(boom, 0)}, chunks: []llm.Chunk{hello}}, opens: 2, waits: 1},
		{name: "not transient", s: &scripted{errs: []error{denied}}, opens: 1, wantErr: denied},
		{name: "gives up", s: &scripted{errs: []error{llm.Transient(boom, 0), llm.Transient(boom, 0), llm.Transient(boom, 0)}},
			opens: 3, waits: 2, msg: "v: HTTP 500 (gave up after 3 attempts)"},
		{name: "first Next fails", s: &scripted{after: llm.Transient(boom, 0)}, opens: 3, waits: 2, msg: "gave up"},
		{name: "empty stream", s: &scripted{}, opens: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			waits := 0
			p := llm.RetryPolicy{Attempts: 3, Sleep: func(context.Context, time.Duration) error { waits++; return nil }}
			s, err := p.Open(context.Background(), tc.s.open)
			if tc.s.opens != tc.opens || waits != tc.waits {
				t.Errorf("opens %d waits %d, want %d %d", tc.s.opens, waits, tc.opens, tc.waits)
			}
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("err %v, want %v", err, tc.wantErr)
				}
			case tc.msg != "":
				var e *errs.Error
				if !errors.As(err, &e) || !strings.Contains(e.Msg, tc.msg) || llm.IsTransient(err) || e.Data["status"] != 500 {
					t.Errorf("err %#v, want a final provider_error saying %q", err, tc.msg)
				}
				if boom.Msg != "v: HTTP 500" {
					t.Errorf("the original error was changed: %q", boom.Msg)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				got, err := llm.Collect(s)
				if err != nil || got.Text != strings.Repeat("hello", len(tc.s.chunks)) {
					t.Errorf("stream %+v, %v", got, err)
				}
			}
		})
	}
}

func TestRetryOpenUnwrapsLaterFailures(t *testing.T) {
	boom := llm.NewError("v", 0, "v: connection reset")
	s := &scripted{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "a"}}, after: llm.Transient(boom, 0)}
	st, err := llm.RetryPolicy{}.Open(context.Background(), s.open)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := st.Next(); err != nil || c.Text != "a" {
		t.Fatalf("first %+v %v", c, err)
	}
	if _, err := st.Next(); err != boom {
		t.Errorf("later failure %v, want the provider error itself", err)
	}
	if s.opens != 1 {
		t.Errorf("retried after the first token")
	}
}

func TestRetryOpenStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// The server asks for an hour's wait: Open returns only if the cancel
	// ends the wait.
	s := &scripted{errs: []error{llm.Transient(llm.NewError("v", 503, "busy"), time.Hour)}}
	var heard time.Duration
	p := llm.RetryPolicy{MaxRetryAfter: 2 * time.Hour, OnRetry: func(_ int, wait time.Duration, _ error) { heard = wait; cancel() }}
	_, err := p.Open(ctx, s.open)
	if !errors.Is(err, context.Canceled) || heard < time.Hour || s.opens != 1 {
		t.Errorf("err %v after %d opens, OnRetry heard %v", err, s.opens, heard)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "1"}, time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http.TimeFormat)}, 3 * time.Second},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "-4"}, 0},
		{nil, 0},
	}
	for _, tc := range tests {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got := llm.RetryAfter(h, now); got != tc.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

func TestRetryableStatus(t *testing.T) {
	for status, want := range map[int]bool{400: false, 401: false, 403: false, 404: false, 408: true, 409: true,
		429: true, 500: true, 502: true, 503: true, 529: true} {
		if llm.RetryableStatus(status) != want {
			t.Errorf("RetryableStatus(%d) != %v", status, want)
		}
	}
}

func TestParseErrorBody(t *testing.T) {
	tests := []struct{ body, msg, code string }{
		{`{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}`, "Incorrect API key", "invalid_api_key"},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "Overloaded", "overloaded_error"},
		{`{"error":{"code":400,"message":"too big","type":"exceed_context_size_error"}}`, "too big", "400"},
		{`{"error":"model not found"}`, "model not found", ""},
		{`{"object":"error","message":"bad","type":"BadRequestError","code":400}`, "bad", "400"},
		{`{"detail":"Not Found"}`, "Not Found", ""},
		{"<html>\n<h1>502 Bad Gateway</h1>", "<html>", ""},
		{"", "", ""},
	}
	for _, tc := range tests {
		msg, code := llm.ParseErrorBody([]byte(tc.body))
		if msg != tc.msg || code != tc.code {
			t.Errorf("ParseErrorBody(%s) = %q, %q; want %q, %q", tc.body, msg, code, tc.msg, tc.code)
		}
	}
}

func FuzzParseErrorBody(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"m","code":1}}`, `{"error":"x"}`, `{"message":3}`, "plain", `{"error":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, _ := llm.ParseErrorBody(body)
		if !json0(body) && utf8.Valid(body) && len(msg) > 300+len("…") {
			t.Errorf("non-JSON message not clipped: %d bytes", len(msg))
		}
	})
}

// json0 reports whether b starts like a JSON object.
func json0(b []byte) bool { return len(b) > 0 && b[0] == '{' }

func TestRedact(t *testing.T) {
	key := "sk-proj-abcdef123456"
	tests := []struct{ in, want string }{
		{"Incorrect API key provided: sk-proj-********3456.", "Incorrect API key provided: [redacted]."},
		{"key " + key + " rejected", "key [redacted] rejected"},
		{"header Bearer abcd.ef-ghi was bad", "header Bearer [redacted] was bad"},
		{"my-secret-token leaked", "[redacted] leaked"},
		{"invalid key-value pair", "invalid key-value pair"},
	}
	for _, tc := range tests {
		if got := llm.Redact(tc.in, key, "my-secret-token", ""); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestProviderErrors(t *testing.T) {
	e := llm.StatusError("openai", "openai (x:1)", 401, "bad key")
	if e.Msg != "openai (x:1): HTTP 401 Unauthorized: bad key" || e.Data["status"] != 401 || e.Data["provider"] != "openai" {
		t.Errorf("StatusError = %#v", e)
	}
	c := llm.ContextWindowError("anthropic", "anthropic", 400, "prompt is too long")
	if !errors.Is(c, llm.ErrContextWindowFull) || !strings.Contains(c.Msg, "/compact") || c.Code != errcode.ProviderError {
		t.Errorf("ContextWindowError = %#v", c)
	}
	conn := llm.ConnectionError("openai", "openai", fmt.Errorf("read: %w", io.ErrUnexpectedEOF))
	if !strings.Contains(conn.Msg, "closed the connection early") || conn.Data["status"] != 0 {
		t.Errorf("ConnectionError = %#v", conn)
	}
	if got := llm.EndpointLabel("openai", "https://api.openai.com/v1/", "https://api.openai.com/v1"); got != "openai" {
		t.Errorf("EndpointLabel = %q", got)
	}
}

func TestRetryOpenTellsTheObserver(t *testing.T) {
	s := &scripted{
		errs: []error{
			llm.Transient(llm.NewError("openai", 429, "slow down"), 2*time.Second),
			llm.Transient(llm.NewError("openai", 0, "reset"), 0),
		},
		chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "hi"}},
	}
	var heard []llm.Retry
	ctx := llm.WithRetryObserver(context.Background(), func(r llm.Retry) { heard = append(heard, r) })
	p := llm.RetryPolicy{Jitter: func() float64 { return 0 }, Sleep: func(context.Context, time.Duration) error { return nil }}
	st, err := p.Open(ctx, s.open)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if len(heard) != 2 {
		t.Fatalf("heard %d retries, want 2: %+v", len(heard), heard)
	}
	if r := heard[0]; r.Attempt != 1 || r.Wait != 2*time.Second || r.Status != 429 || r.Reason != "rate_limited" {
		t.Errorf("first retry = %+v, want attempt 1, wait 2s, status 429, rate_limited", r)
	}
	if r := heard[1]; r.Attempt != 2 || r.Status != 0 || r.Reason != "connection" {
		t.Errorf("second retry = %+v, want attempt 2, status 0, connection", r)
	}
}

func TestRetryReason(t *testing.T) {
	for status, want := range map[int]string{0: "connection", 408: "timeout", 409: "conflict", 429: "rate_limited",
		500: "server_error", 502: "server_error", 503: "overloaded", 529: "overloaded", 418: "418"} {
		if got := llm.RetryReason(status); got != want {
			t.Errorf("RetryReason(%d) = %q, want %q", status, got, want)
		}
	}
}

func TestRateLimitWait(t *testing.T) {
	now := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"openai requests exhausted", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "1s",
			"X-Ratelimit-Remaining-Tokens": "100", "X-Ratelimit-Reset-Tokens": "6m0s"}, time.Second},
		{"openai both exhausted: the later reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "20ms",
			"X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "1m30.5s"}, 90*time.Second + 500*time.Millisecond},
		{"openai seconds", map[string]string{"X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "2.5"}, 2500 * time.Millisecond},
		{"nothing exhausted", map[string]string{"X-Ratelimit-Remaining-Requests": "3", "X-Ratelimit-Reset-Requests": "1s"}, 0},
		{"anthropic output tokens exhausted", map[string]string{"Anthropic-Ratelimit-Output-Tokens-Remaining": "0", "Anthropic-Ratelimit-Output-Tokens-Reset": at(7 * time.Second),
			"Anthropic-Ratelimit-Requests-Remaining": "10", "Anthropic-Ratelimit-Requests-Reset": at(50 * time.Second)}, 7 * time.Second},
		{"anthropic reset passed", map[string]string{"Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": at(-time.Second)}, 0},
		{"unreadable reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "soon"}, 0},
		{"reset past a day", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "25h"}, 0},
		{"remaining unreadable", map[string]string{"X-Ratelimit-Remaining-Requests": "none", "X-Ratelimit-Reset-Requests": "1s"}, 0},
		{"none", nil, 0},
	}
	for _, tc := range tests {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if got := llm.RateLimitWait(h, now); got != tc.want {
			t.Errorf("%s: RateLimitWait = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Retry-After wins over the rate-limit headers; they count without it.
	h := http.Header{}
	h.Set("X-Ratelimit-Remaining-Requests", "0")
	h.Set("X-Ratelimit-Reset-Requests", "4s")
	if got := llm.RetryAfter(h, now); got != 4*time.Second {
		t.Errorf("RetryAfter with only rate-limit headers = %v, want 4s", got)
	}
	h.Set("Retry-After", "1")
	if got := llm.RetryAfter(h, now); got != time.Second {
		t.Errorf("RetryAfter with Retry-After: 1 = %v, want 1s", got)
	}
}

// FuzzParseRateLimitReset: any header value gives a wait from 0 to a day,
// and never panics; RateLimitWait likewise.
func FuzzParseRateLimitReset(f *testing.F) {
	for _, s := range []string{"1s", "6m0s", "1m30.951s", "20ms", "2.5", "2026-12-06T08:00:05Z", "NaN", "-1", "1e300", "9223372036854775807ns", ""} {
		f.Add(s, "0")
	}
	now := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, reset, remaining string) {
		if d := llm.ParseRateLimitReset(reset, now); d < 0 || d > 24*time.Hour {
			t.Fatalf("ParseRateLimitReset(%q) = %v", reset, d)
		}
		h := http.Header{}
		h.Set("Anthropic-Ratelimit-Tokens-Remaining", remaining)
		h.Set("Anthropic-Ratelimit-Tokens-Reset", reset)
		h.Set("X-Ratelimit-Remaining-Requests", remaining)
		h.Set("X-Ratelimit-Reset-Requests", reset)
		if d := llm.RateLimitWait(h, now); d < 0 || d > 24*time.Hour {
			t.Fatalf("RateLimitWait(%q, %q) = %v", remaining, reset, d)
		}
	})
}
