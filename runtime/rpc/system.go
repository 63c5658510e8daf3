package rpc

import (
	"context"
	"os"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/settings"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/version"
)

// Protocol limits advertised in system.hello (PROTOCOL.md §2).
const (
	MaxFrameBytes = 32 << 20
	MaxInFlight   = 1024
	MaxBatch      = 100
)

// SystemDeps is what the system service reads from the rest of the daemon.
type SystemDeps struct {
	// Authn checks hello's token: the daemon token or an API key.
	Authn        *auth.Authenticator
	Home         string
	Store        string // "sqlite" | "postgres"
	StartedAt    time.Time
	Capabilities []string
	// Ports returns the bound HTTP and gRPC ports.
	Ports func() (httpPort, grpcPort int)
	// Counters returns the live counters.
	Counters func(ctx context.Context) *trellisv1.Counters
	// Shutdown starts a graceful stop; it must return at once.
	Shutdown func()
	// OperationWindow is how long operation receipts live (hello's
	// limits.operationWindowMs).
	OperationWindow time.Duration
	// Settings is the settings document (settings.get, settings.set,
	// system.reloadSettings).
	Settings *settings.Service
	// Usage totals the stored usage events (usage.summary).
	Usage store.UsageStore
}

// SystemServer implements trellisv1.SystemServiceServer.
type SystemServer struct {
	trellisv1.UnsafeSystemServiceServer
	deps SystemDeps
}

// NewSystemServer returns the system service.
func NewSystemServer(deps SystemDeps) *SystemServer { return &SystemServer{deps: deps} }

// Hello checks the protocol major version first, then the token.
func (s *SystemServer) Hello(ctx context.Context, req *trellisv1.HelloRequest) (*trellisv1.HelloResponse, error) {
	if req.GetProtocolVersion() == "" {
		return nil, errs.New(errcode.InvalidParams, "protocolVersion is required (this daemon speaks %s)", version.Protocol)
	}
	theirs, err := version.Major(req.GetProtocolVersion())
	if err != nil {
		return nil, errs.New(errcode.InvalidParams, "protocolVersion: %v", err)
	}
	ours, _ := version.Major(version.Protocol)
	if theirs != ours {
		return nil, errs.New(errcode.ProtocolIncompatible,
			"client speaks protocol %s but this daemon speaks %s: the major versions differ",
			req.GetProtocolVersion(), version.Protocol)
	}
	p, err := s.deps.Authn.Authenticate(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	return &trellisv1.HelloResponse{
		Principal:       principalToProto(p),
		ProtocolVersion: version.Protocol,
		ServerVersion:   version.Server,
		Capabilities:    append([]string(nil), s.deps.Capabilities...),
		Limits: &trellisv1.Limits{
			MaxFrameBytes: MaxFrameBytes,
			MaxInFlight:   MaxInFlight,
			MaxBatch:      MaxBatch,
			// Of the hello's key: its calls past it answer rate_limited.
			KeyRatePerSecond:      int32(p.KeyRate),
			KeyMaxRunningSessions: int32(p.KeyMaxRunning),
			OperationWindowMs:     s.deps.OperationWindow.Milliseconds(),
		},
		ConnectionId: ids.New("c"),
	}, nil
}

// Info describes the running daemon.
func (s *SystemServer) Info(ctx context.Context, _ *trellisv1.InfoRequest) (*trellisv1.InfoResponse, error) {
	httpPort, grpcPort := s.deps.Ports()
	counters := &trellisv1.Counters{}
	if s.deps.Counters != nil {
		counters = s.deps.Counters(ctx)
	}
	return &trellisv1.InfoResponse{
		Version:         version.Server,
		ProtocolVersion: version.Protocol,
		Pid:             int32(os.Getpid()),
		Port:            int32(httpPort),
		GrpcPort:        int32(grpcPort),
		StartedAt:       FormatTime(s.deps.StartedAt),
		Home:            s.deps.Home,
		Counters:        counters,
		Store:           s.deps.Store,
	}, nil
}

// Health answers ok while the daemon serves.
func (s *SystemServer) Health(context.Context, *trellisv1.HealthRequest) (*trellisv1.HealthResponse, error) {
	return &trellisv1.HealthResponse{Status: "ok"}, nil
}

// Shutdown answers, then the daemon stops gracefully.
func (s *SystemServer) Shutdown(context.Context, *trellisv1.ShutdownRequest) (*trellisv1.ShutdownResponse, error) {
	s.deps.Shutdown()
	return &trellisv1.ShutdownResponse{Ok: true}, nil
}

// FormatTime renders t as RFC3339 UTC with milliseconds, the protocol's time format.
func FormatTime(t time.Time) string {
	return t.UTC().Format(events.TimeFormat)
}
