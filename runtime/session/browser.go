package session

import (
	"context"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// SetBrowserProvider chooses the provider of the session's browser tool
// (snowpea's session.setBrowserProvider). The choice is kept in memory, as
// notices are: a restart of the daemon returns to its default.
func (s *Service) SetBrowserProvider(ctx context.Context, id, provider string) error {
	if s.deps.Browsers == nil {
		return errs.New(errcode.Unsupported, "this daemon has no browser tool")
	}
	if _, err := s.load(ctx, id); err != nil {
		return err
	}
	return s.deps.Browsers.SetProvider(id, provider)
}
