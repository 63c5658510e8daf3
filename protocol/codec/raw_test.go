package codec_test

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// A stored event rendered from its raw bytes is byte for byte the typed
// event's rendering, and TypedEvent gives the typed event back.
func TestRawEventRendersLikeTheTypedEvent(t *testing.T) {
	for _, ev := range []*trellisv1.SessionEvent{
		{SessionId: "s-1", Seq: 7, Kind: "message.delta", Ts: "2026-01-02T03:04:05.678Z",
			Payload: &trellisv1.SessionEvent_MessageDelta{MessageDelta: &trellisv1.MessageDeltaEvent{Text: "a <b> & \"c\"\n\u2028é"}}},
		{SessionId: "s-1", Seq: 8, Kind: "tool.progress", Ts: "2026-01-02T03:04:05.678Z",
			Payload: &trellisv1.SessionEvent_ToolProgress{ToolProgress: &trellisv1.ToolProgressEvent{CallId: "c1", Name: "shell", Stream: "stdout"}}},
		{SessionId: "s-1", Seq: 1 << 53, Kind: "turn.done", Ts: "2026-01-02T03:04:05.678Z",
			Payload: &trellisv1.SessionEvent_TurnDone{TurnDone: &trellisv1.TurnDoneEvent{TurnId: "t1", Reason: "complete"}}},
	} {
		fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
		raw := &trellisv1.RawEvent{SessionId: ev.SessionId, Seq: ev.Seq, Kind: ev.Kind, Ts: ev.Ts,
			PayloadJson: codec.Marshal(ev.ProtoReflect().Get(fd).Message().Interface())}
		if got, want := codec.AppendRawEvent(nil, raw), codec.Marshal(ev); !bytes.Equal(got, want) {
			t.Errorf("raw rendering\n%s\nwant\n%s", got, want)
		}
		typed, err := codec.TypedEvent(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(typed, ev) {
			t.Errorf("TypedEvent = %v, want %v", typed, ev)
		}
	}
	empty := codec.AppendRawEvent(nil, &trellisv1.RawEvent{SessionId: "s", Seq: 1, Kind: "x.unknown", Ts: "t"})
	if want := `{"sessionId":"s","seq":1,"kind":"x.unknown","payload":null,"ts":"t"}`; string(empty) != want {
		t.Errorf("got %s, want %s", empty, want)
	}
}

// AppendStoredEvent renders a stored row exactly as AppendRawEvent renders
// the RawEvent made of it (the runtime's rendered pages rely on it).
func TestStoredEventRendersLikeTheRawEvent(t *testing.T) {
	loc := time.FixedZone("x", -7*3600)
	tests := []struct {
		name      string
		sessionID string
		seq       int64
		kind      string
		ts        time.Time
		payload   []byte
		unstored  bool
	}{
		{"delta", "s-1", 7, "message.delta", time.Date(2026, 1, 2, 3, 4, 5, 678_999_999, time.UTC), []byte(`{"text":"a \"b\"\n"}`), false},
		{"zone and no millis", "s-1", 8, "turn.done", time.Date(2026, 12, 31, 23, 59, 59, 0, loc), []byte(`{}`), false},
		{"empty payload", "s-2", 1, "x.unknown", time.Date(1999, 9, 9, 9, 9, 9, 1_000_000, time.UTC), nil, false},
		{"unstored", "s-3", 1 << 53, "message.delta", time.Unix(0, 0), []byte(`{"text":"x"}`), true},
		{"escaped ids", "s-\"\\\u2028", 2, "k\té", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), []byte(`null`), false},
		{"year past 9999", "s", 3, "k", time.Date(12345, 6, 7, 8, 9, 10, 11_000_000, time.UTC), []byte(`1`), false},
		{"negative year", "s", 4, "k", time.Date(-5, 6, 7, 8, 9, 10, 0, time.UTC), []byte(`[]`), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := &trellisv1.RawEvent{SessionId: tc.sessionID, Seq: tc.seq, Kind: tc.kind,
				Ts: tc.ts.UTC().Format(codec.TimestampLayout), PayloadJson: tc.payload, Unstored: tc.unstored}
			want := codec.AppendRawEvent([]byte("prefix"), raw)
			got := codec.AppendStoredEvent([]byte("prefix"), tc.sessionID, tc.seq, tc.kind, tc.ts, tc.payload, tc.unstored)
			if !bytes.Equal(got, want) {
				t.Errorf("stored rendering\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func FuzzAppendTimestamp(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(1_764_000_000), int64(999_999_999))
	f.Add(int64(-62_135_596_800), int64(1))
	f.Add(int64(253_402_300_799), int64(500_000_000))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		ts := time.Unix(sec, nsec)
		if got, want := string(codec.AppendTimestamp(nil, ts)), ts.UTC().Format(codec.TimestampLayout); got != want {
			t.Errorf("AppendTimestamp(%v) = %s, want %s", ts, got, want)
		}
	})
}
