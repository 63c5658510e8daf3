package rpc

import (
	"context"
	"strings"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// UsageSummary totals the tokens and cost of the stored usage events by
// provider, model, session, UTC day, or the session's agent, job or
// principal (model when groupBy is absent), largest first.
func (s *SystemServer) UsageSummary(ctx context.Context, req *trellisv1.UsageSummaryRequest) (*trellisv1.UsageSummaryResponse, error) {
	q, err := usageQuery(req)
	if err != nil {
		return nil, err
	}
	rows, err := s.deps.Usage.SumUsage(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.UsageSummaryResponse{GroupBy: string(q.GroupBy), Rows: make([]*trellisv1.UsageRow, 0, len(rows))}
	for _, r := range rows {
		out.Calls += r.Calls
		out.InputTokens += r.InputTokens
		out.OutputTokens += r.OutputTokens
		out.ReasoningTokens += r.ReasoningTokens
		out.CacheReadTokens += r.CacheReadTokens
		out.CacheWriteTokens += r.CacheWriteTokens
		out.CostMicroUsd += r.CostMicroUSD
		out.UnpricedCalls += r.UnpricedCalls
		out.Rows = append(out.Rows, usageRow(r))
	}
	return out, nil
}

// SessionUsage totals a session's usage events, and each turn's.
func (s *SessionServer) SessionUsage(ctx context.Context, req *trellisv1.SessionUsageRequest) (*trellisv1.SessionUsageResponse, error) {
	rows, err := s.sessions.Usage(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &trellisv1.SessionUsageResponse{SessionId: req.GetSessionId(), Turns: make([]*trellisv1.UsageRow, 0, len(rows))}
	for _, r := range rows {
		out.Calls += r.Calls
		out.InputTokens += r.InputTokens
		out.OutputTokens += r.OutputTokens
		out.ReasoningTokens += r.ReasoningTokens
		out.CacheReadTokens += r.CacheReadTokens
		out.CacheWriteTokens += r.CacheWriteTokens
		out.CostMicroUsd += r.CostMicroUSD
		out.UnpricedCalls += r.UnpricedCalls
		out.Turns = append(out.Turns, usageRow(r))
	}
	return out, nil
}

func usageRow(r store.UsageRow) *trellisv1.UsageRow {
	return &trellisv1.UsageRow{Key: r.Key, Calls: r.Calls,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, ReasoningTokens: r.ReasoningTokens,
		CacheReadTokens: r.CacheReadTokens, CacheWriteTokens: r.CacheWriteTokens,
		CostMicroUsd: r.CostMicroUSD, UnpricedCalls: r.UnpricedCalls}
}

// usageQuery validates usage.summary's params.
func usageQuery(req *trellisv1.UsageSummaryRequest) (store.UsageQuery, error) {
	q := store.UsageQuery{GroupBy: store.UsageByModel}
	if req.GroupBy != nil {
		q.GroupBy = store.UsageGroup(req.GetGroupBy())
		if q.Validate() != nil {
			names := make([]string, len(store.UsageGroups))
			for i, g := range store.UsageGroups {
				names[i] = string(g)
			}
			return q, errs.New(errcode.InvalidParams, "groupBy %q is not a grouping: use one of %s", req.GetGroupBy(), strings.Join(names, ", "))
		}
	}
	var err error
	if q.Since, err = usageTime("since", req.Since); err != nil {
		return q, err
	}
	if q.Until, err = usageTime("until", req.Until); err != nil {
		return q, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return q, errs.New(errcode.InvalidParams, "until %s is before since %s: the window would be empty", req.GetUntil(), req.GetSince())
	}
	return q, nil
}

// usageTime parses an RFC 3339 bound of usage.summary (nil: none).
func usageTime(field string, v *string) (time.Time, error) {
	if v == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	if err != nil {
		return time.Time{}, errs.New(errcode.InvalidParams, "%s %q is not an RFC 3339 time such as 2026-12-01T00:00:00Z", field, *v)
	}
	return t.UTC(), nil
}
