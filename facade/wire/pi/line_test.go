package pi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/facade/wire/pi"
	"github.com/trellis-run/trellis/protocol/events"
)

const zeroUsage = `{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`

// Every event type decodes and re-encodes unchanged.
func TestRoundTrip(t *testing.T) {
	for _, line := range []string{
		`{"type":"session","version":3,"id":"s-1","timestamp":"2026-01-02T03:04:05.000Z","cwd":"/tmp"}`,
		`{"type":"agent_start"}`,
		`{"type":"turn_start"}`,
		`{"type":"message_start","message":{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":5}}`,
		`{"type":"message_start","message":{"role":"assistant","content":[],"api":"trellis-fake","provider":"fake","model":"m","usage":` + zeroUsage + `,"stopReason":"pending","timestamp":6}}`,
		`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"thinking_start","contentIndex":0}}`,
		`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"text_delta","contentIndex":1,"delta":"a"}}`,
		`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"thinking_end","contentIndex":0,"content":"r"}}`,
		`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"toolcall_start","contentIndex":2,"id":"c","toolName":"ls"}}`,
		`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"toolcall_end","contentIndex":2,"toolCall":{"type":"toolCall","id":"c","name":"ls","arguments":{"a":1}}}}`,
		`{"type":"message_end","message":{"role":"assistant","content":[{"type":"thinking","thinking":"r"},{"type":"text","text":"a"}],"api":"x","provider":"x","model":"m","usage":` + zeroUsage + `,"stopReason":"error","errorMessage":"boom","timestamp":6}}`,
		`{"type":"tool_execution_start","toolCallId":"c","toolName":"ls","args":{}}`,
		`{"type":"tool_execution_update","toolCallId":"c","toolName":"ls","args":{},"partialResult":{"content":[{"type":"text","text":"a"}]}}`,
		`{"type":"tool_execution_end","toolCallId":"c","toolName":"ls","result":{"content":[{"type":"text","text":"a"}]},"isError":false}`,
		`{"type":"message_end","message":{"role":"toolResult","toolCallId":"c","toolName":"ls","content":[{"type":"text","text":"a"}],"isError":true,"timestamp":7}}`,
		`{"type":"turn_end","message":{"role":"assistant","content":[],"api":"x","provider":"x","model":"m","usage":` + zeroUsage + `,"stopReason":"aborted","timestamp":6},"toolResults":[]}`,
		`{"type":"agent_end","messages":[],"willRetry":false}`,
		`{"type":"agent_settled","aborted":true}`,
		`{"type":"queue_update","steering":[],"followUp":["next"]}`,
		`{"type":"compaction_start","reason":"threshold"}`,
		`{"type":"compaction_end","reason":"manual","aborted":false,"willRetry":false}`,
		`{"type":"compaction_end","reason":"manual","result":{"summary":"s"},"aborted":false,"willRetry":false,"errorMessage":"e"}`,
	} {
		ev, err := pi.DecodeEventLine([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		b, err := pi.EncodeEventLine(ev)
		if err != nil || string(b) != line+"\n" {
			t.Errorf("%s\nre-encoded as\n%s(%v)", line, b, err)
		}
	}
}

func TestDecodeEventLineRejects(t *testing.T) {
	for name, line := range map[string]string{
		"not JSON":                     `{"type":`,
		"no type":                      `{"messages":[]}`,
		"type not a string":            `{"type":3}`,
		"missing member":               `{"type":"tool_execution_start","toolCallId":"c","toolName":"ls"}`,
		"member of the wrong type":     `{"type":"agent_settled","aborted":"yes"}`,
		"partial":                      `{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"a","partial":{}}}`,
		"accumulated message":          `{"type":"message_update","message":{},"assistantMessageEvent":{"type":"text_start","contentIndex":0}}`,
		"unknown update":               `{"type":"message_update","assistantMessageEvent":{"type":"start"}}`,
		"delta without its delta":      `{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0}}`,
		"unknown role":                 `{"type":"message_end","message":{"role":"developer","content":[],"timestamp":1}}`,
		"assistant without stop":       `{"type":"message_end","message":{"role":"assistant","content":[],"api":"a","provider":"p","model":"m","usage":` + zeroUsage + `,"timestamp":1}}`,
		"unknown content":              `{"type":"message_end","message":{"role":"user","content":[{"type":"image"}],"timestamp":1}}`,
		"tool call arguments a string": `{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"n","arguments":"{}"}],"api":"a","provider":"p","model":"m","usage":` + zeroUsage + `,"stopReason":"toolUse","timestamp":1}}`,
		"trailing data":                `{"type":"agent_start"} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := pi.DecodeEventLine([]byte(line)); !errors.Is(err, pi.ErrInvalidLine) {
				t.Errorf("DecodeEventLine(%s) = %v, want ErrInvalidLine", line, err)
			}
		})
	}
}

func TestDecodeUnknownType(t *testing.T) {
	_, err := pi.DecodeEventLine([]byte(`{"type":"auto_retry_start","attempt":1}`))
	if !errors.Is(err, pi.ErrUnknownType) || !errors.Is(err, pi.ErrInvalidLine) {
		t.Errorf("unknown type: %v", err)
	}
}

// An errorMessage is only sent with stopReason "error"; nil lists are [].
func TestEncodeOmitsWhatIsAbsent(t *testing.T) {
	b, err := pi.EncodeEventLine(pi.MessageEnd{Message: pi.Message{Role: pi.RoleAssistant, StopReason: pi.StopStop, ErrorMessage: "stale", API: "a", Provider: "p", Model: "m"}})
	if err != nil || strings.Contains(string(b), "errorMessage") || !strings.Contains(string(b), `"content":[]`) {
		t.Errorf("assistant message = %s, %v", b, err)
	}
	b, _ = pi.EncodeEventLine(pi.AgentEnd{})
	if string(b) != `{"type":"agent_end","messages":[],"willRetry":false}`+"\n" {
		t.Errorf("agent_end = %s", b)
	}
	b, _ = pi.EncodeEventLine(pi.ToolExecutionStart{ToolCallID: "c", ToolName: "ls"})
	if string(b) != `{"type":"tool_execution_start","toolCallId":"c","toolName":"ls","args":{}}`+"\n" {
		t.Errorf("tool_execution_start = %s", b)
	}
	if _, err := pi.EncodeEventLine(pi.MessageEnd{Message: pi.Message{Role: "developer"}}); err == nil {
		t.Error("a message of unknown role encodes")
	}
}

func TestAPI(t *testing.T) {
	for provider, want := range map[string]string{
		"openai": "openai-completions", "anthropic": "anthropic-messages", "fake": "trellis-fake", "": "trellis", "trellis": "trellis",
	} {
		if got := pi.API(provider); got != want {
			t.Errorf("API(%q) = %q, want %q", provider, got, want)
		}
	}
}

func event(seq int64, kind, payload string) events.Event {
	return events.Event{SessionID: "s-1", Seq: seq, Kind: kind, Payload: json.RawMessage(payload), TS: time.UnixMilli(seq)}
}

func TestEncoderBegin(t *testing.T) {
	enc := pi.NewEncoder(pi.Header{SessionID: "s-1", Timestamp: time.Date(2026, 1, 2, 4, 4, 5, 123456789, time.FixedZone("x", 3600)), Cwd: "/w"})
	lines, err := enc.Begin()
	if err != nil || len(lines) != 1 || string(lines[0]) != `{"type":"session","version":3,"id":"s-1","timestamp":"2026-01-02T03:04:05.123Z","cwd":"/w"}`+"\n" {
		t.Errorf("Begin = %q, %v", lines, err)
	}
}

// A payload that cannot be read is an error and changes nothing.
func TestEncoderBadPayload(t *testing.T) {
	enc := pi.NewEncoder(pi.Header{})
	if _, err := enc.Encode(event(1, "turn.started", `[]`)); !errors.Is(err, events.ErrInvalidEvent) {
		t.Fatalf("bad payload: %v", err)
	}
	if lines, _ := enc.Encode(event(2, "message.user", `{"text":"x"}`)); len(lines) != 0 {
		t.Errorf("the bad turn.started opened a run: %q", lines)
	}
}

// A tool's partial result is its output so far, capped to the latest
// MaxPartialResult bytes at a rune boundary.
func TestPartialResultIsCapped(t *testing.T) {
	enc := pi.NewEncoder(pi.Header{})
	for _, ev := range []events.Event{
		event(1, "turn.started", `{"turnId":"t-1","prompt":"p","queued":false}`),
		event(2, "step.started", `{"step":0}`),
		event(3, "step.done", `{"step":0,"text":"","reasoning":"","toolCalls":[{"id":"c","name":"sh","args":{}}],"usage":null,"stopReason":"tool_use","provider":"fake","model":"m"}`),
		event(4, "tool.call", `{"callId":"c","name":"sh","args":{}}`),
	} {
		if _, err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	chunk, _ := json.Marshal(strings.Repeat("é", pi.MaxPartialResult/2+7))
	var last pi.Event
	for i := int64(0); i < 3; i++ {
		lines, err := enc.Encode(event(5+i, "tool.progress", `{"callId":"c","name":"sh","stream":"stdout","chunk":`+string(chunk)+`,"truncated":false}`))
		if err != nil || len(lines) != 1 {
			t.Fatalf("progress: %d lines, %v", len(lines), err)
		}
		if last, err = pi.DecodeEventLine(lines[0]); err != nil {
			t.Fatal(err)
		}
	}
	text := last.(pi.ToolExecutionUpdate).PartialResult.Content[0].Text
	if len(text) > pi.MaxPartialResult || len(text) < pi.MaxPartialResult-1 || !strings.HasPrefix(text, "é") {
		t.Errorf("partial result of %d bytes starting %q", len(text), text[:4])
	}
}

func FuzzDecodeEventLine(f *testing.F) {
	f.Add([]byte(`{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"ls","arguments":{}}],"api":"x","provider":"x","model":"m","usage":` + zeroUsage + `,"stopReason":"toolUse","timestamp":6}}`))
	f.Add([]byte(`{"type":"message_update","usage":` + zeroUsage + `,"assistantMessageEvent":{"type":"toolcall_end","contentIndex":2,"toolCall":{"type":"toolCall","id":"c","name":"ls","arguments":{"a":1}}}}`))
	f.Add([]byte(`{"type":"compaction_end","reason":"manual","result":{"summary":"s"},"aborted":false,"willRetry":false}`))
	f.Add([]byte(`{"type":"queue_update","steering":[],"followUp":["a"]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := pi.DecodeEventLine(line)
		if err != nil {
			if !errors.Is(err, pi.ErrInvalidLine) {
				t.Fatalf("error %v does not wrap ErrInvalidLine", err)
			}
			return
		}
		enc, err := pi.EncodeEventLine(ev)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		again, err := pi.DecodeEventLine(enc)
		if err != nil {
			t.Fatalf("an encoded event does not decode: %v\n%s", err, enc)
		}
		if enc2, _ := pi.EncodeEventLine(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable:\n%s%s", enc, enc2)
		}
	})
}

// A failed call's message ends with the message of the error event after
// its step.done, even when a queue change comes in between.
func TestErrorMessageWaitsForTheErrorEvent(t *testing.T) {
	enc := pi.NewEncoder(pi.Header{})
	var ended []pi.Message
	for i, ev := range []events.Event{
		event(1, "turn.started", `{"turnId":"t-1","prompt":"p","queued":false}`),
		event(2, "step.started", `{"step":0}`),
		event(3, "step.done", `{"step":0,"text":"","reasoning":"","toolCalls":[],"usage":null,"stopReason":"error","provider":"fake","model":"m"}`),
		event(4, "turn.queued", `{"turnId":"t-2","position":1}`),
		event(5, "error", `{"code":"provider_error","message":"upstream returned 500"}`),
		event(6, "turn.done", `{"turnId":"t-1","reason":"error","synthetic":false}`),
	} {
		lines, err := enc.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			d, err := pi.DecodeEventLine(l)
			if err != nil {
				t.Fatal(err)
			}
			if m, ok := d.(pi.MessageEnd); ok {
				if i != 4 {
					t.Errorf("message_end at seq %d", ev.Seq)
				}
				ended = append(ended, m.Message)
			}
		}
	}
	if len(ended) != 1 || ended[0].StopReason != pi.StopError || ended[0].ErrorMessage != "upstream returned 500" {
		t.Errorf("ended %+v", ended)
	}
}

// TestDecodesWhatPiEmits: lines the pi CLI writes that Trellis never
// renders still decode (a system message, string user content, image
// blocks), with their content read into blocks.
func TestDecodesWhatPiEmits(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       []pi.Content
	}{
		{"system message", `{"type":"message_end","message":{"role":"system","content":"You are terse."}}`,
			[]pi.Content{{Type: pi.ContentText, Text: "You are terse."}}},
		{"system message with blocks", `{"type":"message_start","message":{"role":"system","content":[{"type":"text","text":"a"}],"timestamp":5}}`,
			[]pi.Content{{Type: pi.ContentText, Text: "a"}}},
		{"string user content", `{"type":"message_end","message":{"role":"user","content":"hello","timestamp":1}}`,
			[]pi.Content{{Type: pi.ContentText, Text: "hello"}}},
		{"image block", `{"type":"message_end","message":{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","data":"iVBORw0=","mimeType":"image/png"}],"timestamp":1}}`,
			[]pi.Content{{Type: pi.ContentText, Text: "see"}, {Type: pi.ContentImage, Data: "iVBORw0=", MimeType: "image/png"}}},
		{"image in a tool result", `{"type":"message_end","message":{"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"image","data":"AA==","mimeType":"image/jpeg"}],"isError":false,"timestamp":1}}`,
			[]pi.Content{{Type: pi.ContentImage, Data: "AA==", MimeType: "image/jpeg"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := pi.DecodeEventLine([]byte(tc.line))
			if err != nil {
				t.Fatalf("DecodeEventLine: %v", err)
			}
			var m pi.Message
			switch e := ev.(type) {
			case pi.MessageEnd:
				m = e.Message
			case pi.MessageStart:
				m = e.Message
			default:
				t.Fatalf("decoded %T", ev)
			}
			if len(m.Content) != len(tc.want) {
				t.Fatalf("content = %+v, want %+v", m.Content, tc.want)
			}
			for i := range tc.want {
				if m.Content[i].Type != tc.want[i].Type || m.Content[i].Text != tc.want[i].Text ||
					m.Content[i].Data != tc.want[i].Data || m.Content[i].MimeType != tc.want[i].MimeType {
					t.Fatalf("content[%d] = %+v, want %+v", i, m.Content[i], tc.want[i])
				}
			}
		})
	}
	for _, bad := range []string{
		`{"type":"message_end","message":{"role":"user","content":42,"timestamp":1}}`,
		`{"type":"message_end","message":{"role":"user","content":[{"type":"image","data":"AA=="}],"timestamp":1}}`,
		`{"type":"message_end","message":{"role":"system"}}`,
	} {
		if _, err := pi.DecodeEventLine([]byte(bad)); err == nil {
			t.Errorf("DecodeEventLine(%s) accepted", bad)
		}
	}
}
