package session

import (
	"context"

	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/auth"
)

// actorOf names the principal a call runs as (the runtime's interceptor
// put it in ctx, on whichever daemon the call arrived), for the events of
// the actions a person or service takes; nil for a call no principal made
// (a job's turn, the daemon's own).
func actorOf(ctx context.Context) *events.PrincipalRef {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	return &events.PrincipalRef{ID: p.ID, Name: p.Name}
}
