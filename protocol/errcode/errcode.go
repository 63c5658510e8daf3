package errcode

import (
	"encoding/json"
	"fmt"
	"sort"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
)

// Domain is the google.rpc.ErrorInfo domain of Trellis errors: the runtime
// sets it, and a client trusts an ErrorInfo reason only under it.
const Domain = "trellis"

// Numeric JSON-RPC codes that have no string code of their own: both carry
// data.code = invalid_params.
const (
	NumericParseError     = -32700
	NumericInvalidRequest = -32600
)

// unknownNumeric is used for a string code this facade does not know yet (a
// newer runtime): the generic application error.
const unknownNumeric = -32000

// Numeric returns the JSON-RPC numeric code of a string code, and whether the
// code is known.
func Numeric(code string) (int, bool) {
	n, ok := numeric[code]
	return n, ok
}

// GRPC returns the gRPC code of the status that carries a string code (as a
// google.rpc.Code, whose numbers are gRPC's), and whether the code is known.
func GRPC(code string) (rpccode.Code, bool) {
	c, ok := grpcCodes[code]
	return c, ok
}

// FromGRPC returns the string code of a gRPC status that carries no Trellis
// ErrorInfo (raised by gRPC itself, an interceptor or a proxy), and false
// when that gRPC code has no fallback (the status is then internal).
func FromGRPC(c rpccode.Code) (string, bool) {
	code, ok := byGRPCCode[c]
	return code, ok
}

// Codes returns every known string code, sorted.
func Codes() []string {
	out := make([]string, 0, len(numeric))
	for c := range numeric {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Error is a JSON-RPC 2.0 error object. Data always holds "code", the
// protocol's string code; other keys add detail (retryAfterMs, errorId, ...).
type Error struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

// Error returns "code: message", with the string code.
func (e *Error) Error() string { return e.StringCode() + ": " + e.Message }

// StringCode returns data.code, or "" when it is missing.
func (e *Error) StringCode() string {
	s, _ := e.Data["code"].(string)
	return s
}

// Is reports whether target is an *Error with the same string code and no
// message, so that errors.Is(err, &errcode.Error{Data: map[string]any{"code":
// errcode.NotFound}}) works; prefer HasCode.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.StringCode() == e.StringCode()
}

// HasCode reports whether e carries the string code.
func (e *Error) HasCode(code string) bool { return e != nil && e.StringCode() == code }

// WithData returns e with data[key] = value ("code" cannot be replaced).
func (e *Error) WithData(key string, value any) *Error {
	if key == "code" {
		return e
	}
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	e.Data[key] = value
	return e
}

// UnmarshalJSON decodes an error object (as Go clients receive it). Integral
// numbers in data decode as int64 (so retryAfterMs stays an integer), other
// numbers as float64.
func (e *Error) UnmarshalJSON(b []byte) error {
	var raw struct {
		Code    *int            `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw.Code == nil {
		return fmt.Errorf("error object has no code")
	}
	e.Code, e.Message, e.Data = *raw.Code, raw.Message, nil
	if len(raw.Data) > 0 && string(raw.Data) != "null" {
		var data map[string]json.RawMessage
		if err := json.Unmarshal(raw.Data, &data); err != nil {
			return fmt.Errorf("error data: %w", err)
		}
		e.Data = make(map[string]any, len(data))
		for k, v := range data {
			e.Data[k] = decodeDataValue(v)
		}
	}
	return nil
}

func decodeDataValue(v json.RawMessage) any {
	var n json.Number
	if err := json.Unmarshal(v, &n); err == nil {
		if i, err := n.Int64(); err == nil {
			return i
		}
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	var x any
	_ = json.Unmarshal(v, &x)
	return x
}

// New builds an error with a string code and a formatted message. A code
// missing from the table gets the generic application numeric code -32000.
func New(code, format string, args ...any) *Error {
	n, ok := numeric[code]
	if !ok {
		n = unknownNumeric
	}
	return &Error{Code: n, Message: fmt.Sprintf(format, args...), Data: map[string]any{"code": code}}
}

// ParseError is -32700: the frame is not JSON.
func ParseError(detail string) *Error {
	e := New(InvalidParams, "parse error: %s", detail)
	e.Code = NumericParseError
	return e
}

// InvalidRequest is -32600: the frame is JSON but not a request object, or an
// empty or oversized batch.
func InvalidRequest(msg string) *Error {
	e := New(InvalidParams, "invalid request: %s", msg)
	e.Code = NumericInvalidRequest
	return e
}

// NewMethodNotFound is -32601 for an unknown method.
func NewMethodNotFound(method string) *Error {
	return New(MethodNotFound, "method %q not found", method)
}

// NewInvalidParams is -32602 with msg.
func NewInvalidParams(msg string) *Error { return New(InvalidParams, "%s", msg) }

// NewUnauthorized is an unauthorized error with msg.
func NewUnauthorized(msg string) *Error { return New(Unauthorized, "%s", msg) }

// NewOverloaded is an overloaded error telling the client when to retry.
func NewOverloaded(retryAfterMs int) *Error {
	return New(Overloaded, "too many requests in flight; retry after %d ms", retryAfterMs).
		WithData("retryAfterMs", int64(retryAfterMs))
}
