package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrInvalidEvent is returned (wrapped) by DecodeEventLine for a line that
// is not a session.event object.
var ErrInvalidEvent = errors.New("events: invalid session event")

// TimeFormat is the layout of ts on the wire (RFC3339, milliseconds, UTC):
// the protocol's one timestamp layout, for events and every other time the
// daemon renders.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Event is one session event, as the session.event notification and the
// runtime's event log carry it. Payload is the kind's JSON payload (null
// when the event has none).
type Event struct {
	SessionID string
	Seq       int64
	Kind      string
	Payload   json.RawMessage
	TS        time.Time
}

// wireEvent is Event's JSON form.
type wireEvent struct {
	SessionID string          `json:"sessionId"`
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
	TS        string          `json:"ts"`
}

// MarshalJSON renders e as {sessionId, seq, kind, payload, ts}.
func (e Event) MarshalJSON() ([]byte, error) {
	payload := e.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	return json.Marshal(wireEvent{
		SessionID: e.SessionID, Seq: e.Seq, Kind: e.Kind, Payload: payload,
		TS: e.TS.UTC().Format(TimeFormat),
	})
}

// UnmarshalJSON decodes {sessionId, seq, kind, payload, ts}: every field but
// payload is required; unknown fields are ignored (a newer server may add
// some).
func (e *Event) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if raw == nil {
		return fmt.Errorf("%w: not an object", ErrInvalidEvent)
	}
	var out Event
	var ts string
	for _, f := range []struct {
		key string
		dst any
	}{{"sessionId", &out.SessionID}, {"seq", &out.Seq}, {"kind", &out.Kind}, {"ts", &ts}} {
		v, ok := raw[f.key]
		if !ok || string(v) == "null" {
			return fmt.Errorf("%w: %s is missing", ErrInvalidEvent, f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidEvent, f.key, err)
		}
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return fmt.Errorf("%w: ts: %v", ErrInvalidEvent, err)
	}
	out.TS = t.UTC()
	if out.Seq < 1 {
		return fmt.Errorf("%w: seq must be 1 or more (got %d)", ErrInvalidEvent, out.Seq)
	}
	if out.Kind == "" {
		return fmt.Errorf("%w: kind is empty", ErrInvalidEvent)
	}
	if p, ok := raw["payload"]; ok {
		out.Payload = append(json.RawMessage(nil), p...)
	} else {
		out.Payload = json.RawMessage("null")
	}
	*e = out
	return nil
}

// EncodeEventLine renders e as one line of the "events" format: the
// session.event object and a newline.
func EncodeEventLine(e Event) ([]byte, error) {
	b, err := e.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeEventLine decodes one line of the "events" format (the trailing
// newline is optional). The error wraps ErrInvalidEvent.
func DecodeEventLine(line []byte) (Event, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Event{}, fmt.Errorf("%w: trailing data after the event", ErrInvalidEvent)
	}
	var e Event
	if err := e.UnmarshalJSON(raw); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Encoder renders the "events" format: each event as its own line. It keeps
// no state; it has the shape of the other formats' encoders.
type Encoder struct{}

// NewEncoder returns an "events" encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// Begin returns the lines that open a stream: none.
func (*Encoder) Begin() ([][]byte, error) { return nil, nil }

// Encode returns e's line.
func (*Encoder) Encode(e Event) ([][]byte, error) {
	b, err := EncodeEventLine(e)
	if err != nil {
		return nil, err
	}
	return [][]byte{b}, nil
}
