package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// usageScript answers every prompt; "think" also reports reasoning tokens.
const usageScript = `{"steps":[
 {"match":"think","reasoning":"Let me think it over.","text":"Thought it over.","reasoningTokens":3,"repeat":true},
 {"default":true,"text":"Default answer.","repeat":true}
]}`

// usageTotals are the sums usage.summary's and session.usage's rows and
// results carry.
type usageTotals struct {
	Calls            int64 `json:"calls"`
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	CostMicroUsd     int64 `json:"costMicroUsd"`
	UnpricedCalls    int64 `json:"unpricedCalls"`
}

func (u *usageTotals) add(e usageEvent) {
	u.Calls++
	u.InputTokens += e.in
	u.OutputTokens += e.out
	u.ReasoningTokens += e.reasoning
	u.CacheReadTokens += e.cacheRead
	u.CacheWriteTokens += e.cacheWrite
	u.CostMicroUsd += e.cost
	if !e.priced {
		u.UnpricedCalls++
	}
}

// usageRow is one row of usage.summary's result (and one turn of
// session.usage's).
type usageRow struct {
	Key string `json:"key"`
	usageTotals
}

// usageSummary is usage.summary's result.
type usageSummary struct {
	GroupBy string `json:"groupBy"`
	usageTotals
	Rows []usageRow `json:"rows"`
}

// sessionUsage is session.usage's result.
type sessionUsage struct {
	SessionID string `json:"sessionId"`
	usageTotals
	Turns []usageRow `json:"turns"`
}

// usageEvent is a usage event read back with session.resume.
type usageEvent struct {
	session, provider, model, turn                  string
	ts                                              time.Time
	in, out, reasoning, cacheRead, cacheWrite, cost int64
	priced                                          bool
}

// readUsage reads back the usage events of the sessions, oldest first.
func readUsage(t *testing.T, c client, sessions ...string) []usageEvent {
	t.Helper()
	var out []usageEvent
	for _, id := range sessions {
		for _, ev := range resumeAll(t, c, id) {
			if ev["kind"] != "usage" {
				continue
			}
			ts, err := time.Parse(time.RFC3339Nano, ev["ts"].(string))
			if err != nil {
				t.Fatal(err)
			}
			p := payloadOf(ev)
			n := func(k string) int64 { return int64(p[k].(float64)) }
			out = append(out, usageEvent{session: id, provider: p["provider"].(string), model: p["model"].(string), turn: p["turnId"].(string), ts: ts,
				in: n("inputTokens"), out: n("outputTokens"), reasoning: n("reasoningTokens"), cacheRead: n("cacheReadTokens"),
				cacheWrite: n("cacheWriteTokens"), cost: n("costMicroUsd"), priced: p["priced"].(bool)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ts.Before(out[j].ts) })
	return out
}

// wantUsage is what usage.summary should answer for evs, grouped by key.
func wantUsage(groupBy string, evs []usageEvent, key func(usageEvent) string) usageSummary {
	want := usageSummary{GroupBy: groupBy, Rows: []usageRow{}}
	rows := map[string]*usageRow{}
	for _, e := range evs {
		k := key(e)
		r := rows[k]
		if r == nil {
			r = &usageRow{Key: k}
			rows[k] = r
		}
		r.add(e)
		want.add(e)
	}
	for _, r := range rows {
		want.Rows = append(want.Rows, *r)
	}
	sort.Slice(want.Rows, func(i, j int) bool {
		a, b := want.Rows[i], want.Rows[j]
		if ta, tb := a.InputTokens+a.OutputTokens, b.InputTokens+b.OutputTokens; ta != tb {
			return ta > tb
		}
		return a.Key < b.Key
	})
	return want
}

// TestUsageSummary: turns in two sessions, one of them on a second model,
// are totalled by each grouping as the usage events read back with
// session.resume add up, within a since/until window too; bad params are
// invalid_params naming the field, and a viewer or member is forbidden.
func TestUsageSummary(t *testing.T) {
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, usageScript)
	c := helloWS(t, d)
	a, b := createSession(t, c, nil), createSession(t, c, nil)
	promptComplete(t, c, a, "hello")
	promptComplete(t, c, a, "think about it")
	promptComplete(t, c, b, "a question with a few more words in it than the others")
	if err := c.Call(context.Background(), "session.setModel", map[string]any{"sessionId": b, "model": "fake:other-model"}, nil); err != nil {
		t.Fatalf("session.setModel: %v", err)
	}
	promptComplete(t, c, b, "think once more")
	promptComplete(t, c, b, "and a last one")
	evs := readUsage(t, c, a, b)
	if len(evs) != 5 {
		t.Fatalf("read back %d usage events, want one per turn: %+v", len(evs), evs)
	}

	keys := map[string]func(usageEvent) string{
		"provider": func(e usageEvent) string { return e.provider },
		"model":    func(e usageEvent) string { return e.model },
		"session":  func(e usageEvent) string { return e.session },
		"day":      func(e usageEvent) string { return e.ts.UTC().Format(time.DateOnly) },
	}
	since, until := evs[1].ts, evs[len(evs)-1].ts
	var window []usageEvent
	for _, e := range evs {
		if !e.ts.Before(since) && e.ts.Before(until) {
			window = append(window, e)
		}
	}
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	tests := []struct {
		name   string
		params map[string]any
		want   usageSummary
	}{
		{"default groups by model", map[string]any{}, wantUsage("model", evs, keys["model"])},
		{"by provider", map[string]any{"groupBy": "provider"}, wantUsage("provider", evs, keys["provider"])},
		{"by model", map[string]any{"groupBy": "model"}, wantUsage("model", evs, keys["model"])},
		{"by session", map[string]any{"groupBy": "session"}, wantUsage("session", evs, keys["session"])},
		{"by day", map[string]any{"groupBy": "day"}, wantUsage("day", evs, keys["day"])},
		{"window by session", map[string]any{"groupBy": "session", "since": stamp(since), "until": stamp(until)}, wantUsage("session", window, keys["session"])},
		{"window by model", map[string]any{"since": stamp(since), "until": stamp(until)}, wantUsage("model", window, keys["model"])},
		{"an empty window", map[string]any{"until": "2000-01-01T00:00:00Z"}, wantUsage("model", nil, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got usageSummary
			if err := c.Call(context.Background(), "usage.summary", tc.params, &got); err != nil {
				t.Fatalf("usage.summary %v: %v", tc.params, err)
			}
			if got.Rows == nil {
				got.Rows = []usageRow{}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("usage.summary %v =\n%+v\nwant (from the usage events)\n%+v", tc.params, got, tc.want)
			}
		})
	}
	// The sample must show what it claims: two models, a reasoning step.
	if all := wantUsage("model", evs, keys["model"]); len(all.Rows) != 2 || all.ReasoningTokens == 0 || len(window) == len(evs) {
		t.Fatalf("the turns did not produce two models, reasoning tokens and a narrower window: %+v, window %d of %d", all, len(window), len(evs))
	}

	// The fake's own model is priced, at nothing; the price table does
	// not know fake:other-model. session.usage splits each session by turn.
	for _, e := range evs {
		if e.priced != (e.model == "fake-1") || e.cost != 0 || e.turn == "" {
			t.Fatalf("usage event %+v: want a call of its turn that cost 0, priced only for fake-1", e)
		}
	}
	checkUsageSums(t, c, evs, a, b)
	wantCode(t, c.Call(context.Background(), "session.usage", map[string]any{"sessionId": "s-nosuchsession"}, nil), "not_found", "")

	g := dialGRPC(t, d)
	t.Cleanup(g.Close)
	bad := []struct {
		name   string
		c      client
		params map[string]any
		inMsg  string
	}{
		{"unknown groupBy", c, map[string]any{"groupBy": "week"}, "groupBy"},
		{"unknown groupBy over gRPC", g, map[string]any{"groupBy": "week"}, "provider, model, session, day"},
		{"groupBy of the wrong type", c, map[string]any{"groupBy": 5}, "groupBy"},
		{"since not RFC 3339", c, map[string]any{"since": "yesterday"}, "since"},
		{"until a bare date", c, map[string]any{"until": "2026-12-01"}, "until"},
		{"until of the wrong type", c, map[string]any{"until": 20261201}, "until"},
		{"until before since", c, map[string]any{"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Call(context.Background(), "usage.summary", tc.params, nil)
			wantCode(t, err, "invalid_params", tc.inMsg)
		})
	}

	for _, role := range []string{"viewer", "member"} {
		t.Run("as "+role, func(t *testing.T) {
			_, key := makePrincipal(t, c, "usage-"+role, role)
			kc, _ := helloWSKey(t, d, key)
			defer kc.Close()
			wantCode(t, kc.Call(context.Background(), "usage.summary", map[string]any{}, nil), "forbidden", "")
		})
	}
	t.Run("as operator", func(t *testing.T) {
		_, key := makePrincipal(t, c, "usage-operator", "operator")
		kc, _ := helloWSKey(t, d, key)
		defer kc.Close()
		var got usageSummary
		if err := kc.Call(context.Background(), "usage.summary", map[string]any{"groupBy": "session"}, &got); err != nil {
			t.Fatal(err)
		}
		if want := wantUsage("session", evs, keys["session"]); !reflect.DeepEqual(got, want) {
			t.Fatalf("an operator sees %+v, want every session's usage %+v", got, want)
		}
	})
	t.Run("over REST", func(t *testing.T) {
		status, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/v1/usage/summary?groupBy=provider", d.HTTPPort()), d.Token())
		if status != 200 {
			t.Fatalf("GET /v1/usage/summary answered %d: %s", status, body)
		}
		var got usageSummary
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if want := wantUsage("provider", evs, keys["provider"]); !reflect.DeepEqual(got, want) {
			t.Fatalf("REST answered %+v, want %+v", got, want)
		}
	})
}

// wantSessionUsage is what session.usage should answer for the usage
// events evs of session id (oldest first): a row per turn, in order.
func wantSessionUsage(id string, evs []usageEvent) sessionUsage {
	want := sessionUsage{SessionID: id, Turns: []usageRow{}}
	for _, e := range evs {
		if e.session != id {
			continue
		}
		want.add(e)
		if n := len(want.Turns); n == 0 || want.Turns[n-1].Key != e.turn {
			want.Turns = append(want.Turns, usageRow{Key: e.turn})
		}
		want.Turns[len(want.Turns)-1].add(e)
	}
	return want
}

// checkUsageSums: usage.summary grouped each way, and session.usage of
// each session, agree with the usage events evs read back (every event
// of the daemon, oldest first).
func checkUsageSums(t *testing.T, c client, evs []usageEvent, sessions ...string) {
	t.Helper()
	keys := map[string]func(usageEvent) string{
		"provider": func(e usageEvent) string { return e.provider },
		"model":    func(e usageEvent) string { return e.model },
		"session":  func(e usageEvent) string { return e.session },
		"day":      func(e usageEvent) string { return e.ts.UTC().Format(time.DateOnly) },
	}
	for groupBy, key := range keys {
		var got usageSummary
		if err := c.Call(context.Background(), "usage.summary", map[string]any{"groupBy": groupBy}, &got); err != nil {
			t.Fatalf("usage.summary by %s: %v", groupBy, err)
		}
		if got.Rows == nil {
			got.Rows = []usageRow{}
		}
		if want := wantUsage(groupBy, evs, key); !reflect.DeepEqual(got, want) {
			t.Fatalf("usage.summary by %s =\n%+v\nwant (from the usage events)\n%+v", groupBy, got, want)
		}
	}
	for _, id := range sessions {
		var got sessionUsage
		if err := c.Call(context.Background(), "session.usage", map[string]any{"sessionId": id}, &got); err != nil {
			t.Fatalf("session.usage %s: %v", id, err)
		}
		if want := wantSessionUsage(id, evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("session.usage %s =\n%+v\nwant (from the usage events)\n%+v", id, got, want)
		}
	}
}
