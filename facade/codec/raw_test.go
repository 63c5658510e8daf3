package codec_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/facade/codec"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
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
