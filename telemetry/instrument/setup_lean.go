//go:build trellis_lean

package instrument

import (
	"context"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/stats"

	"github.com/trellis-run/trellis/telemetry"
)

// Setup of a lean build (-tags trellis_lean, the README's first run),
// which leaves the OpenTelemetry SDK and its OTLP exporters out: spans are
// never recorded, a caller's traceparent still reaches the log lines, and
// an environment that asks for tracing is answered in Tracing.LeftOut.
func Setup(context.Context, string) (*Tracing, error) {
	otel.SetTextMapPropagator(telemetry.Propagator)
	otel.SetTracerProvider(noop.NewTracerProvider())
	on, err := tracingWanted(os.Getenv)
	if err != nil || !on {
		return &Tracing{}, err
	}
	return &Tracing{LeftOut: "this build of trellis leaves the OpenTelemetry exporter out (-tags trellis_lean); build without the tag to export traces"}, nil
}

// ServerStatsHandler is nil: a lean build records no spans.
func (*Tracing) ServerStatsHandler() stats.Handler { return nil }
