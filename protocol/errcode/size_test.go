package errcode

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gRPC's own size refusals are payload_too_large with the limit, never
// overloaded (which would make a client retry the same payload forever).
func TestSizeErrorsArePayloadTooLarge(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		code  string
		limit any
	}{
		{"grpc: trying to send message larger than max (83886500 vs. 67108864)", CodePayloadTooLarge, int64(67108864)},
		{"grpc: received message larger than max (40000000 vs. 33554432)", CodePayloadTooLarge, int64(33554432)},
		{"grpc: received message larger than max (garbled", CodePayloadTooLarge, nil},
		{"too many requests", CodeOverloaded, nil},
	} {
		e := FromError(context.Background(), status.Error(codes.ResourceExhausted, tc.msg))
		if !e.HasCode(tc.code) {
			t.Errorf("%q: %v", tc.msg, e)
			continue
		}
		if tc.code == CodePayloadTooLarge {
			if e.Data["limit"] != tc.limit {
				t.Errorf("%q: limit %v, want %v", tc.msg, e.Data["limit"], tc.limit)
			}
			if _, retry := e.Data["retryAfterMs"]; retry {
				t.Errorf("%q: a size error tells the client to retry", tc.msg)
			}
		}
	}
}
