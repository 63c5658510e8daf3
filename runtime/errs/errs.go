// Package errs carries the protocol's string error codes as Go errors, so
// that every domain package can say which code a failure carries without
// knowing about gRPC or JSON-RPC: errs.New(errcode.NotFound, "no session %s",
// id). The codes themselves are package errcode's (generated from
// errors.proto); runtime/rpc maps them to gRPC status by errcode's table.
package errs

import (
	"errors"
	"fmt"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// Error is a failure that reaches a client with a protocol code and a message
// a person can act on. Data carries extra fields for the error's data object
// (for example "status" and "provider" for provider_error).
type Error struct {
	Code string
	Msg  string
	Data map[string]any
	// Err is an optional cause; it is never shown to clients.
	Err error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &errs.Error{Code: errcode.NotFound}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Msg == ""
}

// New builds an *Error with a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error whose cause is err (kept for logs, never shown).
func Wrap(code string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

// WithData returns e with a data field set.
func (e *Error) WithData(key string, value any) *Error {
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	e.Data[key] = value
	return e
}

// CodeOf returns the protocol code carried by err, or errcode.Internal when err
// carries none. A nil error has no code ("").
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return errcode.Internal
}

// Is reports whether err carries the given code.
func Is(err error, code string) bool { return err != nil && CodeOf(err) == code }

// NewUnsupported is the unsupported error for an enum value or capability the
// protocol knows but this daemon does not provide: data.field names the
// parameter and data.value the missing value, so a client can tell it apart
// from a wrong input (invalid_params).
func NewUnsupported(field, value, format string, args ...any) *Error {
	return New(errcode.Unsupported, format, args...).WithData("field", field).WithData("value", value)
}
