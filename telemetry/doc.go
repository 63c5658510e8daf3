// Package telemetry (shared by the facade and the runtime, so outside both)
// owns the daemon's spans (the OpenTelemetry API; a no-op tracer until
// telemetry/instrument installs an exporter), its domain metrics
// (Prometheus) and the ids that every log line carries. It links no gRPC and
// no exporter: those live in telemetry/instrument, which daemon/ wires.
package telemetry
