package codec_test

import (
	"strings"
	"testing"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// TestUnstoredMember: an event sent from memory renders with
// "unstored":true after ts, the same from the raw and the typed form; a
// stored event has no such member.
func TestUnstoredMember(t *testing.T) {
	raw := &trellisv1.RawEvent{SessionId: "s-1", Seq: 7, Kind: "turn.done", Ts: "2026-01-01T00:00:00.000Z",
		PayloadJson: []byte(`{"turnId":"t-1","reason":"error","synthetic":false}`)}
	stored := string(codec.AppendRawEvent(nil, raw))
	if strings.Contains(stored, "unstored") {
		t.Errorf("stored event: %s", stored)
	}
	raw.Unstored = true
	fromRaw := string(codec.AppendRawEvent(nil, raw))
	if !strings.HasSuffix(fromRaw, `,"ts":"2026-01-01T00:00:00.000Z","unstored":true}`) {
		t.Errorf("raw rendering: %s", fromRaw)
	}
	typed, err := codec.TypedEvent(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(codec.Marshal(typed)); got != fromRaw {
		t.Errorf("typed rendering\n%s\nraw rendering\n%s", got, fromRaw)
	}
	ev, err := codec.DecodeEvent([]byte(fromRaw))
	if err != nil || !ev.GetUnstored() {
		t.Errorf("decoded %v (%v): unstored lost", ev, err)
	}
}
