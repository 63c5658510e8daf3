package rpc

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store"
)

// lenient accepts payloads written by older or newer daemons.
var lenient = protojson.UnmarshalOptions{DiscardUnknown: true}

// EventToProto converts a stored event (its payload is the JSON of the
// documented payload) into the typed SessionEvent.
func EventToProto(e store.Event) (*trellisv1.SessionEvent, error) {
	ev := &trellisv1.SessionEvent{
		SessionId: e.SessionID,
		Seq:       e.Seq,
		Kind:      e.Kind,
		Ts:        FormatTime(e.TS),
	}
	switch {
	case e.Retracted:
		ev.Delivery = &trellisv1.SessionEvent_Retracted{Retracted: true}
	case e.Unstored:
		ev.Delivery = &trellisv1.SessionEvent_Unstored{Unstored: true}
	}
	fd := codec.PayloadMember(e.Kind)
	if fd == nil {
		return nil, fmt.Errorf("event %s/%d has kind %q, which the protocol does not define", e.SessionID, e.Seq, e.Kind)
	}
	m := ev.ProtoReflect()
	payload := m.NewField(fd).Message()
	if len(e.Payload) > 0 && string(e.Payload) != "null" {
		if err := lenient.Unmarshal(e.Payload, payload.Interface()); err != nil {
			return nil, fmt.Errorf("event %s/%d (%s): payload does not match its schema: %w", e.SessionID, e.Seq, e.Kind, err)
		}
	}
	m.Set(fd, protoreflect.ValueOfMessage(payload))
	return ev, nil
}

// strict refuses a payload field the kind's message does not declare: a
// producer writing one is a bug, caught when the event is appended instead
// of dropped when it is read.
var strict = protojson.UnmarshalOptions{}

// CanonicalPayload renders a payload of kind as the protocol's JSON of its
// payload message (codec.Marshal: every field present, camelCase, 64-bit
// numbers as numbers), so that the stored bytes can be served to clients as
// they are. The event log calls it on every append (eventlog.WithPayloadForm):
// it is the typed check of every event. A kind events.proto does not declare,
// a field its payload message does not have, or a value of the wrong type is
// an error, and the event is not recorded.
func CanonicalPayload(kind string, payload json.RawMessage) (json.RawMessage, error) {
	fd := codec.PayloadMember(kind)
	if fd == nil {
		return nil, fmt.Errorf("event kind %q is not declared in events.proto (SessionEvent.payload)", kind)
	}
	msg := (&trellisv1.SessionEvent{}).ProtoReflect().NewField(fd).Message()
	if len(payload) > 0 && string(payload) != "null" {
		if err := strict.Unmarshal(payload, msg.Interface()); err != nil {
			return nil, fmt.Errorf("the %s payload does not match %s: %w", kind, fd.Message().FullName(), err)
		}
	}
	return codec.Marshal(msg.Interface()), nil
}
