//go:build !trellis_lean

package instrument

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/stats"

	"github.com/trellis-run/trellis/telemetry"
)

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
	otel.SetTextMapPropagator(telemetry.Propagator)
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

// ServerStatsHandler traces every gRPC call the server handles, as a child
// of the caller's traceparent metadata; nil when tracing is off.
func (t *Tracing) ServerStatsHandler() stats.Handler {
	if !t.Enabled() {
		return nil
	}
	return otelgrpc.NewServerHandler(otelgrpc.WithPropagators(telemetry.Propagator))
}
