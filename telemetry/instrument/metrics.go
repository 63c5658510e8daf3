package instrument

import (
	"sync"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"

	"github.com/trellis-run/trellis/telemetry"
)

// grpcServerMetrics are go-grpc-middleware's gRPC server metrics
// (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_handling_seconds, …), registered once in Registry.
var grpcServerMetrics = sync.OnceValue(func() *grpcprom.ServerMetrics {
	m := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120})))
	telemetry.Registry.MustRegister(m)
	return m
})

// GRPCServerMetrics returns the gRPC server metrics: put its interceptors
// outermost on the server, then call InitializeMetrics once the services
// are registered.
func GRPCServerMetrics() *grpcprom.ServerMetrics { return grpcServerMetrics() }
