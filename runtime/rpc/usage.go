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
	t, list := usageRows(rows)
	return &trellisv1.UsageSummaryResponse{GroupBy: string(q.GroupBy), Rows: list, Calls: t.Calls,
		InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, ReasoningTokens: t.ReasoningTokens, CacheReadTokens: t.CacheReadTokens,
		CacheWriteTokens: t.CacheWriteTokens, CostMicroUsd: t.CostMicroUSD, UnpricedCalls: t.UnpricedCalls}, nil
}

// SessionUsage totals a session's usage events, and each turn's.
func (s *SessionServer) SessionUsage(ctx context.Context, req *trellisv1.SessionUsageRequest) (*trellisv1.SessionUsageResponse, error) {
	rows, err := s.sessions.Usage(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	t, list := usageRows(rows)
	return &trellisv1.SessionUsageResponse{SessionId: req.GetSessionId(), Turns: list, Calls: t.Calls,
		InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, ReasoningTokens: t.ReasoningTokens, CacheReadTokens: t.CacheReadTokens,
		CacheWriteTokens: t.CacheWriteTokens, CostMicroUsd: t.CostMicroUSD, UnpricedCalls: t.UnpricedCalls}, nil
}

// usageRows returns the rows as the protocol's, and their total (its Key
// unset).
func usageRows(rows []store.UsageRow) (store.UsageRow, []*trellisv1.UsageRow) {
	var t store.UsageRow
	list := make([]*trellisv1.UsageRow, 0, len(rows))
	for _, r := range rows {
		t.Calls += r.Calls
		t.InputTokens += r.InputTokens
		t.OutputTokens += r.OutputTokens
		t.ReasoningTokens += r.ReasoningTokens
		t.CacheReadTokens += r.CacheReadTokens
		t.CacheWriteTokens += r.CacheWriteTokens
		t.CostMicroUSD += r.CostMicroUSD
		t.UnpricedCalls += r.UnpricedCalls
		list = append(list, &trellisv1.UsageRow{Key: r.Key, Calls: r.Calls,
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, ReasoningTokens: r.ReasoningTokens,
			CacheReadTokens: r.CacheReadTokens, CacheWriteTokens: r.CacheWriteTokens,
			CostMicroUsd: r.CostMicroUSD, UnpricedCalls: r.UnpricedCalls})
	}
	return t, list
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
