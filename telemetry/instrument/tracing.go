package instrument

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Tracing is the daemon's tracing set-up.
type Tracing struct {
	provider interface{ Shutdown(context.Context) error } // nil when tracing is off
	Exporter string                                       // "" (off), "otlp/grpc" or "otlp/http"
	// LeftOut says why tracing is off although the environment asks for
	// it: this build leaves the exporter out (-tags trellis_lean).
	LeftOut string
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
