package openai

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/trellis-run/trellis/runtime/llm"
)

// callError classifies a call that failed before its stream began. Every
// result is a provider_error naming the provider and the HTTP status;
// those worth another attempt are wrapped as llm.TransientError.
func (p *Provider) callError(ctx context.Context, rec *llm.FailureRecorder, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if f := rec.Failure(); f != nil {
		return p.statusError(f.Status, f.Body, f)
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		body := []byte(`{"error":` + apiErr.RawJSON() + `}`)
		f := &llm.HTTPFailure{Status: apiErr.StatusCode}
		if apiErr.Response != nil {
			f.Header = apiErr.Response.Header
		}
		return p.statusError(apiErr.StatusCode, body, f)
	}
	return llm.Transient(llm.ConnectionError(Vendor, p.label, err, p.cfg.APIKey), 0)
}

// statusError is the error of an HTTP error response.
func (p *Provider) statusError(status int, body []byte, f *llm.HTTPFailure) error {
	msg, code := llm.ParseErrorBody(body)
	msg = llm.Redact(msg, p.cfg.APIKey)
	return llm.ResponseError(Vendor, p.label, status, msg, contextOverflow(status, code, msg), llm.RetryAfter(f.Header, time.Now()))
}

// streamError classifies a failure while reading the stream: an error
// object sent in place of a chunk, or a broken connection.
func (p *Provider) streamError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		msg, code := llm.ParseErrorBody(se.Event.Data)
		msg = llm.Redact(msg, p.cfg.APIKey)
		status, _ := strconv.Atoi(code)
		if contextOverflow(status, code, msg) {
			return llm.ContextWindowError(Vendor, p.label, status, msg)
		}
		e := llm.NewError(Vendor, status, "%s: the server reported an error mid-stream: %s", p.label, msg)
		if llm.RetryableStatus(status) || strings.Contains(code, "server_error") ||
			strings.Contains(code, "overloaded") || strings.Contains(code, "rate_limit") {
			return llm.Transient(e, 0)
		}
		return e
	}
	if brokenConnection(err) {
		return llm.Transient(llm.ConnectionError(Vendor, p.label, err, p.cfg.APIKey), 0)
	}
	return llm.NewError(Vendor, 0, "%s: the stream could not be read: %s", p.label, llm.Redact(err.Error(), p.cfg.APIKey))
}

// brokenConnection reports whether err is the network failing rather than
// the server saying something we could not read.
func brokenConnection(err error) bool {
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}

// contextOverflow recognises "the prompt does not fit" in the words of
// OpenAI (code context_length_exceeded), llama.cpp (exceed_context_size_error)
// and the servers that only say it in prose (vLLM, proxies).
func contextOverflow(status int, code, msg string) bool {
	if code == "context_length_exceeded" || code == "exceed_context_size_error" {
		return true
	}
	if status != 0 && status != 400 && status != 413 {
		return false
	}
	m := strings.ToLower(msg)
	for _, phrase := range []string{"maximum context length", "context length", "context_length", "context window",
		"context size", "prompt is too long"} {
		if strings.Contains(m, phrase) {
			return true
		}
	}
	return false
}
