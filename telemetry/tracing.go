package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentation is the tracer's name (the instrumentation scope).
const instrumentation = "github.com/trellis-run/trellis"

// Propagator reads and writes W3C trace context (traceparent, tracestate)
// and baggage; the daemon uses it on every surface.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracer returns the daemon's tracer. Until Setup installs an SDK (tracing
// off) it is OpenTelemetry's no-op tracer: spans cost nothing and carry
// only the caller's trace context.
func Tracer() trace.Tracer { return otel.Tracer(instrumentation) }

// Tracing is the daemon's tracing set-up.
type Tracing struct {
	provider *sdktrace.TracerProvider // nil when tracing is off
	Exporter string                   // "" (off), "otlp/grpc" or "otlp/http"
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// Shutdown flushes the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Setup configures tracing from the standard OpenTelemetry environment
// variables. Tracing is off (no exporter, no-op tracer) unless
// OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL picks grpc or http/protobuf (the
// default); the exporter reads the endpoint, headers, timeout, TLS and
// compression variables itself, the SDK reads OTEL_TRACES_SAMPLER[_ARG],
// OTEL_BSP_*, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func Setup(ctx context.Context, serviceVersion string) (*Tracing, error) {
	otel.SetTextMapPropagator(Propagator)
	on, err := tracingWanted(os.Getenv)
	if err != nil || !on {
		// Off: the no-op provider (also replacing a provider an earlier
		// daemon of this process installed and shut down).
		otel.SetTracerProvider(noop.NewTracerProvider())
		return &Tracing{}, err
	}
	proto := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	var exp *otlptrace.Exporter
	var name string
	switch proto {
	case "", "http/protobuf":
		name = "otlp/http"
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		name = "otlp/grpc"
		exp, err = otlptracegrpc.New(ctx)
	default:
		return &Tracing{}, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return &Tracing{}, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "trellisd"), attribute.String("service.version", serviceVersion)))
	if err == nil {
		// The environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins.
		res, err = resource.Merge(res, resource.Environment())
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) && !errors.Is(err, resource.ErrSchemaURLConflict) {
		_ = exp.Shutdown(ctx)
		return &Tracing{}, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return &Tracing{provider: tp, Exporter: name}, nil
}

// tracingWanted decides from the environment whether to export spans.
func tracingWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: trellisd exports traces with otlp only (or none)", exp)
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return strings.ToLower(v)
		}
	}
	return ""
}

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
