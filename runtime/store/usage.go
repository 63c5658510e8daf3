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
)

// UsageGroups are the valid groupings, in the order documentation lists them.
var UsageGroups = []UsageGroup{UsageByProvider, UsageByModel, UsageBySession, UsageByDay}

// UsageQuery selects and groups usage events for SumUsage.
type UsageQuery struct {
	GroupBy UsageGroup
	// Since keeps the events stored at or after it (zero: from the first).
	Since time.Time
	// Until keeps the events stored before it (zero: up to the last).
	Until time.Time
}

// UsageRow is the total of one group of usage events.
type UsageRow struct {
	Key             string // the provider, model, session id or day
	Calls           int64  // how many usage events (provider calls)
	InputTokens     int64
	OutputTokens    int64
	ReasoningTokens int64
}

// UsageStore totals the usage events of the event log.
type UsageStore interface {
	// SumUsage totals the stored events of kind "usage" (payload
	// {inputTokens, outputTokens, reasoningTokens, provider, model}) in
	// q's window, one row per group, largest (InputTokens + OutputTokens)
	// first, ties by key. Events of deleted sessions are gone with them
	// and count for nothing. An unknown q.GroupBy is ErrInvalid.
	SumUsage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
}

// Validate reports whether q can be run: a known grouping.
func (q UsageQuery) Validate() error {
	for _, g := range UsageGroups {
		if q.GroupBy == g {
			return nil
		}
	}
	return fmt.Errorf("usage: unknown grouping %q: %w", q.GroupBy, ErrInvalid)
}
