package grpcerr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// errWithInfo builds the status the runtime sends: ErrorInfo{reason, domain, metadata}.
func errWithInfo(c codes.Code, reason, msg string, md map[string]string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errcode.Domain, Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func testMapper(logs *bytes.Buffer) *grpcerr.Mapper {
	return &grpcerr.Mapper{
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
			case errcode.Internal:
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
			if code == errcode.Overloaded && got.Data["retryAfterMs"] != int64(grpcerr.DefaultRetryAfterMs) {
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
			err:  fmt.Errorf("wrapped: %w", errcode.NewUnauthorized("call system.hello first")),
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
	if grpcerr.FromError(context.Background(), nil) != nil {
		t.Fatal("FromError(nil) != nil")
	}
}
