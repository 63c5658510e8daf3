package pagent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/trellis-run/trellis/facade/wire/pagent"
	"github.com/trellis-run/trellis/protocol/events"
)

// The lines of the seed's typical stream (WIRE-FORMATS.md) decode and
// re-encode unchanged.
func TestSeedLines(t *testing.T) {
	for _, tt := range []struct {
		line string
		want pagent.Event
	}{
		{`{"jsonrpc":"2.0","method":"RunBegin","params":{"user_input":"Hi"}}`, pagent.RunBegin{UserInput: "Hi"}},
		{`{"jsonrpc":"2.0","method":"TextDelta","params":{"text":"4"}}`, pagent.TextDelta{Text: "4"}},
		{`{"jsonrpc":"2.0","method":"RunEnd","params":{"content":"4","tool_calls":[],"reasoning_content":"","usage":null}}`,
			pagent.RunEnd{Content: "4", ToolCalls: []pagent.ToolCall{}}},
		{`{"jsonrpc":"2.0","method":"StepEnd","params":{"content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}],"reasoning_content":"r","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}}`,
			pagent.StepEnd{ToolCalls: []pagent.ToolCall{{ID: "c", Type: "function", Function: pagent.FunctionCall{Name: "ls", Arguments: "{}"}}},
				ReasoningContent: "r", Usage: &pagent.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}}},
		{`{"jsonrpc":"2.0","method":"TurnEnd","params":{"turn":2,"stopped":true}}`, pagent.TurnEnd{Turn: 2, Stopped: true}},
		{`{"jsonrpc":"2.0","method":"ToolResult","params":{"tool_call_id":"c","name":"ls","content":"no","ok":false}}`,
			pagent.ToolResult{ToolCallID: "c", Name: "ls", Content: "no"}},
	} {
		ev, err := pagent.DecodeEventLine([]byte(tt.line))
		if err != nil {
			t.Fatalf("%s: %v", tt.line, err)
		}
		if !reflect.DeepEqual(ev, tt.want) {
			t.Errorf("%s decodes as %#v, want %#v", tt.line, ev, tt.want)
		}
		b, err := pagent.EncodeEventLine(ev)
		if err != nil || string(b) != tt.line+"\n" {
			t.Errorf("re-encoded as %s, %v", b, err)
		}
	}
}

// Older producers send ToolResult without ok, and newer ones may add
// params: both decode.
func TestDecodeLenient(t *testing.T) {
	ev, err := pagent.DecodeEventLine([]byte(`{"jsonrpc":"2.0","method":"ToolResult","params":{"tool_call_id":"c","name":"ls","content":"x"}}`))
	if err != nil || ev != (pagent.ToolResult{ToolCallID: "c", Name: "ls", Content: "x", OK: true}) {
		t.Errorf("ToolResult without ok = %#v, %v", ev, err)
	}
	ev, err = pagent.DecodeEventLine([]byte(`{"jsonrpc":"2.0","method":"TurnBegin","params":{"turn":0,"new":1}}`))
	if err != nil || ev != (pagent.TurnBegin{}) {
		t.Errorf("extra param = %#v, %v", ev, err)
	}
}

// DecodeEventLine rejects what pagent's decode_event_line rejects.
func TestDecodeEventLineRejects(t *testing.T) {
	for name, line := range map[string]string{
		"an id":              `{"jsonrpc":"2.0","id":1,"method":"TextDelta","params":{"text":"x"}}`,
		"jsonrpc 1.0":        `{"jsonrpc":"1.0","method":"TextDelta","params":{"text":"x"}}`,
		"no jsonrpc":         `{"method":"TextDelta","params":{"text":"x"}}`,
		"no method":          `{"jsonrpc":"2.0","params":{"text":"x"}}`,
		"method not string":  `{"jsonrpc":"2.0","method":7,"params":{"text":"x"}}`,
		"unknown method":     `{"jsonrpc":"2.0","method":"Telemetry","params":{}}`,
		"params an array":    `{"jsonrpc":"2.0","method":"TextDelta","params":["x"]}`,
		"params missing":     `{"jsonrpc":"2.0","method":"TextDelta"}`,
		"missing param":      `{"jsonrpc":"2.0","method":"StepEnd","params":{"content":"","reasoning_content":"","usage":null}}`,
		"param of bad type":  `{"jsonrpc":"2.0","method":"TurnBegin","params":{"turn":"0"}}`,
		"not an object":      `"TextDelta"`,
		"trailing data":      `{"jsonrpc":"2.0","method":"TextDelta","params":{"text":"x"}} x`,
		"tool_calls objects": `{"jsonrpc":"2.0","method":"RunEnd","params":{"content":"","tool_calls":[1],"reasoning_content":"","usage":null}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := pagent.DecodeEventLine([]byte(line)); !errors.Is(err, pagent.ErrInvalidLine) {
				t.Errorf("DecodeEventLine(%s) = %v, want ErrInvalidLine", line, err)
			}
		})
	}
}

func TestEncodeNilToolCalls(t *testing.T) {
	b, err := pagent.EncodeEventLine(pagent.StepEnd{})
	if err != nil || string(b) != `{"jsonrpc":"2.0","method":"StepEnd","params":{"content":"","tool_calls":[],"reasoning_content":"","usage":null}}`+"\n" {
		t.Errorf("EncodeEventLine = %s, %v", b, err)
	}
	if _, err := pagent.EncodeEventLine(nil); err == nil {
		t.Error("a nil event encodes")
	}
}

func event(seq int64, kind, payload string) events.Event {
	return events.Event{SessionID: "s-1", Seq: seq, Kind: kind, Payload: json.RawMessage(payload), TS: time.Unix(seq, 0)}
}

// A stream joined in the middle of a run renders nothing until the next
// run starts: the grammar needs RunBegin first.
func TestEncoderSkipsUntilARunStarts(t *testing.T) {
	enc := pagent.NewEncoder()
	for _, ev := range []events.Event{
		event(7, "message.delta", `{"text":"late"}`),
		event(8, "step.done", `{"step":0,"text":"late","reasoning":"","toolCalls":[],"usage":null,"stopReason":"stop","provider":"p","model":"m"}`),
		event(9, "turn.done", `{"turnId":"t-1","reason":"complete","synthetic":false}`),
	} {
		if lines, err := enc.Encode(ev); err != nil || len(lines) != 0 {
			t.Fatalf("seq %d: %q, %v", ev.Seq, lines, err)
		}
	}
	lines, err := enc.Encode(event(10, "turn.started", `{"turnId":"t-2","prompt":"again","queued":false}`))
	if err != nil || len(lines) != 1 || string(lines[0]) != `{"jsonrpc":"2.0","method":"RunBegin","params":{"user_input":"again"}}`+"\n" {
		t.Errorf("turn.started = %q, %v", lines, err)
	}
}

// A payload that cannot be read is an error and changes nothing.
func TestEncoderBadPayload(t *testing.T) {
	enc := pagent.NewEncoder()
	if _, err := enc.Encode(event(1, "turn.started", `{"turnId":1}`)); !errors.Is(err, events.ErrInvalidEvent) {
		t.Fatalf("bad payload: %v", err)
	}
	if lines, _ := enc.Encode(event(2, "message.delta", `{"text":"x"}`)); len(lines) != 0 {
		t.Errorf("the bad turn.started opened a run: %q", lines)
	}
}

func FuzzDecodeEventLine(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","method":"RunBegin","params":{"user_input":"Hi"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"StepEnd","params":{"content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}],"reasoning_content":"r","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"ToolResult","params":{"tool_call_id":"c","name":"ls","content":"x"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := pagent.DecodeEventLine(line)
		if err != nil {
			if !errors.Is(err, pagent.ErrInvalidLine) {
				t.Fatalf("error %v does not wrap ErrInvalidLine", err)
			}
			return
		}
		enc, err := pagent.EncodeEventLine(ev)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		again, err := pagent.DecodeEventLine(enc)
		if err != nil {
			t.Fatalf("an encoded event does not decode: %v\n%s", err, enc)
		}
		if enc2, _ := pagent.EncodeEventLine(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable:\n%s%s", enc, enc2)
		}
	})
}

// TestDecodeOptionalParams: pagent documents usage as present only when
// known, and RunEnd's extra params as Trellis's own; lines without them
// decode, and Trellis's stop_reason and error are read back.
func TestDecodeOptionalParams(t *testing.T) {
	for line, want := range map[string]pagent.Event{
		`{"jsonrpc":"2.0","method":"RunEnd","params":{"content":"4","tool_calls":[]}}`:                                                                         pagent.RunEnd{Content: "4", ToolCalls: []pagent.ToolCall{}},
		`{"jsonrpc":"2.0","method":"RunEnd","params":{"content":"4","tool_calls":[],"reasoning_content":""}}`:                                                  pagent.RunEnd{Content: "4", ToolCalls: []pagent.ToolCall{}},
		`{"jsonrpc":"2.0","method":"StepEnd","params":{"content":"x","tool_calls":[]}}`:                                                                        pagent.StepEnd{Content: "x", ToolCalls: []pagent.ToolCall{}},
		`{"jsonrpc":"2.0","method":"RunEnd","params":{"content":"","tool_calls":[],"reasoning_content":"","usage":null,"stop_reason":"error","error":"boom"}}`: pagent.RunEnd{ToolCalls: []pagent.ToolCall{}, StopReason: "error", Error: "boom"},
	} {
		got, err := pagent.DecodeEventLine([]byte(line))
		if err != nil {
			t.Errorf("DecodeEventLine(%s): %v", line, err)
			continue
		}
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("DecodeEventLine(%s) = %#v, want %#v", line, got, want)
		}
	}
}
