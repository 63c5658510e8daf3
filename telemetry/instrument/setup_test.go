package instrument

import (
	"context"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/telemetry"
)

func TestTracingWanted(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
		err  string
	}{
		{name: "nothing set: off", env: nil, want: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, want: false},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{name: "unsupported exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER "zipkin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tracingWanted(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("tracingWanted = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSetupOffByDefault(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	tr, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || tr.Exporter != "" {
		t.Fatalf("tracing on without any OTEL_* variable: %+v", tr)
	}
	_, span := telemetry.Start(context.Background(), "x")
	if span.IsRecording() {
		t.Fatal("a span records with tracing off")
	}
	span.End()
}

func TestSetupRejectsUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := Setup(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "want grpc or http/protobuf") {
		t.Fatalf("err = %v", err)
	}
}
