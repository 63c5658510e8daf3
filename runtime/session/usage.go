package session

import (
	"context"

	"github.com/trellis-run/trellis/runtime/store"
)

// Usage totals the stored usage events of session id by turn, oldest turn
// first (session.usage); the session must exist.
func (s *Service) Usage(ctx context.Context, id string) ([]store.UsageRow, error) {
	if _, err := s.row(ctx, id); err != nil {
		return nil, err
	}
	return s.deps.Store.SumUsage(ctx, store.UsageQuery{GroupBy: store.UsageByTurn, SessionID: id})
}
