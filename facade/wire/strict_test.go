package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/facade/wire"
	"github.com/trellis-run/trellis/facade/wire/pagent"
	"github.com/trellis-run/trellis/facade/wire/pi"
	"github.com/trellis-run/trellis/protocol/events"
)

// This file holds strict, independent checkers of WIRE-FORMATS.md: they
// parse the lines themselves (key order and JSON types included) and
// enforce the order grammar of each format; they use the packages' decoders
// only to prove that those accept every line and re-encode it unchanged.

// member is one key of an object, in order.
type member struct {
	key string
	raw json.RawMessage
}

// members parses a JSON object keeping its key order; it fails on anything
// else, duplicate keys and trailing data.
func members(t *testing.T, where string, raw []byte) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		t.Fatalf("%s: not a JSON object: %s", where, raw)
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		key := k.(string)
		if seen[key] {
			t.Fatalf("%s: duplicate key %q", where, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: trailing data", where)
	}
	return out
}

// field is an expected key and its JSON type: string, int, number, bool,
// array, object, any, or "object|null".
type field struct{ key, typ string }

// expect checks that raw is an object with exactly fields, in order, of
// their types, and returns its members by key.
func expect(t *testing.T, where string, raw []byte, fields ...field) map[string]json.RawMessage {
	t.Helper()
	ms := members(t, where, raw)
	var got, want []string
	for _, m := range ms {
		got = append(got, m.key)
	}
	for _, f := range fields {
		want = append(want, f.key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys %v, want %v: %s", where, got, want, raw)
	}
	out := map[string]json.RawMessage{}
	for i, m := range ms {
		if !hasType(m.raw, fields[i].typ) {
			t.Fatalf("%s: %s is %s, want %s", where, m.key, m.raw, fields[i].typ)
		}
		out[m.key] = m.raw
	}
	return out
}

var intRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func hasType(raw json.RawMessage, typ string) bool {
	s := strings.TrimSpace(string(raw))
	switch typ {
	case "any":
		return true
	case "string":
		return strings.HasPrefix(s, `"`)
	case "int":
		return intRE.MatchString(s)
	case "number":
		var f float64
		return json.Unmarshal(raw, &f) == nil && s != "null"
	case "bool":
		return s == "true" || s == "false"
	case "array":
		return strings.HasPrefix(s, "[")
	case "object":
		return strings.HasPrefix(s, "{")
	case "object|null":
		return strings.HasPrefix(s, "{") || s == "null"
	}
	return false
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func integer(raw json.RawMessage) int64 {
	var n int64
	_ = json.Unmarshal(raw, &n)
	return n
}

func boolean(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "true" }

func array(t *testing.T, where string, raw json.RawMessage) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil || out == nil {
		t.Fatalf("%s: not an array: %s", where, raw)
	}
	return out
}

// sameJSON compares two JSON texts as values.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// checkLineShape checks that a line is one line of JSON ending in "\n".
func checkLineShape(t *testing.T, i int, line string) []byte {
	t.Helper()
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("line %d is not one line ending in \\n: %q", i+1, line)
	}
	return []byte(strings.TrimSuffix(line, "\n"))
}

// checkEvents checks the "events" rendering: each event, unchanged, as a
// session.event object.
func checkEvents(t *testing.T, lines []string, evs []wire.Event) {
	t.Helper()
	if len(lines) != len(evs) {
		t.Fatalf("events: %d lines for %d events", len(lines), len(evs))
	}
	for i, line := range lines {
		b := checkLineShape(t, i, line)
		m := expect(t, "events line", b, field{"sessionId", "string"}, field{"seq", "int"}, field{"kind", "string"}, field{"payload", "any"}, field{"ts", "string"})
		if integer(m["seq"]) != evs[i].Seq || str(m["kind"]) != evs[i].Kind || !sameJSON(m["payload"], evs[i].Payload) ||
			str(m["ts"]) != evs[i].TS.UTC().Format(events.TimeFormat) {
			t.Fatalf("events line %d = %s, want event %+v", i+1, b, evs[i])
		}
		ev, err := events.DecodeEventLine([]byte(line))
		if err != nil {
			t.Fatalf("events line %d: DecodeEventLine: %v", i+1, err)
		}
		again, _ := events.EncodeEventLine(ev)
		if string(again) != line {
			t.Fatalf("events line %d does not round-trip:\n%s%s", i+1, line, again)
		}
	}
}

// wireParams is WIRE-FORMATS.md's table: each method's params, in order.
var wireParams = map[string][]field{
	"RunBegin":       {{"user_input", "string"}},
	"TurnBegin":      {{"turn", "int"}},
	"TextDelta":      {{"text", "string"}},
	"ReasoningDelta": {{"text", "string"}},
	"StepEnd":        {{"content", "string"}, {"tool_calls", "array"}, {"reasoning_content", "string"}, {"usage", "object|null"}},
	"ToolCallBegin":  {{"tool_call_id", "string"}, {"name", "string"}, {"arguments", "string"}},
	"ToolResult":     {{"tool_call_id", "string"}, {"name", "string"}, {"content", "string"}, {"ok", "bool"}},
	"TurnEnd":        {{"turn", "int"}, {"stopped", "bool"}},
	"RunEnd":         {{"content", "string"}, {"tool_calls", "array"}, {"reasoning_content", "string"}, {"usage", "object|null"}},
}

type wireCall struct{ id, name, args string }

// runEndReasons are turn.done's reasons, which RunEnd's stop_reason carries.
var runEndReasons = map[string]bool{"complete": true, "error": true, "interrupted": true, "denied": true, "budget": true}

// splitRunEndExtras checks that RunEnd's params are the table's four then
// stop_reason (a string) and optionally error (a non-empty string), and
// returns the four alone, stop_reason and error.
func splitRunEndExtras(t *testing.T, where string, params json.RawMessage) (json.RawMessage, string, string) {
	t.Helper()
	ms := members(t, where, params)
	var reason, msg string
	if len(ms) < 5 || ms[4].key != "stop_reason" || json.Unmarshal(ms[4].raw, &reason) != nil {
		t.Fatalf("%s: RunEnd needs a string stop_reason after the table's params", where)
	}
	switch {
	case len(ms) == 6 && ms[5].key == "error":
		if json.Unmarshal(ms[5].raw, &msg) != nil || msg == "" {
			t.Fatalf("%s: RunEnd error must be a non-empty string", where)
		}
	case len(ms) > 5:
		t.Fatalf("%s: RunEnd has unknown params after stop_reason", where)
	}
	var b strings.Builder
	b.WriteString("{")
	for i, m := range ms[:4] {
		if i > 0 {
			b.WriteString(",")
		}
		kb, _ := json.Marshal(m.key)
		b.Write(kb)
		b.WriteString(":")
		b.Write(m.raw)
	}
	b.WriteString("}")
	return json.RawMessage(b.String()), reason, msg
}

// checkWire checks the "wire" rendering: every line a pagent notification
// with exactly its params, and the order RunBegin, (TurnBegin, deltas,
// StepEnd, (ToolCallBegin ToolResult)* in the step's call order, TurnEnd)*,
// RunEnd repeating the last StepEnd; Σ deltas = the StepEnd's texts. A
// failed provider call ends like pagent's, which raises after the deltas:
// RunEnd{stop_reason: "error"} right after them, no StepEnd, no TurnEnd.
func checkWire(t *testing.T, lines []string) {
	t.Helper()
	state := "idle"
	var (
		turns, turn     int64
		text, reasoning strings.Builder
		calls           []wireCall
		next            int
		lastStep        json.RawMessage
	)
	for i, line := range lines {
		b := checkLineShape(t, i, line)
		where := "wire line " + strconv.Itoa(i+1) + " " + string(b)
		top := expect(t, where, b, field{"jsonrpc", "string"}, field{"method", "string"}, field{"params", "object"})
		if str(top["jsonrpc"]) != "2.0" {
			t.Fatalf("%s: jsonrpc", where)
		}
		method := str(top["method"])
		spec, ok := wireParams[method]
		if !ok {
			t.Fatalf("%s: unknown method", where)
		}
		params := top["params"]
		var stopReason, runErr string
		if method == "RunEnd" {
			// Trellis's extra RunEnd params (upstream ignores unknown
			// params): stop_reason always, error when the run had one.
			params, stopReason, runErr = splitRunEndExtras(t, where, params)
		}
		p := expect(t, where, params, spec...)
		ev, err := pagent.DecodeEventLine([]byte(line))
		if err != nil {
			t.Fatalf("%s: pagent.DecodeEventLine: %v", where, err)
		}
		if again, _ := pagent.EncodeEventLine(ev); string(again) != line {
			t.Fatalf("%s: does not round-trip: %s", where, again)
		}
		bad := func(why string) { t.Helper(); t.Fatalf("%s: %s (state %s)", where, why, state) }
		switch method {
		case "RunBegin":
			if state != "idle" {
				bad("RunBegin inside a run")
			}
			state, turns, lastStep = "run", 0, nil
		case "TurnBegin":
			if state != "run" {
				bad("TurnBegin outside a run or inside a turn")
			}
			if turn = integer(p["turn"]); turn != turns {
				bad("turns must count from 0")
			}
			turns++
			state = "turn"
			text.Reset()
			reasoning.Reset()
		case "TextDelta", "ReasoningDelta":
			if state != "turn" {
				bad("delta outside a provider call")
			}
			if str(p["text"]) == "" {
				bad("empty delta")
			}
			if method == "TextDelta" {
				text.WriteString(str(p["text"]))
			} else {
				reasoning.WriteString(str(p["text"]))
			}
		case "StepEnd":
			if state != "turn" {
				bad("StepEnd outside a provider call")
			}
			if str(p["content"]) != text.String() || str(p["reasoning_content"]) != reasoning.String() {
				bad("StepEnd texts differ from the deltas: " + text.String() + " / " + reasoning.String())
			}
			calls, next = checkToolCalls(t, where, p["tool_calls"]), 0
			checkWireUsage(t, where, p["usage"])
			lastStep = top["params"]
			state = "step"
		case "ToolCallBegin":
			if state != "step" || next >= len(calls) {
				bad("ToolCallBegin not for the step's next call")
			}
			c := calls[next]
			if str(p["tool_call_id"]) != c.id || str(p["name"]) != c.name || str(p["arguments"]) != c.args {
				bad("ToolCallBegin differs from the step's call")
			}
			state = "call"
		case "ToolResult":
			if state != "call" {
				bad("ToolResult not right after its ToolCallBegin")
			}
			if c := calls[next]; str(p["tool_call_id"]) != c.id || str(p["name"]) != c.name {
				bad("ToolResult for another call")
			}
			if strings.HasPrefix(str(p["content"]), "denied: ") && boolean(p["ok"]) {
				bad("a denied call is not ok")
			}
			next++
			state = "step"
		case "TurnEnd":
			if state != "step" || next != len(calls) {
				bad("TurnEnd before every call was answered")
			}
			if integer(p["turn"]) != turn || boolean(p["stopped"]) != (len(calls) == 0) {
				bad("TurnEnd turn/stopped")
			}
			state = "run"
		case "RunEnd":
			if state != "run" && (state != "turn" || stopReason != "error") {
				bad("RunEnd inside a turn that did not fail")
			}
			if state == "turn" && runErr == "" {
				bad("a failed provider call's RunEnd lost its error message")
			}
			want := json.RawMessage(`{"content":"","tool_calls":[],"reasoning_content":"","usage":null}`)
			if lastStep != nil {
				want = lastStep
			}
			if !sameJSON(params, want) {
				bad("RunEnd differs from the last StepEnd " + string(want))
			}
			if !runEndReasons[stopReason] {
				bad("RunEnd stop_reason " + strconv.Quote(stopReason))
			}
			if stopReason == "error" && runErr == "" {
				bad("a RunEnd with stop_reason error lost its error message")
			}
			state = "idle"
		}
	}
	if state != "idle" {
		t.Fatalf("wire stream ends inside a run (state %s)", state)
	}
}

func checkToolCalls(t *testing.T, where string, raw json.RawMessage) []wireCall {
	t.Helper()
	var out []wireCall
	for _, item := range array(t, where, raw) {
		c := expect(t, where+" tool_calls[]", item, field{"id", "string"}, field{"type", "string"}, field{"function", "object"})
		if str(c["type"]) != "function" {
			t.Fatalf("%s: tool call type %s", where, c["type"])
		}
		fn := expect(t, where+" function", c["function"], field{"name", "string"}, field{"arguments", "string"})
		args := str(fn["arguments"])
		if !hasType(json.RawMessage(args), "object") || !json.Valid([]byte(args)) {
			t.Fatalf("%s: arguments is not the JSON text of an object: %q", where, args)
		}
		out = append(out, wireCall{str(c["id"]), str(fn["name"]), args})
	}
	return out
}

func checkWireUsage(t *testing.T, where string, raw json.RawMessage) {
	t.Helper()
	if string(raw) == "null" {
		return
	}
	u := expect(t, where+" usage", raw, field{"prompt_tokens", "int"}, field{"completion_tokens", "int"}, field{"total_tokens", "int"})
	if integer(u["total_tokens"]) != integer(u["prompt_tokens"])+integer(u["completion_tokens"]) {
		t.Fatalf("%s: total_tokens", where)
	}
}

// piEvents is each pi event type's members, in order (optional members of
// compaction_end are handled apart).
var piEvents = map[string][]field{
	"session":               {{"type", "string"}, {"version", "int"}, {"id", "string"}, {"timestamp", "string"}, {"cwd", "string"}},
	"agent_start":           {{"type", "string"}},
	"agent_end":             {{"type", "string"}, {"messages", "array"}, {"willRetry", "bool"}},
	"agent_settled":         {{"type", "string"}, {"aborted", "bool"}},
	"turn_start":            {{"type", "string"}},
	"turn_end":              {{"type", "string"}, {"message", "object"}, {"toolResults", "array"}},
	"message_start":         {{"type", "string"}, {"message", "object"}},
	"message_update":        {{"type", "string"}, {"usage", "object"}, {"assistantMessageEvent", "object"}},
	"message_end":           {{"type", "string"}, {"message", "object"}},
	"tool_execution_start":  {{"type", "string"}, {"toolCallId", "string"}, {"toolName", "string"}, {"args", "object"}},
	"tool_execution_update": {{"type", "string"}, {"toolCallId", "string"}, {"toolName", "string"}, {"args", "object"}, {"partialResult", "object"}},
	"tool_execution_end":    {{"type", "string"}, {"toolCallId", "string"}, {"toolName", "string"}, {"result", "object"}, {"isError", "bool"}},
	"queue_update":          {{"type", "string"}, {"steering", "array"}, {"followUp", "array"}},
	"compaction_start":      {{"type", "string"}, {"reason", "string"}},
	"compaction_end":        {{"type", "string"}, {"reason", "string"}, {"aborted", "bool"}, {"willRetry", "bool"}},
}

var (
	tsRE          = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	terminalStops = []string{"stop", "toolUse", "error", "aborted", "length"}
)

// piBlock is one content block of the assistant message being streamed.
type piBlock struct {
	typ, text, id, name, args string
}

// checkPi checks the "json" (pi) rendering: the header, each line's exact
// members and types, messages of each role, no null and no partial, and the
// order of WIRE-FORMATS.md, with deltas adding up to the *_end contents and
// turn_end / agent_end repeating exactly what was streamed.
func checkPi(t *testing.T, lines []string) {
	t.Helper()
	if len(lines) == 0 {
		t.Fatal("pi: no lines")
	}
	var (
		phase                = "idle"
		compaction           string
		turns, turnMsgs      int // turnMsgs: len(runMsgs) at turn_start
		runMsgs, turnResults []json.RawMessage
		lastAssistant, start json.RawMessage
		blocks               []piBlock
		open                 = -1
		calls                []piBlock
		next                 int
		pendingEnd           json.RawMessage // a user/toolResult message_start waiting for its end
		resultText           string
		resultErr            bool
	)
	for i, line := range lines {
		b := checkLineShape(t, i, line)
		where := "pi line " + strconv.Itoa(i+1) + " " + string(b)
		if bytes.Contains(b, []byte("null")) && hasNull(b) {
			t.Fatalf("%s: null where pi's types have none", where)
		}
		typ := str(members(t, where, b)[0].raw)
		spec, ok := piEvents[typ]
		if !ok {
			t.Fatalf("%s: unknown type", where)
		}
		var m map[string]json.RawMessage
		if typ == "compaction_end" {
			m = expectCompactionEnd(t, where, b)
		} else {
			m = expect(t, where, b, spec...)
		}
		ev, err := pi.DecodeEventLine([]byte(line))
		if err != nil {
			t.Fatalf("%s: pi.DecodeEventLine: %v", where, err)
		}
		if again, _ := pi.EncodeEventLine(ev); string(again) != line {
			t.Fatalf("%s: does not round-trip: %s", where, again)
		}
		bad := func(why string) { t.Helper(); t.Fatalf("%s: %s (phase %s)", where, why, phase) }
		if i == 0 {
			if typ != "session" || integer(m["version"]) != 3 || str(m["id"]) != sessionID ||
				!tsRE.MatchString(str(m["timestamp"])) || !path.IsAbs(str(m["cwd"])) {
				bad("the first line must be the session header")
			}
			continue
		}
		if pendingEnd != nil {
			if typ != "message_end" || !sameJSON(m["message"], pendingEnd) {
				bad("message_end must follow its message_start with the same message")
			}
			runMsgs = append(runMsgs, pendingEnd)
			if str(expectRole(t, where, pendingEnd)) == "toolResult" {
				turnResults = append(turnResults, pendingEnd)
			}
			pendingEnd = nil
			continue
		}
		switch typ {
		case "session":
			bad("a second session header")
		case "queue_update":
			if len(array(t, where, m["steering"])) != 0 {
				bad("steering is always empty")
			}
			for _, f := range array(t, where, m["followUp"]) {
				if !hasType(f, "string") {
					bad("followUp holds strings")
				}
			}
		case "compaction_start":
			if compaction != "" || (str(m["reason"]) != "manual" && str(m["reason"]) != "threshold") {
				bad("compaction_start")
			}
			compaction = str(m["reason"])
		case "compaction_end":
			if compaction == "" || str(m["reason"]) != compaction || boolean(m["willRetry"]) {
				bad("compaction_end without its start")
			}
			compaction = ""
		case "agent_start":
			if phase != "idle" {
				bad("agent_start inside a run")
			}
			phase, turns, runMsgs = "run", 0, nil
		case "turn_start":
			if phase != "run" {
				bad("turn_start outside a run or inside a turn")
			}
			phase, turnResults, lastAssistant, turnMsgs = "turn", nil, nil, len(runMsgs)
			turns++
		case "message_start":
			msg := m["message"]
			switch str(expectRole(t, where, msg)) {
			case "user":
				// The prompt opens the run's first turn; a queued prompt
				// that continues the run opens a later one (pi's follow-up).
				if phase != "turn" || lastAssistant != nil || len(runMsgs) != turnMsgs {
					bad("a user message only opens a turn")
				}
				checkMessage(t, where, msg)
				pendingEnd = msg
			case "assistant":
				if phase != "turn" || lastAssistant != nil {
					bad("assistant message_start outside a turn")
				}
				a := checkMessage(t, where, msg)
				if string(a["content"]) != "[]" || str(a["stopReason"]) != "pending" || !zeroUsage(a["usage"]) {
					bad("an assistant message starts empty, pending, with zero usage")
				}
				phase, start, blocks, open = "assistant", msg, nil, -1
			case "toolResult":
				tr := checkMessage(t, where, msg)
				if phase != "result" || str(tr["toolCallId"]) != calls[next].id || str(tr["toolName"]) != calls[next].name ||
					boolean(tr["isError"]) != resultErr || textOf(t, where, tr["content"]) != resultText {
					bad("toolResult message differs from its tool_execution_end")
				}
				pendingEnd = msg
				next++
				phase = "tools"
			}
		case "message_update":
			if phase != "assistant" {
				bad("message_update outside an assistant message")
			}
			checkUsage(t, where, m["usage"])
			blocks, open = checkUpdate(t, where, m["assistantMessageEvent"], blocks, open)
		case "message_end":
			if phase != "assistant" || open != -1 {
				bad("assistant message_end with a block open")
			}
			msg := m["message"]
			a := checkMessage(t, where, msg)
			stop := str(a["stopReason"])
			if !slices.Contains(terminalStops, stop) {
				bad("stopReason " + stop + " is not terminal")
			}
			if !sameJSON(a["content"], blocksJSON(blocks)) {
				bad("message_end content differs from what was streamed: " + string(blocksJSON(blocks)))
			}
			var s map[string]json.RawMessage
			_ = json.Unmarshal(start, &s)
			if !sameJSON(s["timestamp"], a["timestamp"]) {
				bad("message_end timestamp differs from message_start's")
			}
			calls, next = nil, 0
			for _, bl := range blocks {
				if bl.typ == "toolCall" {
					calls = append(calls, bl)
				}
			}
			if (len(calls) > 0) != (stop == "toolUse") {
				bad("stopReason toolUse iff the message has tool calls")
			}
			lastAssistant = msg
			runMsgs = append(runMsgs, msg)
			phase = "tools"
		case "tool_execution_start":
			if phase != "tools" || next >= len(calls) {
				bad("tool_execution_start not for the message's next tool call")
			}
			c := calls[next]
			if str(m["toolCallId"]) != c.id || str(m["toolName"]) != c.name || !sameJSON(m["args"], []byte(c.args)) {
				bad("tool_execution_start differs from the tool call")
			}
			phase = "tool"
		case "tool_execution_update", "tool_execution_end":
			c := calls[next]
			if phase != "tool" || str(m["toolCallId"]) != c.id || str(m["toolName"]) != c.name {
				bad(typ + " not for the running call")
			}
			if typ == "tool_execution_update" {
				if !sameJSON(m["args"], []byte(c.args)) {
					bad("args differ")
				}
				r := expect(t, where, m["partialResult"], field{"content", "array"})
				textOf(t, where, r["content"])
				continue
			}
			r := expect(t, where, m["result"], field{"content", "array"})
			resultText, resultErr = textOf(t, where, r["content"]), boolean(m["isError"])
			phase = "result"
		case "turn_end":
			if phase != "tools" || next != len(calls) {
				bad("turn_end before every tool call has its result")
			}
			if !sameJSON(m["message"], lastAssistant) {
				bad("turn_end message differs from the assistant message_end")
			}
			if !sameJSON(m["toolResults"], rawArray(turnResults)) {
				bad("turn_end toolResults differ from the turn's tool results")
			}
			phase = "run"
		case "agent_end":
			if phase != "run" || turns == 0 {
				bad("agent_end inside a turn or without one")
			}
			if !sameJSON(m["messages"], rawArray(runMsgs)) || boolean(m["willRetry"]) {
				bad("agent_end messages differ from the messages ended in the run")
			}
			phase = "ended"
		case "agent_settled":
			if phase != "ended" {
				bad("agent_settled must follow agent_end")
			}
			phase = "idle"
		}
	}
	if phase != "idle" || compaction != "" || pendingEnd != nil {
		t.Fatalf("pi stream ends with something open (phase %s, compaction %q)", phase, compaction)
	}
}

// hasNull reports whether the JSON text b holds a null value.
func hasNull(b []byte) bool {
	var v any
	_ = json.Unmarshal(b, &v)
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case nil:
			return true
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

func expectCompactionEnd(t *testing.T, where string, b []byte) map[string]json.RawMessage {
	t.Helper()
	fields := []field{{"type", "string"}, {"reason", "string"}}
	ms := members(t, where, b)
	if len(ms) > 2 && ms[2].key == "result" {
		fields = append(fields, field{"result", "object"})
	}
	fields = append(fields, field{"aborted", "bool"}, field{"willRetry", "bool"})
	if ms[len(ms)-1].key == "errorMessage" {
		fields = append(fields, field{"errorMessage", "string"})
	}
	return expect(t, where, b, fields...)
}

func expectRole(t *testing.T, where string, msg json.RawMessage) json.RawMessage {
	t.Helper()
	ms := members(t, where, msg)
	if len(ms) == 0 || ms[0].key != "role" {
		t.Fatalf("%s: a message starts with role: %s", where, msg)
	}
	return ms[0].raw
}

// checkMessage checks a message's members for its role.
func checkMessage(t *testing.T, where string, msg json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	switch role := str(expectRole(t, where, msg)); role {
	case "user":
		m = expect(t, where, msg, field{"role", "string"}, field{"content", "array"}, field{"timestamp", "int"})
		textOf(t, where, m["content"])
	case "assistant":
		fields := []field{{"role", "string"}, {"content", "array"}, {"api", "string"}, {"provider", "string"},
			{"model", "string"}, {"usage", "object"}, {"stopReason", "string"}}
		if bytes.Contains(msg, []byte(`"stopReason":"error"`)) {
			fields = append(fields, field{"errorMessage", "string"})
		}
		m = expect(t, where, msg, append(fields, field{"timestamp", "int"})...)
		checkUsage(t, where, m["usage"])
		for _, c := range array(t, where, m["content"]) {
			checkBlock(t, where, c)
		}
	case "toolResult":
		m = expect(t, where, msg, field{"role", "string"}, field{"toolCallId", "string"}, field{"toolName", "string"},
			field{"content", "array"}, field{"isError", "bool"}, field{"timestamp", "int"})
		textOf(t, where, m["content"])
	default:
		t.Fatalf("%s: role %q", where, role)
	}
	return m
}

func checkBlock(t *testing.T, where string, c json.RawMessage) {
	t.Helper()
	switch typ := str(members(t, where, c)[0].raw); typ {
	case "text":
		expect(t, where, c, field{"type", "string"}, field{"text", "string"})
	case "thinking":
		expect(t, where, c, field{"type", "string"}, field{"thinking", "string"})
	case "toolCall":
		expect(t, where, c, field{"type", "string"}, field{"id", "string"}, field{"name", "string"}, field{"arguments", "object"})
	default:
		t.Fatalf("%s: content type %q", where, typ)
	}
}

// textOf checks content made of text blocks and returns their text.
func textOf(t *testing.T, where string, content json.RawMessage) string {
	t.Helper()
	var b strings.Builder
	for _, c := range array(t, where, content) {
		tc := expect(t, where, c, field{"type", "string"}, field{"text", "string"})
		if str(tc["type"]) != "text" {
			t.Fatalf("%s: text content only", where)
		}
		b.WriteString(str(tc["text"]))
	}
	return b.String()
}

func checkUsage(t *testing.T, where string, raw json.RawMessage) {
	t.Helper()
	u := expect(t, where+" usage", raw, field{"input", "int"}, field{"output", "int"}, field{"cacheRead", "int"},
		field{"cacheWrite", "int"}, field{"totalTokens", "int"}, field{"cost", "object"})
	if integer(u["totalTokens"]) != integer(u["input"])+integer(u["output"])+integer(u["cacheRead"])+integer(u["cacheWrite"]) {
		t.Fatalf("%s: totalTokens", where)
	}
	expect(t, where+" cost", u["cost"], field{"input", "number"}, field{"output", "number"}, field{"cacheRead", "number"},
		field{"cacheWrite", "number"}, field{"total", "number"})
}

func zeroUsage(raw json.RawMessage) bool {
	return sameJSON(raw, []byte(`{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`))
}

// checkUpdate applies one assistantMessageEvent to the blocks streamed so
// far, checking it against them.
func checkUpdate(t *testing.T, where string, raw json.RawMessage, blocks []piBlock, open int) ([]piBlock, int) {
	t.Helper()
	if bytes.Contains(raw, []byte(`"partial"`)) {
		t.Fatalf("%s: partial", where)
	}
	typ := str(members(t, where, raw)[0].raw)
	kind, part, _ := strings.Cut(typ, "_")
	blockType := map[string]string{"text": "text", "thinking": "thinking", "toolcall": "toolCall"}[kind]
	var e map[string]json.RawMessage
	switch typ {
	case "text_start", "thinking_start":
		e = expect(t, where, raw, field{"type", "string"}, field{"contentIndex", "int"})
	case "text_delta", "thinking_delta", "toolcall_delta":
		e = expect(t, where, raw, field{"type", "string"}, field{"contentIndex", "int"}, field{"delta", "string"})
	case "text_end", "thinking_end":
		e = expect(t, where, raw, field{"type", "string"}, field{"contentIndex", "int"}, field{"content", "string"})
	case "toolcall_start":
		e = expect(t, where, raw, field{"type", "string"}, field{"contentIndex", "int"}, field{"id", "string"}, field{"toolName", "string"})
	case "toolcall_end":
		e = expect(t, where, raw, field{"type", "string"}, field{"contentIndex", "int"}, field{"toolCall", "object"})
	default:
		t.Fatalf("%s: assistantMessageEvent type %q", where, typ)
	}
	idx := int(integer(e["contentIndex"]))
	switch part {
	case "start":
		if open != -1 || idx != len(blocks) {
			t.Fatalf("%s: a block starts after the previous one ended, at the next index", where)
		}
		blocks = append(blocks, piBlock{typ: blockType, id: str(e["id"]), name: str(e["toolName"])})
		return blocks, idx
	case "delta":
		if idx != open || blocks[idx].typ != blockType || str(e["delta"]) == "" {
			t.Fatalf("%s: delta for a block that is not open, or empty", where)
		}
		if blockType == "toolCall" {
			blocks[idx].args += str(e["delta"])
		} else {
			blocks[idx].text += str(e["delta"])
		}
		return blocks, open
	default: // end
		if idx != open || blocks[idx].typ != blockType {
			t.Fatalf("%s: end of a block that is not open", where)
		}
		if blockType == "toolCall" {
			tc := expect(t, where, e["toolCall"], field{"type", "string"}, field{"id", "string"}, field{"name", "string"}, field{"arguments", "object"})
			bl := blocks[idx]
			if str(tc["type"]) != "toolCall" || str(tc["id"]) != bl.id || str(tc["name"]) != bl.name || !sameJSON(tc["arguments"], []byte(bl.args)) {
				t.Fatalf("%s: toolcall_end differs from its start and deltas", where)
			}
		} else if str(e["content"]) != blocks[idx].text {
			t.Fatalf("%s: %s content differs from its deltas %q", where, typ, blocks[idx].text)
		}
		return blocks, -1
	}
}

// blocksJSON renders streamed blocks as the message content they add up to.
func blocksJSON(blocks []piBlock) []byte {
	out := []any{}
	for _, b := range blocks {
		switch b.typ {
		case "text":
			out = append(out, map[string]any{"type": "text", "text": b.text})
		case "thinking":
			out = append(out, map[string]any{"type": "thinking", "thinking": b.text})
		case "toolCall":
			out = append(out, map[string]any{"type": "toolCall", "id": b.id, "name": b.name, "arguments": json.RawMessage(b.args)})
		}
	}
	data, _ := json.Marshal(out)
	return data
}

func rawArray(items []json.RawMessage) []byte {
	if items == nil {
		return []byte("[]")
	}
	b, _ := json.Marshal(items)
	return b
}
