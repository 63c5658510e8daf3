package events_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/trellis-run/trellis/protocol/events"
)

// A line of the "events" format (trellis run --output events, the CLI's
// logs) is one session.event object; its payload decodes into the kind's
// generated type.
func ExampleDecodeEventLine() {
	line := []byte(`{"sessionId":"s-1","seq":4,"kind":"message.delta","payload":{"text":"Hello"},"ts":"2026-12-05T10:00:00.000Z"}` + "\n")
	ev, err := events.DecodeEventLine(line)
	if err != nil {
		log.Fatal(err)
	}
	var delta events.MessageDeltaEvent
	if err := events.DecodePayload(ev, &delta); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.SessionID, ev.Seq, ev.Kind, delta.Text)
	// Output: s-1 4 message.delta Hello
}

// An event renders as one line, its time in milliseconds UTC (TimeFormat);
// a line that is not an event is refused with ErrInvalidEvent.
func ExampleEncodeEventLine() {
	ev := events.Event{
		SessionID: "s-1", Seq: 5, Kind: "turn.done",
		Payload: []byte(`{"turnId":"t-1","reason":"complete"}`),
		TS:      time.Date(2026, 12, 5, 11, 0, 0, 250e6, time.FixedZone("CET", 3600)),
	}
	line, err := events.EncodeEventLine(ev)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(line))
	_, err = events.DecodeEventLine([]byte(`{"seq":"five"}`))
	fmt.Println(errors.Is(err, events.ErrInvalidEvent))
	// Output:
	// {"sessionId":"s-1","seq":5,"kind":"turn.done","payload":{"turnId":"t-1","reason":"complete"},"ts":"2026-12-05T10:00:00.250Z"}
	// true
}
