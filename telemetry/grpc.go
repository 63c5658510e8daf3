package telemetry

import (
	"context"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// requestID is the caller's request id (the facade sends one per client
// call), or a new one for a direct gRPC caller.
func requestID(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(MDRequestID); len(v) > 0 && v[0] != "" && len(v[0]) <= 64 {
			return WithRequestID(ctx, v[0])
		}
	}
	return WithRequestID(ctx, NewRequestID())
}

// RequestIDUnary puts the call's request id into its context (log lines).
func RequestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(requestID(ctx), req)
}

// RequestIDStream is RequestIDUnary for streams.
func RequestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	w := middleware.WrapServerStream(ss) // go-grpc-middleware's context-carrying wrapper
	w.WrappedContext = requestID(ss.Context())
	return h(srv, w)
}

// ServerStatsHandler traces every gRPC call the server handles, as a child
// of the caller's traceparent metadata.
func ServerStatsHandler() stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithPropagators(Propagator))
}

// ClientStatsHandler traces the calls of a client connection and sends the
// trace context along as traceparent metadata.
func ClientStatsHandler() stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithPropagators(Propagator))
}

// With tracing off no stats handler runs, yet the ids in log lines should
// still follow a client's traceparent from the facade into the runtime:
// these interceptors carry it, and cost nothing when there is none.

// PropagateUnaryClient sends the trace context of ctx as traceparent metadata.
func PropagateUnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(inject(ctx), method, req, reply, cc, opts...)
}

// PropagateStreamClient is PropagateUnaryClient for streams.
func PropagateStreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(inject(ctx), desc, cc, method, opts...)
}

// PropagateUnary reads a caller's traceparent metadata into the context.
func PropagateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(extract(ctx), req)
}

// PropagateStream is PropagateUnary for streams.
func PropagateStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := extract(ss.Context())
	if ctx == ss.Context() {
		return h(srv, ss)
	}
	w := middleware.WrapServerStream(ss)
	w.WrappedContext = ctx
	return h(srv, w)
}

func inject(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	if tp := Traceparent(ctx); tp != "" {
		return metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
	}
	return ctx
}

func extract(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	tp := md.Get("traceparent")
	if len(tp) == 0 {
		return ctx
	}
	var ts string
	if v := md.Get("tracestate"); len(v) > 0 {
		ts = v[0]
	}
	return WithTraceparent(ctx, tp[0], ts)
}
