package codec_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/codec"
)

// TestStoredEvents: a run of events rendered by one StoredEvents is
// AppendStoredEvent's bytes, event by event, through repeated and changing
// kinds, timestamps in the same second and not, before 1970 and outside
// the years 0 to 9999, and kinds and ids that need escaping.
func TestStoredEvents(t *testing.T) {
	base := time.Date(2026, 12, 1, 17, 0, 59, 998e6, time.UTC)
	type ev struct {
		seq      int64
		kind     string
		ts       time.Time
		payload  string
		unstored bool
	}
	for _, tc := range []struct {
		name      string
		sessionID string
		events    []ev
	}{
		{"one second, one kind", "s-1", []ev{
			{1, "message.delta", base, `{"text":"a"}`, false},
			{2, "message.delta", base.Add(time.Millisecond), `{"text":"b"}`, false},
			{3, "message.delta", base.Add(time.Millisecond + 999*time.Microsecond), `{"text":"c"}`, true},
		}},
		{"across seconds and kinds", "s-2", []ev{
			{1, "turn.started", base, `{}`, false},
			{2, "message.delta", base.Add(2 * time.Millisecond), ``, false},
			{3, "message.delta", base.Add(3 * time.Millisecond), `null`, false},
			{4, "turn.done", base.Add(time.Hour), `{"reason":"complete"}`, false},
			{5, "turn.done", base.Add(time.Hour - time.Second), `{}`, false},
		}},
		{"before 1970", "s-3", []ev{
			{1, "k", time.Date(1969, 12, 31, 23, 59, 59, 500e6, time.UTC), `{}`, false},
			{2, "k", time.Date(1969, 12, 31, 23, 59, 59, 999e6, time.UTC), `{}`, false},
			{3, "k", time.Unix(0, 0), `{}`, false},
		}},
		{"years outside 0 to 9999", "s-4", []ev{
			{1, "k", time.Date(10000, 1, 1, 0, 0, 0, 1e6, time.UTC), `{}`, false},
			{2, "k", time.Date(10000, 1, 1, 0, 0, 0, 2e6, time.UTC), `{}`, false},
			{3, "k", time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), `{}`, false},
			{4, "k", base, `{}`, false},
		}},
		{"escapes", "s-\"5\"\n", []ev{
			{1, "odd \"kind\"\t<é>", base.In(time.FixedZone("x", 3600)), `{"a":[1,2]}`, false},
			{2, "odd \"kind\"\t<é>", base, `{}`, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := codec.NewStoredEvents(tc.sessionID)
			var got []byte
			for _, e := range tc.events {
				got = r.Append(got[:0], e.seq, e.kind, e.ts, []byte(e.payload), codec.DeliveryOf(e.unstored, false))
				want := codec.AppendStoredEvent(nil, tc.sessionID, e.seq, e.kind, e.ts, []byte(e.payload), codec.DeliveryOf(e.unstored, false))
				if !bytes.Equal(got, want) {
					t.Fatalf("event %d:\n got %s\nwant %s", e.seq, got, want)
				}
			}
		})
	}
}

// FuzzStoredEvents: two events rendered in turn by one StoredEvents are
// AppendStoredEvent's bytes, whatever their ids, kinds and times.
func FuzzStoredEvents(f *testing.F) {
	f.Add("s-1", "message.delta", "turn.done", int64(1764608459998000), int64(1), []byte(`{"text":"x"}`))
	f.Add("s\"", "k", "k", int64(-1), int64(999), []byte(``))
	f.Fuzz(func(t *testing.T, sid, kind1, kind2 string, micros, step int64, payload []byte) {
		r := codec.NewStoredEvents(sid)
		t1 := time.UnixMicro(micros)
		t2 := t1.Add(time.Duration(step) * time.Microsecond)
		for i, e := range []struct {
			kind string
			ts   time.Time
		}{{kind1, t1}, {kind2, t2}, {kind1, t1}} {
			got := r.Append(nil, int64(i+1), e.kind, e.ts, payload, codec.DeliveryOf(i == 1, false))
			want := codec.AppendStoredEvent(nil, sid, int64(i+1), e.kind, e.ts, payload, codec.DeliveryOf(i == 1, false))
			if !bytes.Equal(got, want) {
				t.Fatalf("event %d:\n got %s\nwant %s", i+1, got, want)
			}
		}
	})
}
