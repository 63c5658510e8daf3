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
	return fmt.Sprintf(`{"inputTokens":%d,"outputTokens":%d,"provider":%q,"model":%q,"reasoningTokens":%d}`,
		in, out, provider, model, reasoning)
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

	createSessions(t, st, "s-1", "s-2", "s-3", "s-4")
	must(t, st.AppendEvents(ctx, []store.Event{
		usageEv("s-1", 1, day(1, 23, 59, 59, 999_999), usagePayload("anthropic", "sonnet", 100, 20, 5)),
		ev("s-1", 2), // not a usage event
		usageEv("s-1", 3, day(2, 0, 0, 0, 0), usagePayload("openai", "gpt", 10, 5, 0)),
		usageEv("s-2", 1, day(2, 10, 0, 0, 0), usagePayload("anthropic", "sonnet", 30, 10, 0)),
		// Written before reasoningTokens existed: it counts as 0.
		usageEv("s-2", 2, day(3, 0, 0, 0, 0), `{"inputTokens":1,"outputTokens":1,"provider":"openai","model":"gpt"}`),
		usageEv("s-3", 1, day(2, 12, 0, 0, 0), usagePayload("anthropic", "haiku", 1000, 1000, 0)),
		usageEv("s-4", 1, day(3, 8, 0, 0, 0), usagePayload("google", "gemini", 40, 2, 2)),
	}))
	n, err := st.DeleteSessions(ctx, []string{"s-3"})
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d sessions, want 1", n)
	}

	tests := []struct {
		name string
		q    store.UsageQuery
		want []store.UsageRow
	}{
		{"by provider", store.UsageQuery{GroupBy: store.UsageByProvider}, []store.UsageRow{
			{Key: "anthropic", Calls: 2, InputTokens: 130, OutputTokens: 30, ReasoningTokens: 5},
			{Key: "google", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "openai", Calls: 2, InputTokens: 11, OutputTokens: 6},
		}},
		{"by model", store.UsageQuery{GroupBy: store.UsageByModel}, []store.UsageRow{
			{Key: "sonnet", Calls: 2, InputTokens: 130, OutputTokens: 30, ReasoningTokens: 5},
			{Key: "gemini", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "gpt", Calls: 2, InputTokens: 11, OutputTokens: 6},
		}},
		// s-2 and s-4 tie at 42 tokens: by key.
		{"by session", store.UsageQuery{GroupBy: store.UsageBySession}, []store.UsageRow{
			{Key: "s-1", Calls: 2, InputTokens: 110, OutputTokens: 25, ReasoningTokens: 5},
			{Key: "s-2", Calls: 2, InputTokens: 31, OutputTokens: 11},
			{Key: "s-4", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
		}},
		{"by day", store.UsageQuery{GroupBy: store.UsageByDay}, []store.UsageRow{
			{Key: "2025-03-01", Calls: 1, InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5},
			{Key: "2025-03-02", Calls: 2, InputTokens: 40, OutputTokens: 15},
			{Key: "2025-03-03", Calls: 2, InputTokens: 41, OutputTokens: 3, ReasoningTokens: 2},
		}},
		{"since is inclusive, until exclusive", store.UsageQuery{GroupBy: store.UsageByDay, Since: day(2, 0, 0, 0, 0), Until: day(3, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "2025-03-02", Calls: 2, InputTokens: 40, OutputTokens: 15},
		}},
		{"to the microsecond", store.UsageQuery{GroupBy: store.UsageBySession, Since: day(1, 23, 59, 59, 999_999), Until: day(2, 0, 0, 0, 1)}, []store.UsageRow{
			{Key: "s-1", Calls: 2, InputTokens: 110, OutputTokens: 25, ReasoningTokens: 5},
		}},
		{"since only", store.UsageQuery{GroupBy: store.UsageByProvider, Since: day(3, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "google", Calls: 1, InputTokens: 40, OutputTokens: 2, ReasoningTokens: 2},
			{Key: "openai", Calls: 1, InputTokens: 1, OutputTokens: 1},
		}},
		{"until only", store.UsageQuery{GroupBy: store.UsageByProvider, Until: day(2, 0, 0, 0, 0)}, []store.UsageRow{
			{Key: "anthropic", Calls: 1, InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5},
		}},
		{"an empty window", store.UsageQuery{GroupBy: store.UsageByModel, Since: day(4, 0, 0, 0, 0)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.SumUsage(ctx, tc.q)
			must(t, err)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("SumUsage(%+v) =\n%+v\nwant\n%+v", tc.q, got, tc.want)
			}
		})
	}

	_, err = st.SumUsage(ctx, store.UsageQuery{GroupBy: "week"})
	wantErr(t, err, store.ErrInvalid)
}
