package errcode_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// TestTableMatchesErrorCodeEnum proves the generated tables equal the
// declarations in errors.proto: same codes, same numerics, same gRPC codes,
// nothing extra.
func TestTableMatchesErrorCodeEnum(t *testing.T) {
	values := trellisv1.ErrorCode(0).Descriptor().Values()
	declared, declaredGRPC := map[string]int{}, map[string]rpccode.Code{}
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
		declaredGRPC[info.GetCode()] = rpccode.Code(rpccode.Code_value[info.GetGrpc()])
	}
	got, gotGRPC := map[string]int{}, map[string]rpccode.Code{}
	for _, c := range errcode.Codes() {
		n, ok := errcode.Numeric(c)
		if !ok {
			t.Fatalf("Numeric(%q) not ok", c)
		}
		g, ok := errcode.GRPC(c)
		if !ok || g == rpccode.Code_OK {
			t.Fatalf("GRPC(%q) = %v, %v", c, g, ok)
		}
		got[c], gotGRPC[c] = n, g
	}
	if !reflect.DeepEqual(got, declared) {
		t.Fatalf("table differs from trellis.v1.ErrorCode:\n got  %v\n want %v", got, declared)
	}
	if !reflect.DeepEqual(gotGRPC, declaredGRPC) {
		t.Fatalf("gRPC table differs from trellis.v1.ErrorCode:\n got  %v\n want %v", gotGRPC, declaredGRPC)
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
		{errcode.NewMethodNotFound("nope.x"), -32601, "method_not_found", `method "nope.x" not found`, nil},
		{errcode.NewInvalidParams(`unknown field "foo"`), -32602, "invalid_params", `unknown field "foo"`, nil},
		{errcode.NewUnauthorized("call system.hello first"), -32000, "unauthorized", "call system.hello first", nil},
		{errcode.NewOverloaded(100), -32001, "overloaded", "too many requests in flight; retry after 100 ms", map[string]any{"retryAfterMs": int64(100)}},
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
	in := errcode.NewOverloaded(100)
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
	err := fmt.Errorf("ctx: %w", errcode.New(errcode.NotFound, "no session s-1"))
	if !errors.Is(err, &errcode.Error{Data: map[string]any{"code": errcode.NotFound}}) {
		t.Fatal("errors.Is by code failed")
	}
	if errors.Is(err, &errcode.Error{Data: map[string]any{"code": errcode.Internal}}) {
		t.Fatal("errors.Is matched another code")
	}
	var e *errcode.Error
	if !errors.As(err, &e) || !e.HasCode(errcode.NotFound) {
		t.Fatal("errors.As failed")
	}
}
