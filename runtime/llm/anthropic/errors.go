package anthropic

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/trellis-run/trellis/runtime/llm"
)

// streamErrorStatus gives the error types Anthropic sends inside a stream
// the HTTP status they stand for (the stream itself is a 200).
var streamErrorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"overloaded_error":      529,
}

// callError classifies a call that failed before its stream began. Every
// result is a provider_error naming the provider and the HTTP status;
// those worth another attempt are wrapped as llm.TransientError.
func (p *Provider) callError(ctx context.Context, rec *llm.FailureRecorder, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if f := rec.Failure(); f != nil {
		msg, _ := llm.ParseErrorBody(f.Body)
		return p.statusError(f.Status, msg, llm.RetryAfter(f.Header, time.Now()))
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 {
		var after time.Duration
		if apiErr.Response != nil {
			after = llm.RetryAfter(apiErr.Response.Header, time.Now())
		}
		return p.statusError(apiErr.StatusCode, apiErr.Message, after)
	}
	return llm.Transient(llm.ConnectionError(Vendor, p.label, err, p.cfg.APIKey), 0)
}

func (p *Provider) statusError(status int, msg string, retryAfter time.Duration) error {
	msg = llm.Redact(msg, p.cfg.APIKey)
	return llm.ResponseError(Vendor, p.label, status, msg, contextOverflow(status, msg), retryAfter)
}

// streamError classifies a failure while reading the stream: an error
// event (overloaded_error and the like), or a broken connection.
func (p *Provider) streamError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		typ := string(apiErr.Type())
		status := streamErrorStatus[typ]
		msg := llm.Redact(apiErr.Message, p.cfg.APIKey)
		if contextOverflow(status, msg) {
			return llm.ContextWindowError(Vendor, p.label, status, msg)
		}
		e := llm.NewError(Vendor, status, "%s: the server reported an error mid-stream (%s): %s", p.label, typ, msg)
		if llm.RetryableStatus(status) {
			return llm.Transient(e, 0)
		}
		return e
	}
	var ne net.Error
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &ne) {
		return llm.Transient(llm.ConnectionError(Vendor, p.label, err, p.cfg.APIKey), 0)
	}
	return llm.NewError(Vendor, 0, "%s: the stream could not be read: %s", p.label, llm.Redact(err.Error(), p.cfg.APIKey))
}

// contextOverflow recognises Anthropic's "prompt is too long: N tokens > M
// maximum" and "input length and `max_tokens` exceed context limit".
func contextOverflow(status int, msg string) bool {
	if status != 400 && status != 413 {
		return false
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") || strings.Contains(m, "exceed context limit") ||
		strings.Contains(m, "context window")
}
