package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/events"
)

func TestEventLineRoundTrip(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"canonical", `{"sessionId":"s-1","seq":3,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-02T03:04:05.678Z"}`,
			`{"sessionId":"s-1","seq":3,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-02T03:04:05.678Z"}` + "\n"},
		{"keys in another order, unknown key, newline", `{"ts":"2026-01-02T03:04:05Z","kind":"x","seq":1,"extra":true,"sessionId":"s-1","payload":null}` + "\n",
			`{"sessionId":"s-1","seq":1,"kind":"x","payload":null,"ts":"2026-01-02T03:04:05.000Z"}` + "\n"},
		{"no payload", `{"sessionId":"s-1","seq":1,"kind":"x","ts":"2026-01-02T04:04:05.1+01:00"}`,
			`{"sessionId":"s-1","seq":1,"kind":"x","payload":null,"ts":"2026-01-02T03:04:05.100Z"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := events.DecodeEventLine([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			got, err := events.EncodeEventLine(ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestDecodeEventLineRejects(t *testing.T) {
	for name, line := range map[string]string{
		"not JSON":        `{`,
		"array":           `[]`,
		"null":            `null`,
		"no sessionId":    `{"seq":1,"kind":"x","ts":"2026-01-02T03:04:05.000Z"}`,
		"seq as a string": `{"sessionId":"s","seq":"1","kind":"x","ts":"2026-01-02T03:04:05.000Z"}`,
		"seq 0":           `{"sessionId":"s","seq":0,"kind":"x","ts":"2026-01-02T03:04:05.000Z"}`,
		"empty kind":      `{"sessionId":"s","seq":1,"kind":"","ts":"2026-01-02T03:04:05.000Z"}`,
		"no ts":           `{"sessionId":"s","seq":1,"kind":"x"}`,
		"bad ts":          `{"sessionId":"s","seq":1,"kind":"x","ts":"yesterday"}`,
		"trailing data":   `{"sessionId":"s","seq":1,"kind":"x","ts":"2026-01-02T03:04:05.000Z"} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := events.DecodeEventLine([]byte(line)); !errors.Is(err, events.ErrInvalidEvent) {
				t.Errorf("DecodeEventLine(%s) = %v, want ErrInvalidEvent", line, err)
			}
		})
	}
}

func TestDecodePayload(t *testing.T) {
	ev := events.Event{Kind: eventkind.StepDone, Seq: 4, Payload: json.RawMessage(`{"step":1,"text":"a","reasoning":"","toolCalls":[],"usage":null,"stopReason":"error","provider":"fake","model":"m"}`)}
	var p events.StepDoneEvent
	if err := events.DecodePayload(ev, &p); err != nil || p.Step != 1 || p.Usage != nil || p.StopReason != "error" {
		t.Errorf("DecodePayload = %+v, %v", p, err)
	}
	for _, raw := range []string{"", "null", `{"step":"x"}`} {
		ev.Payload = json.RawMessage(raw)
		if err := events.DecodePayload(ev, &p); !errors.Is(err, events.ErrInvalidEvent) {
			t.Errorf("DecodePayload(%q) = %v, want ErrInvalidEvent", raw, err)
		}
	}
}

func TestToolResultContent(t *testing.T) {
	msg := "boom"
	for _, tt := range []struct {
		r    events.ToolResultEvent
		want string
	}{
		{events.ToolResultEvent{OK: true, Output: "out"}, "out"},
		{events.ToolResultEvent{Error: &msg}, "boom"},
		{events.ToolResultEvent{Output: "partial", Error: &msg}, "partial\n\nerror: boom"},
		{events.ToolResultEvent{}, "the tool failed"},
	} {
		if got := tt.r.Content(); got != tt.want {
			t.Errorf("%+v.Content() = %q, want %q", tt.r, got, tt.want)
		}
	}
}

func TestEncoderPassesEventsThrough(t *testing.T) {
	enc := events.NewEncoder()
	if begin, err := enc.Begin(); err != nil || len(begin) != 0 {
		t.Fatalf("Begin = %q, %v", begin, err)
	}
	ev := events.Event{SessionID: "s-1", Seq: 1, Kind: "mode.changed", Payload: json.RawMessage(`{"mode":"plan"}`), TS: time.Unix(0, 0)}
	lines, err := enc.Encode(ev)
	if err != nil || len(lines) != 1 || string(lines[0]) != `{"sessionId":"s-1","seq":1,"kind":"mode.changed","payload":{"mode":"plan"},"ts":"1970-01-01T00:00:00.000Z"}`+"\n" {
		t.Errorf("Encode = %q, %v", lines, err)
	}
}

func FuzzDecodeEventLine(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s-1","seq":3,"kind":"message.delta","payload":{"text":"hi"},"ts":"2026-01-02T03:04:05.678Z"}`))
	f.Add([]byte(`{"sessionId":"s-1","seq":1,"kind":"x","ts":"2026-01-02T03:04:05Z","payload":[1,2]}`))
	f.Add([]byte(`{"seq":1e3}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := events.DecodeEventLine(line)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		enc, err := events.EncodeEventLine(ev)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		again, err := events.DecodeEventLine(enc)
		if err != nil {
			t.Fatalf("an encoded event does not decode: %v\n%s", err, enc)
		}
		enc2, _ := events.EncodeEventLine(again)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable:\n%s%s", enc, enc2)
		}
	})
}
