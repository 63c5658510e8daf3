package events

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Content is what the model reads of a tool result, as the agent loop
// builds it: the output, or the error, or both.
func (r ToolResultEvent) Content() string {
	if r.OK {
		return r.Output
	}
	msg := "the tool failed"
	if r.Error != nil && *r.Error != "" {
		msg = *r.Error
	}
	if r.Output != "" {
		return r.Output + "\n\nerror: " + msg
	}
	return msg
}

// DecodePayload decodes e's payload into v, naming the event on failure.
// The error wraps ErrInvalidEvent.
func DecodePayload(e Event, v any) error {
	p := bytes.TrimSpace(e.Payload)
	if len(p) == 0 || string(p) == "null" {
		return fmt.Errorf("%w: %s (seq %d) has no payload", ErrInvalidEvent, e.Kind, e.Seq)
	}
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("%w: %s (seq %d) payload: %v", ErrInvalidEvent, e.Kind, e.Seq, err)
	}
	return nil
}

// ArgsJSON returns args as compact JSON text, {} when empty.
func ArgsJSON(args json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil || b.Len() == 0 {
		return "{}"
	}
	return b.String()
}
