package rpc

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"

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
