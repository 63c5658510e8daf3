package rpc

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trellis-run/trellis/internal/broadcast"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// GetSettings returns the settings document, secrets masked.
func (s *SystemServer) GetSettings(ctx context.Context, req *trellisv1.GetSettingsRequest) (*trellisv1.GetSettingsResponse, error) {
	if err := checkSettingsScope(req.GetScope(), req.Workdir); err != nil {
		return nil, err
	}
	doc, err := s.deps.Settings.Get(ctx)
	if err != nil {
		return nil, err
	}
	st, err := structpb.NewStruct(doc)
	if err != nil {
		return nil, err
	}
	return &trellisv1.GetSettingsResponse{Settings: st}, nil
}

// SetSettings deep-merges a patch into the settings document.
func (s *SystemServer) SetSettings(ctx context.Context, req *trellisv1.SetSettingsRequest) (*trellisv1.SetSettingsResponse, error) {
	if err := checkSettingsScope(req.GetScope(), req.Workdir); err != nil {
		return nil, err
	}
	if req.GetPatch() == nil {
		return nil, errs.New(errcode.InvalidParams, "patch is required: the fields to merge into the settings")
	}
	doc, err := s.deps.Settings.Set(ctx, req.GetPatch().AsMap())
	if err != nil {
		return nil, err
	}
	st, err := structpb.NewStruct(doc)
	if err != nil {
		return nil, err
	}
	return &trellisv1.SetSettingsResponse{Settings: st}, nil
}

// ReloadSettings reads the settings and the provider configuration again.
func (s *SystemServer) ReloadSettings(ctx context.Context, _ *trellisv1.ReloadSettingsRequest) (*trellisv1.ReloadSettingsResponse, error) {
	changed, err := s.deps.Settings.Reload(ctx)
	if err != nil {
		return nil, err
	}
	return &trellisv1.ReloadSettingsResponse{Reloaded: len(changed) > 0, ChangedKeys: changed}, nil
}

// checkSettingsScope refuses snowpea's project settings.
func checkSettingsScope(scope string, workdir *string) error {
	if scope != "" && scope != "global" {
		return errs.NewUnsupported("scope", scope, "scope %q is not supported: Trellis has one settings document, the daemon's (\"global\")", scope)
	}
	return checkWorkdir(workdir)
}

// WatchSettings streams settings.changed: after each settings.set and
// system.reloadSettings of this daemon that changed a top-level section.
// A watcher that falls too far behind is ended with overloaded.
func (s *SystemServer) WatchSettings(_ *trellisv1.WatchSettingsRequest, stream grpc.ServerStreamingServer[trellisv1.WatchSettingsResponse]) error {
	w := s.deps.Settings.Watch(stream.Context())
	// The headers tell the client that it is watching: changes from now
	// on reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for c := range w.Events() {
		if err := stream.Send(&trellisv1.WatchSettingsResponse{Changed: &trellisv1.SettingsChanged{Keys: c.Keys, Scope: "global"}}); err != nil {
			return err
		}
	}
	if errors.Is(w.Err(), broadcast.ErrLagged) {
		return errs.New(errcode.Overloaded, "this settings watcher fell too far behind and was dropped: watch again, then call settings.get")
	}
	return nil
}
