package grpcerr

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// gRPC's own size refusals are payload_too_large with the limit, never
// overloaded (which would make a client retry the same payload forever).
func TestSizeErrorsArePayloadTooLarge(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		code  string
		limit any
	}{
		{"grpc: trying to send message larger than max (83886500 vs. 67108864)", errcode.PayloadTooLarge, int64(67108864)},
		{"grpc: received message larger than max (40000000 vs. 33554432)", errcode.PayloadTooLarge, int64(33554432)},
		{"grpc: received message larger than max (garbled", errcode.PayloadTooLarge, nil},
		{"too many requests", errcode.Overloaded, nil},
	} {
		e := FromError(context.Background(), status.Error(codes.ResourceExhausted, tc.msg))
		if !e.HasCode(tc.code) {
			t.Errorf("%q: %v", tc.msg, e)
			continue
		}
		if tc.code == errcode.PayloadTooLarge {
			if e.Data["limit"] != tc.limit {
				t.Errorf("%q: limit %v, want %v", tc.msg, e.Data["limit"], tc.limit)
			}
			if _, retry := e.Data["retryAfterMs"]; retry {
				t.Errorf("%q: a size error tells the client to retry", tc.msg)
			}
		}
	}
}
