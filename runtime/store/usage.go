package store

import (
	"context"
	"fmt"
	"time"
)

// UsageGroup is what UsageQuery groups the usage events by.
type UsageGroup string

// The groupings of usage.summary.
const (
	UsageByProvider UsageGroup = "provider"
	UsageByModel    UsageGroup = "model"
	UsageBySession  UsageGroup = "session"
	// UsageByDay groups by the UTC day of the event, "YYYY-MM-DD".
	UsageByDay UsageGroup = "day"
	// UsageByAgent, UsageByJob and UsageByPrincipal group by what the
	// event's session records: its agent definition, the scheduled job that
	// ran it, the principal that created it ("" for none).
	UsageByAgent     UsageGroup = "agent"
	UsageByJob       UsageGroup = "job"
	UsageByPrincipal UsageGroup = "principal"
	// UsageByTurn groups one session's events by their turn (session.usage),
	// oldest first: it needs UsageQuery.SessionID, and is not one of
	// usage.summary's UsageGroups.
	UsageByTurn UsageGroup = "turn"
)

// UsageGroups are the valid groupings, in the order documentation lists them.
var UsageGroups = []UsageGroup{UsageByProvider, UsageByModel, UsageBySession, UsageByDay, UsageByAgent, UsageByJob, UsageByPrincipal}

// UsageQuery selects and groups usage events for SumUsage.
type UsageQuery struct {
	GroupBy UsageGroup
	// Since keeps the events stored at or after it (zero: from the first).
	Since time.Time
	// Until keeps the events stored before it (zero: up to the last).
	Until time.Time
	// SessionID keeps the events of that session only ("": every session).
	SessionID string
	// Owner keeps the events of the sessions that principal created only
	// ("": every session); a principal's budget totals them.
	Owner string
}

// UsageRow is the total of one group of usage events.
type UsageRow struct {
	Key              string // the provider, model, session id, day or turn id
	Calls            int64  // how many usage events (provider calls)
	InputTokens      int64
	OutputTokens     int64
	ReasoningTokens  int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	CostMicroUSD     int64 // the sum of the events' costMicroUsd
	// UnpricedCalls are the events whose priced is not true: the price
	// table did not price their model, or they were stored before usage
	// events carried a cost.
	UnpricedCalls int64
}

// UsageStore totals the usage events of the event log.
type UsageStore interface {
	// SumUsage totals the stored events of kind "usage" (payload
	// {inputTokens, outputTokens, reasoningTokens, cacheReadTokens,
	// cacheWriteTokens, costMicroUsd, priced, provider, model, turnId}; a
	// missing count is 0) in q's window, one row per group, largest
	// (InputTokens + OutputTokens) first, ties by key; by turn, in the
	// order of each turn's first event. Events of deleted sessions are
	// gone with them and count for nothing. An unknown q.GroupBy, or
	// UsageByTurn without a session, is ErrInvalid.
	SumUsage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
}

// Validate reports whether q can be run: a known grouping, and a session
// for UsageByTurn.
func (q UsageQuery) Validate() error {
	if q.GroupBy == UsageByTurn {
		if q.SessionID == "" {
			return fmt.Errorf("usage: grouping by turn needs a session: %w", ErrInvalid)
		}
		return nil
	}
	for _, g := range UsageGroups {
		if q.GroupBy == g {
			return nil
		}
	}
	return fmt.Errorf("usage: unknown grouping %q: %w", q.GroupBy, ErrInvalid)
}
