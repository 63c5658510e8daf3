package rpc

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/gateway"
	"github.com/trellis-run/trellis/runtime/store"
)

// GatewayServer implements trellisv1.GatewayServiceServer over the gateway.
type GatewayServer struct {
	trellisv1.UnsafeGatewayServiceServer
	gw     *gateway.Service
	access SessionAccess // nil: no per-session checks
	log    *slog.Logger
}

// NewGatewayServer returns the gateway service. access decides whether
// the caller may prompt a {session} target (nil: anyone who may bind).
func NewGatewayServer(gw *gateway.Service, access SessionAccess, log *slog.Logger) *GatewayServer {
	return &GatewayServer{gw: gw, access: access, log: log}
}

// Bind adds a binding.
func (s *GatewayServer) Bind(ctx context.Context, req *trellisv1.BindRequest) (*trellisv1.BindResponse, error) {
	var t gateway.Target
	switch x := req.GetTarget().GetTarget().(type) {
	case *trellisv1.BindingTarget_Agent:
		t.Agent = x.Agent
	case *trellisv1.BindingTarget_Session:
		// The channel's messages prompt the session: its owner, an admin
		// or a controller grant may bind it (operators read every session
		// but act on their own only).
		if p, ok := auth.PrincipalFrom(ctx); ok {
			if err := sessionAllowed(ctx, s.access, s.log, p, "/trellis.v1.GatewayService/Bind", store.RoleMember, x.Session); err != nil {
				return nil, err
			}
		}
		t.Session = x.Session
	case *trellisv1.BindingTarget_NewSession:
		t.NewSession = &gateway.NewSessionTarget{Workdir: x.NewSession.GetWorkdir(), Mode: x.NewSession.GetMode()}
	default:
		return nil, errs.New(errcode.InvalidParams, "target is required: {agent: name} | {session: id} | {newSession: {workdir, mode}}")
	}
	id, err := s.gw.Bind(ctx, gateway.BindParams{
		Platform: req.GetPlatform(), CredentialsRef: req.GetCredentialsRef(), Target: t,
		ChannelID: req.GetChannelId(), UserID: req.GetUserId(), Mode: req.GetMode(),
	})
	if err != nil {
		return nil, err
	}
	return &trellisv1.BindResponse{BindingId: id}, nil
}

// ListBindings lists the bindings; credentials are never shown.
func (s *GatewayServer) ListBindings(ctx context.Context, _ *trellisv1.ListBindingsRequest) (*trellisv1.ListBindingsResponse, error) {
	bs := s.gw.List(ctx)
	out := &trellisv1.ListBindingsResponse{Bindings: make([]*trellisv1.Binding, 0, len(bs))}
	for _, b := range bs {
		out.Bindings = append(out.Bindings, &trellisv1.Binding{
			Owner:     principalRef(b.Owner, b.OwnerName),
			BindingId: b.BindingID, Platform: b.Platform, Target: b.Target,
			ChannelId: optional(b.ChannelID), UserId: optional(b.UserID),
			State: b.State, LastError: optional(b.LastError),
		})
	}
	return out, nil
}

// Unbind removes a binding.
func (s *GatewayServer) Unbind(ctx context.Context, req *trellisv1.UnbindRequest) (*trellisv1.UnbindResponse, error) {
	if err := s.gw.Unbind(ctx, req.GetBindingId()); err != nil {
		return nil, err
	}
	return &trellisv1.UnbindResponse{Ok: true}, nil
}

// Watch streams gateway.event notifications. A watcher that falls too far
// behind is ended with overloaded; it should watch again and list.
func (s *GatewayServer) Watch(_ *trellisv1.GatewayServiceWatchRequest, stream grpc.ServerStreamingServer[trellisv1.GatewayServiceWatchResponse]) error {
	w := s.gw.Watch(stream.Context())
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for ev := range w.Events() {
		payload, err := structpb.NewStruct(ev.Payload)
		if err != nil {
			payload = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		if err := stream.Send(&trellisv1.GatewayServiceWatchResponse{Event: &trellisv1.GatewayEvent{BindingId: ev.BindingID, Kind: ev.Kind, Payload: payload}}); err != nil {
			return err
		}
	}
	if errors.Is(w.Err(), gateway.ErrLagged) {
		return errs.New(errcode.Overloaded, "this gateway event watcher fell too far behind and was dropped: watch again, then call gateway.list to catch up")
	}
	return nil
}
