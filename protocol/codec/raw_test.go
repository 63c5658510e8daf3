package codec_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/events"
)

// A stored event rendered from its stored bytes is byte for byte the typed
// event's rendering (Marshal), sent from memory or not.
func TestStoredEventRendersLikeTheTypedEvent(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_999_999, time.UTC)
	for _, ev := range []*trellisv1.SessionEvent{
		{SessionId: "s-1", Seq: 7, Kind: "message.delta", Ts: "2026-01-02T03:04:05.678Z",
			Payload: &trellisv1.SessionEvent_MessageDelta{MessageDelta: &trellisv1.MessageDeltaEvent{Text: "a <b> & \"c\"\n\u2028é"}}},
		{SessionId: "s-1", Seq: 8, Kind: "tool.progress", Ts: "2026-01-02T03:04:05.678Z",
			Payload: &trellisv1.SessionEvent_ToolProgress{ToolProgress: &trellisv1.ToolProgressEvent{CallId: "c1", Name: "shell", Stream: "stdout"}}},
		{SessionId: "s-1", Seq: 1 << 53, Kind: "turn.done", Ts: "2026-01-02T03:04:05.678Z",
			Payload:  &trellisv1.SessionEvent_TurnDone{TurnDone: &trellisv1.TurnDoneEvent{TurnId: "t1", Reason: "complete"}},
			Delivery: &trellisv1.SessionEvent_Unstored{Unstored: true}},
	} {
		fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
		payload := codec.Marshal(ev.ProtoReflect().Get(fd).Message().Interface())
		got := codec.AppendStoredEvent(nil, ev.SessionId, ev.Seq, ev.Kind, ts, payload, codec.DeliveryOf(ev.GetUnstored(), ev.GetRetracted()))
		if want := codec.Marshal(ev); !bytes.Equal(got, want) {
			t.Errorf("stored rendering\n%s\nwant\n%s", got, want)
		}
		if ev.GetUnstored() != strings.HasSuffix(string(got), `,"ts":"2026-01-02T03:04:05.678Z","unstored":true}`) {
			t.Errorf("unstored member: %s", got)
		}
		back, err := codec.DecodeEvent(got)
		if err != nil || back.GetUnstored() != ev.GetUnstored() {
			t.Errorf("decoded %v (%v): unstored changed", back, err)
		}
	}
	empty := codec.AppendStoredEvent(nil, "s", 1, "x.unknown", time.Unix(0, 0), nil, codec.Stored)
	if want := `{"sessionId":"s","seq":1,"kind":"x.unknown","payload":null,"ts":"1970-01-01T00:00:00.000Z"}`; string(empty) != want {
		t.Errorf("got %s, want %s", empty, want)
	}
}

// A page's objects are slices of its JSON, and their frames are the
// session.event notifications of the objects, in one buffer; a malformed
// page is refused.
func TestPageFrames(t *testing.T) {
	objs := []string{
		`{"sessionId":"s-1","seq":1,"kind":"message.delta","payload":{"text":"a,b}"},"ts":"2026-01-02T03:04:05.678Z"}`,
		`{"sessionId":"s-1","seq":2,"kind":"turn.done","payload":null,"ts":"2026-01-02T03:04:05.679Z","unstored":true}`,
	}
	page := &trellisv1.EventPage{Json: []byte(strings.Join(objs, ","))}
	for i := range objs {
		page.Ends = append(page.Ends, uint32(len(strings.Join(objs[:i+1], ","))))
		page.Seqs = append(page.Seqs, int64(i+1))
	}
	got, err := codec.PageObjects(page, nil)
	if err != nil || len(got) != 2 || string(got[0]) != objs[0] || string(got[1]) != objs[1] {
		t.Fatalf("PageObjects = %q, %v", got, err)
	}
	_, frames := codec.AppendEventFrames(nil, nil, got)
	for i, o := range objs {
		if want := `{"jsonrpc":"2.0","method":"session.event","params":` + o + `}`; string(frames[i]) != want {
			t.Errorf("frame %d: %s", i, frames[i])
		}
	}
	// A frame cannot grow into the next one.
	_ = append(frames[0], "xxxx"...)
	if !strings.HasPrefix(string(frames[1]), `{"jsonrpc"`) {
		t.Error("appending to a frame changed the next one")
	}
	two := page.Json
	for name, p := range map[string]*trellisv1.EventPage{
		"empty":         {},
		"fewer seqs":    {Json: two, Ends: page.Ends, Seqs: page.Seqs[:1]},
		"past the end":  {Json: two, Ends: []uint32{uint32(len(two) + 1)}, Seqs: []int64{1}},
		"not rising":    {Json: two, Ends: []uint32{page.Ends[0], page.Ends[0]}, Seqs: page.Seqs},
		"not an object": {Json: []byte(`{},x}`), Ends: []uint32{2, 5}, Seqs: []int64{1, 2}},
		"no comma":      {Json: []byte(`{} {}`), Ends: []uint32{2, 5}, Seqs: []int64{1, 2}},
	} {
		if _, err := codec.PageObjects(p, nil); err == nil {
			t.Errorf("%s: PageObjects took it", name)
		}
	}
}

func FuzzAppendTimestamp(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(1_764_000_000), int64(999_999_999))
	f.Add(int64(-62_135_596_800), int64(1))
	f.Add(int64(253_402_300_799), int64(500_000_000))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		ts := time.Unix(sec, nsec)
		if got, want := string(codec.AppendTimestamp(nil, ts)), ts.UTC().Format(events.TimeFormat); got != want {
			t.Errorf("AppendTimestamp(%v) = %s, want %s", ts, got, want)
		}
	})
}
