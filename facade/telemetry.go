package facade

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/facade/methods"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
	"github.com/trellis-run/trellis/telemetry"
)

// newRequestID names one client call in the logs of the facade and the
// runtime (it travels as telemetry.MDRequestID metadata).
func newRequestID() string { return telemetry.NewRequestID() }

// startCall starts the span of one JSON-RPC call, a child of the trace
// context the client sent with it, and gives ctx a request id.
func startCall(ctx context.Context, method string) (context.Context, trace.Span) {
	if tc := jsonrpc.RequestTrace(ctx); tc.Traceparent != "" {
		ctx = telemetry.WithTraceparent(ctx, tc.Traceparent, tc.Tracestate)
	}
	name := method
	if methods.Lookup(method) == nil {
		name = "unknown" // clients cannot grow the set of span names
	}
	id := newRequestID()
	ctx, span := telemetry.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", name),
		attribute.String("trellis.request_id", id)))
	ctx = telemetry.WithRequestID(ctx, id)
	return metadata.AppendToOutgoingContext(ctx, telemetry.MDRequestID, id), span
}

// endCall ends a call's span with the call's error code ("" = success).
func endCall(span trace.Span, code string) {
	if code != "" {
		span.SetAttributes(attribute.String("trellis.error_code", code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// traced gives each REST request a span, a child of the caller's W3C
// traceparent header; the gateway's gRPC calls carry it on.
func traced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		id := newRequestID()
		ctx, span := telemetry.Start(ctx, "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
			attribute.String("trellis.request_id", id)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(telemetry.WithRequestID(ctx, id)))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

// statusWriter remembers the response status; it keeps http.Flusher for
// the NDJSON and SSE event streams.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
