package errcode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// TestTableMatchesErrorCodeEnum proves the literal table equals the
// declarations in errors.proto: same codes, same numerics, nothing extra.
func TestTableMatchesErrorCodeEnum(t *testing.T) {
	values := trellisv1.ErrorCode(0).Descriptor().Values()
	declared := map[string]int{}
	for i := 0; i < values.Len(); i++ {
		v := values.Get(i)
		if v.Number() == 0 {
			continue
		}
		info, _ := proto.GetExtension(v.Options(), trellisv1.E_Error).(*trellisv1.ErrorCodeInfo)
		if info == nil || info.GetCode() == "" {
			t.Fatalf("%s has no (error) option", v.Name())
		}
		declared[info.GetCode()] = int(info.GetNumeric())
	}
	got := map[string]int{}
	for _, c := range errcode.Codes() {
		n, ok := errcode.Numeric(c)
		if !ok {
			t.Fatalf("Numeric(%q) not ok", c)
		}
		got[c] = n
	}
	if !reflect.DeepEqual(got, declared) {
		t.Fatalf("table differs from trellis.v1.ErrorCode:\n got  %v\n want %v", got, declared)
	}
}

// errWithInfo builds the status the runtime sends: ErrorInfo{reason, domain, metadata}.
func errWithInfo(c codes.Code, reason, msg string, md map[string]string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errcode.Domain, Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func testMapper(logs *bytes.Buffer) *errcode.Mapper {
	return &errcode.Mapper{
		Log:        slog.New(slog.NewTextHandler(logs, nil)),
		NewErrorID: func() string { return "e-test" },
	}
}

// TestEveryCodeRoundTrips maps a status carrying each string code and checks
// the numeric code, data.code and the message; internal is masked.
func TestEveryCodeRoundTrips(t *testing.T) {
	for _, code := range errcode.Codes() {
		t.Run(code, func(t *testing.T) {
			var logs bytes.Buffer
			got := testMapper(&logs).FromError(context.Background(), errWithInfo(codes.Aborted, code, "secret detail "+code, nil))
			want, _ := errcode.Numeric(code)
			if got.Code != want || got.StringCode() != code {
				t.Fatalf("got %d/%s, want %d/%s", got.Code, got.StringCode(), want, code)
			}
			switch code {
			case errcode.CodeInternal:
				if strings.Contains(got.Message, "secret") || got.Data["errorId"] != "e-test" {
					t.Fatalf("internal not masked: %+v", got)
				}
				if !strings.Contains(logs.String(), "secret detail") || !strings.Contains(logs.String(), "e-test") {
					t.Fatalf("internal not logged with its id: %s", logs.String())
				}
			default:
				if got.Message != "secret detail "+code {
					t.Fatalf("message = %q", got.Message)
				}
			}
			if code == errcode.CodeOverloaded && got.Data["retryAfterMs"] != int64(errcode.DefaultRetryAfterMs) {
				t.Fatalf("overloaded without retryAfterMs: %+v", got.Data)
			}
		})
	}
}

func TestFromError(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want *errcode.Error
	}{
		{
			name: "provider_error metadata, numeric strings become numbers",
			err: errWithInfo(codes.Unavailable, "provider_error", "openai: 429 rate limited",
				map[string]string{"status": "429", "provider": "openai", "retryAfterMs": "1500"}),
			want: &errcode.Error{Code: -32000, Message: "openai: 429 rate limited", Data: map[string]any{
				"code": "provider_error", "status": int64(429), "provider": "openai", "retryAfterMs": int64(1500)}},
		},
		{
			name: "non-numeric status stays a string",
			err:  errWithInfo(codes.Unavailable, "provider_error", "x", map[string]string{"status": "n/a"}),
			want: &errcode.Error{Code: -32000, Message: "x", Data: map[string]any{"code": "provider_error", "status": "n/a"}},
		},
		{
			name: "metadata cannot replace data.code",
			err:  errWithInfo(codes.NotFound, "not_found", "no session s-1", map[string]string{"code": "other"}),
			want: &errcode.Error{Code: -32004, Message: "no session s-1", Data: map[string]any{"code": "not_found"}},
		},
		{
			name: "overloaded keeps its retryAfterMs",
			err:  errWithInfo(codes.ResourceExhausted, "overloaded", "busy", map[string]string{"retryAfterMs": "250"}),
			want: &errcode.Error{Code: -32001, Message: "busy", Data: map[string]any{"code": "overloaded", "retryAfterMs": int64(250)}},
		},
		{
			name: "unknown reason of our domain keeps its code",
			err:  errWithInfo(codes.FailedPrecondition, "quota_exceeded", "quota", nil),
			want: &errcode.Error{Code: -32000, Message: "quota", Data: map[string]any{"code": "quota_exceeded"}},
		},
		{
			name: "ErrorInfo of another domain is ignored",
			err: func() error {
				st, _ := status.New(codes.NotFound, "gone").WithDetails(&errdetails.ErrorInfo{Reason: "session_busy", Domain: "example.com"})
				return st.Err()
			}(),
			want: &errcode.Error{Code: -32004, Message: "gone", Data: map[string]any{"code": "not_found"}},
		},
		{
			name: "Unauthenticated",
			err:  status.Error(codes.Unauthenticated, "missing bearer token"),
			want: &errcode.Error{Code: -32000, Message: "missing bearer token", Data: map[string]any{"code": "unauthorized"}},
		},
		{
			name: "PermissionDenied",
			err:  status.Error(codes.PermissionDenied, "not yours"),
			want: &errcode.Error{Code: -32000, Message: "not yours", Data: map[string]any{"code": "unauthorized"}},
		},
		{
			name: "NotFound",
			err:  status.Error(codes.NotFound, "no such session"),
			want: &errcode.Error{Code: -32004, Message: "no such session", Data: map[string]any{"code": "not_found"}},
		},
		{
			name: "InvalidArgument",
			err:  status.Error(codes.InvalidArgument, "workdir must exist"),
			want: &errcode.Error{Code: -32602, Message: "workdir must exist", Data: map[string]any{"code": "invalid_params"}},
		},
		{
			name: "FailedPrecondition",
			err:  status.Error(codes.FailedPrecondition, "session is closed"),
			want: &errcode.Error{Code: -32602, Message: "session is closed", Data: map[string]any{"code": "invalid_params"}},
		},
		{
			name: "ResourceExhausted",
			err:  status.Error(codes.ResourceExhausted, "queue full"),
			want: &errcode.Error{Code: -32001, Message: "queue full", Data: map[string]any{"code": "overloaded", "retryAfterMs": int64(100)}},
		},
		{
			name: "Unavailable hides the transport text",
			err:  status.Error(codes.Unavailable, "connection error: dial tcp 127.0.0.1:4000: connect: connection refused"),
			want: &errcode.Error{Code: -32001, Message: "the runtime is unavailable; retry later", Data: map[string]any{"code": "overloaded", "retryAfterMs": int64(100)}},
		},
		{
			name: "Unimplemented is not_implemented, not method_not_found",
			err:  status.Error(codes.Unimplemented, "method CreateSession not implemented"),
			want: &errcode.Error{Code: -32000, Message: "this method is not implemented by the runtime", Data: map[string]any{"code": "not_implemented"}},
		},
		{
			name: "Internal is masked",
			err:  status.Error(codes.Internal, "sql: database is locked at /home/x/.trellis/db"),
			want: &errcode.Error{Code: -32603, Message: "internal error (id e-test)", Data: map[string]any{"code": "internal", "errorId": "e-test"}},
		},
		{
			name: "Unknown is masked",
			err:  status.Error(codes.Unknown, "panic: nil map"),
			want: &errcode.Error{Code: -32603, Message: "internal error (id e-test)", Data: map[string]any{"code": "internal", "errorId": "e-test"}},
		},
		{
			name: "plain Go error is masked",
			err:  errors.New("open /etc/secret: permission denied"),
			want: &errcode.Error{Code: -32603, Message: "internal error (id e-test)", Data: map[string]any{"code": "internal", "errorId": "e-test"}},
		},
		{
			name: "context cancellation is internal",
			err:  fmt.Errorf("call: %w", context.Canceled),
			want: &errcode.Error{Code: -32603, Message: "internal error (id e-test)", Data: map[string]any{"code": "internal", "errorId": "e-test"}},
		},
		{
			name: "an *Error passes through",
			err:  fmt.Errorf("wrapped: %w", errcode.Unauthorized("call system.hello first")),
			want: &errcode.Error{Code: -32000, Message: "call system.hello first", Data: map[string]any{"code": "unauthorized"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			got := testMapper(&logs).FromError(context.Background(), tc.err)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
	if errcode.FromError(context.Background(), nil) != nil {
		t.Fatal("FromError(nil) != nil")
	}
}

func TestConstructors(t *testing.T) {
	cases := []struct {
		err     *errcode.Error
		code    int
		str     string
		message string
		data    map[string]any
	}{
		{errcode.ParseError("unexpected end of JSON input"), -32700, "invalid_params", "parse error: unexpected end of JSON input", nil},
		{errcode.InvalidRequest("empty batch"), -32600, "invalid_params", "invalid request: empty batch", nil},
		{errcode.MethodNotFound("nope.x"), -32601, "method_not_found", `method "nope.x" not found`, nil},
		{errcode.InvalidParams(`unknown field "foo"`), -32602, "invalid_params", `unknown field "foo"`, nil},
		{errcode.Unauthorized("call system.hello first"), -32000, "unauthorized", "call system.hello first", nil},
		{errcode.Overloaded(100), -32001, "overloaded", "too many requests in flight; retry after 100 ms", map[string]any{"retryAfterMs": int64(100)}},
		{errcode.New("protocol_incompatible", "client speaks %s, server %s", "2.0.0", "1.0.0"), -32000, "protocol_incompatible", "client speaks 2.0.0, server 1.0.0", nil},
	}
	for _, tc := range cases {
		t.Run(tc.str+"/"+tc.message, func(t *testing.T) {
			if tc.err.Code != tc.code || tc.err.StringCode() != tc.str || tc.err.Message != tc.message {
				t.Fatalf("got %d %q %q", tc.err.Code, tc.err.StringCode(), tc.err.Message)
			}
			for k, v := range tc.data {
				if tc.err.Data[k] != v {
					t.Fatalf("data[%s] = %#v, want %#v", k, tc.err.Data[k], v)
				}
			}
		})
	}
}

func TestErrorJSONRoundTrip(t *testing.T) {
	in := errcode.Overloaded(100)
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"code":-32001,"message":"too many requests in flight; retry after 100 ms","data":{"code":"overloaded","retryAfterMs":100}}` {
		t.Fatalf("marshal: %s", b)
	}
	var out errcode.Error
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&out, in) {
		t.Fatalf("round trip: %#v", out)
	}
	if err := json.Unmarshal([]byte(`{"message":"x"}`), &out); err == nil {
		t.Fatal("error object without code accepted")
	}
}

func TestErrorsIs(t *testing.T) {
	err := fmt.Errorf("ctx: %w", errcode.New(errcode.CodeNotFound, "no session s-1"))
	if !errors.Is(err, &errcode.Error{Data: map[string]any{"code": errcode.CodeNotFound}}) {
		t.Fatal("errors.Is by code failed")
	}
	if errors.Is(err, &errcode.Error{Data: map[string]any{"code": errcode.CodeInternal}}) {
		t.Fatal("errors.Is matched another code")
	}
	var e *errcode.Error
	if !errors.As(err, &e) || !e.HasCode(errcode.CodeNotFound) {
		t.Fatal("errors.As failed")
	}
}
