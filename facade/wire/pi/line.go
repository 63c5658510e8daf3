package pi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrInvalidLine is returned (wrapped) by DecodeEventLine for a line that is
// not a well-formed event.
var ErrInvalidLine = errors.New("pi: invalid event line")

// ErrUnknownType is returned (wrapped, together with ErrInvalidLine) by
// DecodeEventLine for an event type this package does not know; a client may
// skip such lines (pi adds types over releases).
var ErrUnknownType = errors.New("pi: unknown event type")

// eventKeys lists the members each type requires when decoding.
var eventKeys = map[string][]string{
	TypeSession:             {"version", "id", "timestamp", "cwd"},
	TypeAgentStart:          nil,
	TypeAgentEnd:            {"messages"},
	TypeAgentSettled:        nil,
	TypeTurnStart:           nil,
	TypeTurnEnd:             {"message", "toolResults"},
	TypeMessageStart:        {"message"},
	TypeMessageUpdate:       {"assistantMessageEvent"},
	TypeMessageEnd:          {"message"},
	TypeToolExecutionStart:  {"toolCallId", "toolName", "args"},
	TypeToolExecutionUpdate: {"toolCallId", "toolName", "args", "partialResult"},
	TypeToolExecutionEnd:    {"toolCallId", "toolName", "result", "isError"},
	TypeQueueUpdate:         {"steering", "followUp"},
	TypeCompactionStart:     {"reason"},
	TypeCompactionEnd:       {"reason", "aborted", "willRetry"},
}

// EncodeEventLine renders ev as one line: {"type":<type>, ...its fields}
// and a newline. Nil lists render as [] and missing args as {}.
func EncodeEventLine(ev Event) ([]byte, error) {
	if ev == nil {
		return nil, errors.New("pi: nil event")
	}
	ev = normalize(ev)
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("pi: encode %s: %w", ev.Type(), err)
	}
	typ, _ := json.Marshal(ev.Type())
	out := make([]byte, 0, len(body)+len(typ)+10)
	out = append(out, `{"type":`...)
	out = append(out, typ...)
	if len(body) > 2 { // not {}
		out = append(out, ',')
		out = append(out, body[1:]...)
	} else {
		out = append(out, '}')
	}
	return append(out, '\n'), nil
}

func normalize(ev Event) Event {
	switch e := ev.(type) {
	case AgentEnd:
		if e.Messages == nil {
			e.Messages = []Message{}
		}
		return e
	case TurnEnd:
		if e.ToolResults == nil {
			e.ToolResults = []Message{}
		}
		return e
	case QueueUpdate:
		if e.Steering == nil {
			e.Steering = []string{}
		}
		if e.FollowUp == nil {
			e.FollowUp = []string{}
		}
		return e
	case ToolExecutionStart:
		e.Args = objectOrEmpty(e.Args)
		return e
	case ToolExecutionUpdate:
		e.Args = objectOrEmpty(e.Args)
		e.PartialResult = e.PartialResult.normalized()
		return e
	case ToolExecutionEnd:
		e.Result = e.Result.normalized()
		return e
	}
	return ev
}

func (o ToolOutput) normalized() ToolOutput {
	if o.Content == nil {
		o.Content = []Content{}
	}
	return o
}

func objectOrEmpty(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

// DecodeEventLine decodes one line: the type must be known (else the error
// wraps ErrUnknownType), its required members present and of the right JSON
// type, messages and content blocks well-formed for their role and type, and
// a message_update must not carry a partial message. Unknown members are
// ignored. The error wraps ErrInvalidLine.
func DecodeEventLine(b []byte) (Event, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, invalid("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("trailing data after the object")
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.Type == nil {
		return nil, invalid("an event is an object with a string type")
	}
	typ := *head.Type
	keys, ok := eventKeys[typ]
	if !ok {
		return nil, fmt.Errorf("%w: %w %q", ErrInvalidLine, ErrUnknownType, typ)
	}
	if err := requireKeys(raw, keys...); err != nil {
		return nil, invalid("%s: %v", typ, err)
	}
	var ev Event
	var err error
	switch typ {
	case TypeSession:
		ev, err = decode[SessionHeader](raw)
	case TypeAgentStart:
		ev, err = decode[AgentStart](raw)
	case TypeAgentEnd:
		ev, err = decode[AgentEnd](raw)
	case TypeAgentSettled:
		ev, err = decode[AgentSettled](raw)
	case TypeTurnStart:
		ev, err = decode[TurnStart](raw)
	case TypeTurnEnd:
		ev, err = decode[TurnEnd](raw)
	case TypeMessageStart:
		ev, err = decode[MessageStart](raw)
	case TypeMessageUpdate:
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		if _, ok := m["message"]; ok {
			return nil, invalid("message_update: the accumulated message is not sent in JSON mode")
		}
		ev, err = decode[MessageUpdate](raw)
	case TypeMessageEnd:
		ev, err = decode[MessageEnd](raw)
	case TypeToolExecutionStart:
		ev, err = decode[ToolExecutionStart](raw)
	case TypeToolExecutionUpdate:
		ev, err = decode[ToolExecutionUpdate](raw)
	case TypeToolExecutionEnd:
		ev, err = decode[ToolExecutionEnd](raw)
	case TypeQueueUpdate:
		ev, err = decode[QueueUpdate](raw)
	case TypeCompactionStart:
		ev, err = decode[CompactionStart](raw)
	case TypeCompactionEnd:
		ev, err = decode[CompactionEnd](raw)
	}
	if err != nil {
		return nil, err
	}
	return normalize(ev), nil
}

func decode[T Event](raw json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, invalid("%s: %v", v.Type(), err)
	}
	return v, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidLine, fmt.Sprintf(format, args...))
}
