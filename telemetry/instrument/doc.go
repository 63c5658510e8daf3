// Package instrument wires telemetry into the daemon's process: the OTLP
// trace exporter (Setup, from the standard OTEL_* variables), and the gRPC
// server's request ids, trace propagation, tracing stats handler and
// metrics. It holds everything of telemetry that links gRPC or an
// exporter, so that the runtime's domain packages, which use the leaf
// package telemetry, link neither; daemon/ wires it.
package instrument
