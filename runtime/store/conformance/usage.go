package conformance

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/runtime/store"
)

func usageEv(sessionID string, seq int64, ts time.Time, payload string) store.Event {
	return store.Event{SessionID: sessionID, Seq: seq, Kind: eventkind.Usage, Payload: raw(payload), TS: ts}
}

func usagePayload(provider, model string, in, out, reasoning int) string {
	return fmt.Sprintf(`{"inputTokens":%d,"outputTokens":%d,"provider":%q,"model":%q,"reasoningTokens":%d,"priced":true}`,
		in, out, provider, model, reasoning)
}

// costPayload is a usage event with cached tokens, a cost and a turn.
func costPayload(turn, model string, in, out, cacheRead, cacheWrite int, cost int64, priced bool) string {
	return fmt.Sprintf(`{"inputTokens":%d,"outputTokens":%d,"provider":"anthropic","model":%q,"reasoningTokens":0,"cacheReadTokens":%d,"cacheWriteTokens":%d,"costMicroUsd":%d,"priced":%v,"turnId":%q}`,
		in, out, model, cacheRead, cacheWrite, cost, priced, turn)
}

// testSumUsage: usage events of four sessions, one of them deleted, over
// three UTC days, totalled by each grouping and in windows.
func testSumUsage(t *testing.T, st store.Store) {
	ctx := context.Background()
	day := func(d, h, m, s, us int) time.Time { return time.Date(2025, 3, d, h, m, s, us*1000, time.UTC) }
	rows, err := st.SumUsage(ctx, store.UsageQuery{GroupBy: store.UsageByModel})
	must(t, err)
	if len(rows) != 0 {
		t.Fatalf("an empty store summed %v, want no rows", rows)
	}

	createSessions(t, st, "s-1", "s-2", "s-3")
	// s-4 ran a job's agent definition, created by a principal.
	s4 := newSession("s-4", at(3))
	s4.Agent, s4.JobID, s4.Owner = "reviewer", "j-1", "p-ann"
	must(t, st.CreateSession(ctx, s4))
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{
		usageEv("s-1", 1, day(1, 23, 59, 59, 999_999), usagePayload("anthropic", "sonnet", 100, 20, 5)),
		ev("s-1", 2), // not a usage event
		usageEv("s-1", 3, day(2, 0, 0, 0, 0), usagePayload("openai", "gpt", 10, 5, 0)),
		usageEv("s-2", 1, day(2, 10, 0, 0, 0), usagePayload("anthropic", "sonnet", 30, 10, 0)),
		// Written before reasoningTokens and priced existed: it counts as
		// 0 reasoning tokens and an unpriced call.
		usageEv("s-2", 2, day(3, 0, 0, 0, 0), `{"inputTokens":1,"outputTokens":1,"provider":"openai","model":"gpt"}`),
		usageEv("s-3", 1, day(2, 12, 0, 0, 0), usagePayload("anthropic", "haiku", 1000, 1000, 0)),
		usageEv("s-4", 1, day(3, 8, 0, 0, 0), usagePayload("google", "gemini", 40, 2, 2)),
	}))
	n, err := st.DeleteSessions(ctx, store.Unfenced(), []string{"s-3"})
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d sessions, want 1", n)
	}

	tests := []sumUsageCase{
		{"by provider", store.UsageQuery{GroupBy: store.UsageByProvider}, []store.UsageRow{
			{Key: "anthropic", Calls: 2, InputTokens: 130, OutputTokens: 30, ReasoningTokens: 5},
			{Key: "google", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "openai", Calls: 2, InputTokens: 11, OutputTokens: 6, UnpricedCalls: 1},
		}},
		{"by model", store.UsageQuery{GroupBy: store.UsageByModel}, []store.UsageRow{
			{Key: "sonnet", Calls: 2, InputTokens: 130, OutputTokens: 30, ReasoningTokens: 5},
			{Key: "gemini", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "gpt", Calls: 2, InputTokens: 11, OutputTokens: 6, UnpricedCalls: 1},
		}},
		// s-2 and s-4 tie at 42 tokens: by key.
		{"by session", store.UsageQuery{GroupBy: store.UsageBySession}, []store.UsageRow{
			{Key: "s-1", Calls: 2, InputTokens: 110, OutputTokens: 25, ReasoningTokens: 5},
			{Key: "s-2", Calls: 2, InputTokens: 31, OutputTokens: 11, UnpricedCalls: 1},
			{Key: "s-4", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
		}},
		{"by day", store.UsageQuery{GroupBy: store.UsageByDay}, []store.UsageRow{
			{Key: "2025-03-01", Calls: 1, InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5},
			{Key: "2025-03-02", Calls: 2, InputTokens: 40, OutputTokens: 15},
			{Key: "2025-03-03", Calls: 2, InputTokens: 41, OutputTokens: 3, ReasoningTokens: 2, UnpricedCalls: 1},
		}},
		// s-1 and s-2 record none: one group "" (the deleted s-3 is gone).
		{"by agent", store.UsageQuery{GroupBy: store.UsageByAgent}, []store.UsageRow{
			{Key: "", Calls: 4, InputTokens: 141, OutputTokens: 36, ReasoningTokens: 5, UnpricedCalls: 1},
			{Key: "reviewer", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
		}},
		{"by job", store.UsageQuery{GroupBy: store.UsageByJob}, []store.UsageRow{
			{Key: "", Calls: 4, InputTokens: 141, OutputTokens: 36, ReasoningTokens: 5, UnpricedCalls: 1},
			{Key: "j-1", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
		}},
		{"by principal", store.UsageQuery{GroupBy: store.UsageByPrincipal, Since: day(3, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "p-ann", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "", Calls: 1, InputTokens: 1, OutputTokens: 1, UnpricedCalls: 1},
		}},
		// A principal's budget totals the sessions it created, at any time.
		{"one owner's sessions", store.UsageQuery{GroupBy: store.UsageByPrincipal, Owner: "p-ann"}, []store.UsageRow{
			{Key: "p-ann", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
		}},
		{"an owner with no sessions", store.UsageQuery{GroupBy: store.UsageByPrincipal, Owner: "p-bob"}, nil},
		{"since is inclusive, until exclusive", store.UsageQuery{GroupBy: store.UsageByDay, Since: day(2, 0, 0, 0, 0), Until: day(3, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "2025-03-02", Calls: 2, InputTokens: 40, OutputTokens: 15},
		}},
		{"to the microsecond", store.UsageQuery{GroupBy: store.UsageBySession, Since: day(1, 23, 59, 59, 999_999), Until: day(2, 0, 0, 0, 1)}, []store.UsageRow{
			{Key: "s-1", Calls: 2, InputTokens: 110, OutputTokens: 25, ReasoningTokens: 5},
		}},
		{"since only", store.UsageQuery{GroupBy: store.UsageByProvider, Since: day(3, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "google", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "openai", Calls: 1, InputTokens: 1, OutputTokens: 1, UnpricedCalls: 1},
		}},
		{"until only", store.UsageQuery{GroupBy: store.UsageByProvider, Until: day(2, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "anthropic", Calls: 1, InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5},
		}},
		{"an empty window", store.UsageQuery{GroupBy: store.UsageByModel, Since: day(4, 0, 0, 0, 0)}, nil},
	}
	checkSumUsage(t, st, tests)

	_, err = st.SumUsage(ctx, store.UsageQuery{GroupBy: "week"})
	wantErr(t, err, store.ErrInvalid)
	_, err = st.SumUsage(ctx, store.UsageQuery{GroupBy: store.UsageByTurn})
	wantErr(t, err, store.ErrInvalid)
}

// testSumUsageCost: the cached tokens, the cost and the unpriced calls
// are summed by every grouping; one session's events by turn come in the
// order of each turn's first call.
func testSumUsageCost(t *testing.T, st store.Store) {
	ctx := context.Background()
	at := func(m int) time.Time { return time.Date(2025, 4, 1, 10, m, 0, 0, time.UTC) }
	createSessions(t, st, "s-a", "s-b")
	must(t, st.AppendEvents(ctx, store.Unfenced(), []store.Event{
		// Turn t-z comes first although its id sorts last.
		usageEv("s-a", 1, at(0), costPayload("t-z", "sonnet", 1000, 10, 600, 300, 1234, true)),
		usageEv("s-a", 2, at(1), costPayload("t-z", "sonnet", 2000, 20, 1500, 0, 2000, true)),
		usageEv("s-a", 3, at(2), costPayload("t-a", "mystery", 50, 5, 0, 0, 0, false)),
		usageEv("s-b", 1, at(3), costPayload("t-b", "sonnet", 10, 1, 0, 10, 99, true)),
		// Written before turnId and the cost: its own turn "", unpriced.
		usageEv("s-a", 4, at(4), `{"inputTokens":7,"outputTokens":1,"provider":"anthropic","model":"sonnet"}`),
	}))
	tests := []sumUsageCase{
		{"by model", store.UsageQuery{GroupBy: store.UsageByModel}, []store.UsageRow{
			{Key: "sonnet", Calls: 4, InputTokens: 3017, OutputTokens: 32, CacheReadTokens: 2100, CacheWriteTokens: 310, CostMicroUSD: 3333, UnpricedCalls: 1},
			{Key: "mystery", Calls: 1, InputTokens: 50, OutputTokens: 5, UnpricedCalls: 1},
		}},
		{"a session by turn", store.UsageQuery{GroupBy: store.UsageByTurn, SessionID: "s-a"}, []store.UsageRow{
			{Key: "t-z", Calls: 2, InputTokens: 3000, OutputTokens: 30, CacheReadTokens: 2100, CacheWriteTokens: 300, CostMicroUSD: 3234},
			{Key: "t-a", Calls: 1, InputTokens: 50, OutputTokens: 5, UnpricedCalls: 1},
			{Key: "", Calls: 1, InputTokens: 7, OutputTokens: 1, UnpricedCalls: 1},
		}},
		{"a session by day", store.UsageQuery{GroupBy: store.UsageByDay, SessionID: "s-b"}, []store.UsageRow{
			{Key: "2025-04-01", Calls: 1, InputTokens: 10, OutputTokens: 1, CacheWriteTokens: 10, CostMicroUSD: 99},
		}},
		{"a session in a window", store.UsageQuery{GroupBy: store.UsageBySession, SessionID: "s-a", Since: at(1), Until: at(2)}, []store.UsageRow{
			{Key: "s-a", Calls: 1, InputTokens: 2000, OutputTokens: 20, CacheReadTokens: 1500, CostMicroUSD: 2000},
		}},
		{"an unknown session", store.UsageQuery{GroupBy: store.UsageByTurn, SessionID: "s-none"}, nil},
	}
	checkSumUsage(t, st, tests)
}

// sumUsageCase is one SumUsage query and the rows it must return.
type sumUsageCase struct {
	name string
	q    store.UsageQuery
	want []store.UsageRow
}

// checkSumUsage runs each case's query as a subtest.
func checkSumUsage(t *testing.T, st store.Store, tests []sumUsageCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.SumUsage(context.Background(), tc.q)
			must(t, err)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("SumUsage(%+v) =\n%+v\nwant\n%+v", tc.q, got, tc.want)
			}
		})
	}
}
