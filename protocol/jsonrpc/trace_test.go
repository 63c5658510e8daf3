package jsonrpc

import "testing"

// TestRequestTraceMember: a request's top-level traceparent/tracestate
// members are read when they are strings and ignored otherwise, without
// making the request invalid.
func TestRequestTraceMember(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, frame string
		want        TraceContext
	}{
		{"both", `{"jsonrpc":"2.0","id":1,"method":"m","traceparent":"` + tp + `","tracestate":"k=v"}`, TraceContext{tp, "k=v"}},
		{"traceparent only", `{"jsonrpc":"2.0","id":1,"method":"m","traceparent":"` + tp + `"}`, TraceContext{Traceparent: tp}},
		{"tracestate without traceparent is ignored", `{"jsonrpc":"2.0","id":1,"method":"m","tracestate":"k=v"}`, TraceContext{}},
		{"not a string", `{"jsonrpc":"2.0","id":1,"method":"m","traceparent":{"x":1}}`, TraceContext{}},
		{"null", `{"jsonrpc":"2.0","id":1,"method":"m","traceparent":null}`, TraceContext{}},
		{"absent", `{"jsonrpc":"2.0","id":1,"method":"m"}`, TraceContext{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, _, ferr := decodeFrame([]byte(tc.frame), 5)
			if ferr != nil || len(msgs) != 1 || msgs[0].invalid != nil {
				t.Fatalf("decode: %v %+v", ferr, msgs)
			}
			if msgs[0].trace != tc.want {
				t.Fatalf("trace = %+v, want %+v", msgs[0].trace, tc.want)
			}
		})
	}
}
