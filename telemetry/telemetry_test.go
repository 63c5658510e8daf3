package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ in, want string }{
		{tp, tp},
		{"garbage", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // all-zero trace id is invalid
		{"", ""},
	} {
		if got := Traceparent(WithTraceparent(context.Background(), tc.in, "")); got != tc.want {
			t.Errorf("WithTraceparent(%q) → %q, want %q", tc.in, got, tc.want)
		}
	}
}

// logLine logs one line through LogHandler and decodes it.
func logLine(t *testing.T, ctx context.Context, with []any, args ...any) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With(with...)
	log.InfoContext(ctx, "hello", args...)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	return m
}

func TestLogHandlerAddsIDs(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := WithTraceparent(context.Background(), tp, "")
	ctx = WithTurnID(WithRequestID(ctx, "rq-1"), "t-1")

	m := logLine(t, ctx, nil)
	want := map[string]string{LogRequestID: "rq-1", LogTurnID: "t-1", LogTraceID: "4bf92f3577b34da6a3ce929d0e0e4736", LogSpanID: "00f067aa0ba902b7"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %s (line %v)", k, m[k], v, m)
		}
	}

	// Nothing in the context: nothing added.
	m = logLine(t, context.Background(), nil)
	for k := range want {
		if _, ok := m[k]; ok {
			t.Errorf("%s present without a context id: %v", k, m)
		}
	}

	// An id the line or the logger already says is not repeated.
	var buf bytes.Buffer
	slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With(LogTurnID, "t-1").InfoContext(ctx, "x", LogRequestID, "rq-1")
	for _, k := range []string{LogTurnID, LogRequestID} {
		if n := strings.Count(buf.String(), `"`+k+`"`); n != 1 {
			t.Errorf("%s appears %d times: %s", k, n, buf.String())
		}
	}

	// A span started from the context gives its own span id.
	ctx2, span := noop.NewTracerProvider().Tracer("x").Start(ctx, "child")
	defer span.End()
	if m := logLine(t, ctx2, nil); m[LogTraceID] != want[LogTraceID] {
		t.Errorf("child span line lost the trace id: %v", m)
	}
}
