// Package telemetry (shared by the facade and the runtime, so outside both) owns the daemon's traces (OpenTelemetry, exported over
// OTLP when the standard OTEL_* variables ask for it), its domain metrics
// (Prometheus) and the ids that every log line carries.
package telemetry
