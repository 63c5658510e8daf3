package telemetry

import (
	"context"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
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
