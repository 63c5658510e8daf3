package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/runtime/errs"
)

// ErrContextWindowFull is wrapped by the provider_error a vendor reports when
// the conversation no longer fits in the model's context window; callers may
// test for it with errors.Is (to suggest or run a compaction).
var ErrContextWindowFull = errors.New("the context window is full")

// RetryableStatus reports whether an HTTP status is worth another attempt:
// request timeout, conflict, rate limit, and server errors (529 included).
func RetryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// RetryAfter reads how long a response asks the client to wait: the
// retry-after-ms header (OpenAI, Anthropic), else Retry-After in seconds or
// as an HTTP date, else the reset of the vendor's exhausted rate limit
// (RateLimitWait: x-ratelimit-reset-requests/-tokens,
// anthropic-ratelimit-*-reset). It returns 0 when the headers say nothing
// usable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if d := retryAfterHeader(h, now); d > 0 {
		return d
	}
	return RateLimitWait(h, now)
}

// retryAfterHeader reads retry-after-ms, else Retry-After.
func retryAfterHeader(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// NewHTTPClient returns the HTTP client vendors use by default: no overall
// timeout (an answer may stream for minutes), bounded connection set-up.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}

// EndpointLabel names a provider for people: the vendor alone at its usual
// endpoint, else with the endpoint's host ("openai (localhost:11434)").
func EndpointLabel(vendor, baseURL, defaultURL string) string {
	if strings.TrimRight(baseURL, "/") == strings.TrimRight(defaultURL, "/") {
		return vendor
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return vendor
	}
	return vendor + " (" + u.Host + ")"
}

// HTTPFailure is the error response of one vendor call.
type HTTPFailure struct {
	Status int
	Header http.Header
	Body   []byte // the start of the body (at most maxFailureBody bytes)
}

const maxFailureBody = 64 << 10

// FailureRecorder keeps the error response of one call. SDKs parse only
// their own vendor's error shape and may lose the status of a body they do
// not understand; the recorder sees the raw response whatever the server.
// Its Middleware has the signature of the openai-go and anthropic-sdk-go
// middlewares. Use one recorder per HTTP request.
type FailureRecorder struct {
	// Limiter, when set, is held (Limiter.Hold) until the reset of a rate
	// limit any response, success or failure, says is exhausted, so that
	// the provider's other calls wait for it instead of meeting a 429.
	Limiter *Limiter

	mu      sync.Mutex
	failure *HTTPFailure
}

// Middleware records a response whose status is 400 or more and puts its
// body back for the SDK to read.
func (r *FailureRecorder) Middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && r.Limiter != nil {
		now := time.Now()
		if w := RateLimitWait(resp.Header, now); w > 0 {
			// At most the longest Retry-After honoured: a token budget
			// that refills over minutes is usable again long before.
			if err := r.Limiter.Hold(req.Context(), now.Add(min(w, DefaultMaxRetryAfter))); err != nil {
				r.Limiter.o.Log.Warn("could not keep the vendor's rate-limit hold in the store", "provider", r.Limiter.o.Provider, "err", err)
			}
		}
	}
	if err != nil || resp == nil || resp.StatusCode < 400 {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxFailureBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.failure = &HTTPFailure{Status: resp.StatusCode, Header: resp.Header.Clone(), Body: body}
	r.mu.Unlock()
	return resp, nil
}

// Failure returns the recorded error response, or nil.
func (r *FailureRecorder) Failure() *HTTPFailure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failure
}

// ParseErrorBody finds the human message and the machine code in an error
// body, in the shapes that OpenAI, Anthropic, vLLM, Ollama, llama.cpp and
// most proxies use: {"error":{"message","code"|"type"}}, {"error":"…"},
// {"message","code"|"type"}, {"detail":"…"}. A body that is not JSON is
// returned as its first line, clipped.
func ParseErrorBody(body []byte) (message, code string) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) == nil {
		if raw, ok := top["error"]; ok {
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) == nil {
				return jsonText(obj["message"]), firstNonEmpty(jsonText(obj["code"]), jsonText(obj["type"]))
			}
			if s := jsonText(raw); s != "" {
				return s, firstNonEmpty(jsonText(top["code"]), jsonText(top["type"]))
			}
		}
		if m := firstNonEmpty(jsonText(top["message"]), jsonText(top["detail"])); m != "" {
			return m, firstNonEmpty(jsonText(top["code"]), jsonText(top["type"]))
		}
	}
	text := strings.TrimSpace(string(body))
	text, _, _ = strings.Cut(text, "\n")
	return clipText(text, 300), ""
}

// jsonText renders a JSON string or number as text ("" for anything else).
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

var credentialPattern = regexp.MustCompile(`\b(sk-|sk_|Bearer\s+)[A-Za-z0-9_\-*]{4,}(\.[A-Za-z0-9_\-*]+)*`)

// Redact removes credentials from a vendor's message before anyone sees it:
// each of secrets, and anything shaped like an API key or a bearer token
// (vendors echo a masked key back in 401 messages).
func Redact(s string, secrets ...string) string {
	for _, secret := range secrets {
		if len(secret) >= 4 {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return credentialPattern.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "Bearer") {
			return "Bearer [redacted]"
		}
		return "[redacted]"
	})
}

// StatusError is the provider_error of a call the server answered with an
// error status. label names the provider for a person ("openai",
// "openai (api.deepseek.com)"); detail is the server's message, redacted.
func StatusError(provider, label string, status int, detail string) *errs.Error {
	text := http.StatusText(status)
	msg := fmt.Sprintf("%s: HTTP %d", label, status)
	if text != "" {
		msg += " " + text
	}
	if detail != "" {
		msg += ": " + detail
	}
	return NewError(provider, status, "%s", msg)
}

// ContextWindowError is the provider_error of a call refused because the
// conversation no longer fits in the model's context window. It wraps
// ErrContextWindowFull.
func ContextWindowError(provider, label string, status int, detail string) *errs.Error {
	e := NewError(provider, status,
		"%s: the context window is full: the conversation no longer fits in what the model can read (HTTP %d: %s). "+
			"Run /compact to summarise older messages, or /clear to start afresh.", label, status, detail)
	e.Err = ErrContextWindowFull
	return e
}

// ResponseError is the error of a call the server answered with an error
// status: a ContextWindowError when overflow says the conversation did not
// fit, else a StatusError, transient (retried after retryAfter, or the
// policy's own delay when it is 0) when the status is worth another
// attempt. detail is the server's message, redacted.
func ResponseError(provider, label string, status int, detail string, overflow bool, retryAfter time.Duration) error {
	if overflow {
		return ContextWindowError(provider, label, status, detail)
	}
	e := StatusError(provider, label, status, detail)
	if RetryableStatus(status) {
		return Transient(e, retryAfter)
	}
	return e
}

// ConnectionError is the provider_error of a call that failed below HTTP:
// refused, reset, cut short. Only the innermost cause is kept, since the
// URL may carry more than it should.
func ConnectionError(provider, label string, err error, secrets ...string) *errs.Error {
	var u *url.Error
	if errors.As(err, &u) {
		err = u.Err
	}
	cause := "unknown error"
	if err != nil {
		cause = Redact(err.Error(), secrets...)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		cause = "the server closed the connection early"
	}
	return NewError(provider, 0, "%s: the connection to the model server failed: %s", label, cause)
}
