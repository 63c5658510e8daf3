package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the tracer's name (the instrumentation scope).
const instrumentation = "github.com/trellis-run/trellis"

// Propagator reads and writes W3C trace context (traceparent, tracestate)
// and baggage; the daemon uses it on every surface.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracer returns the daemon's tracer. Until instrument.Setup installs an SDK
// (tracing off) it is OpenTelemetry's no-op tracer: spans cost nothing and carry
// only the caller's trace context.
func Tracer() trace.Tracer { return otel.Tracer(instrumentation) }

// WithTraceparent returns ctx with the remote parent that a W3C traceparent
// (and optional tracestate) header value names; an invalid value is ignored,
// as the W3C recommendation says (a new trace starts).
func WithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// Traceparent renders the span context of ctx as a W3C traceparent value,
// "" when ctx has none.
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// Start starts a span of the daemon's tracer.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// Fail marks span as failed with err (nothing when err is nil).
func Fail(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
