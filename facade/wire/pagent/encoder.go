package pagent

import (
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/events"
)

// The ToolResult content of a call the turn ended before answering (the
// event log has no tool.result for it): it never ran, or it was running.
const (
	notRun = "not run: the turn ended"
	cutOff = "the turn ended before the tool returned"
	// runFailed is RunEnd's error for a run that failed without an error
	// event in the log.
	runFailed = "the run failed; the event log has no error message"
)

// Encoder renders one session's events, fed in seq order, as "wire" lines.
// It is stateful (a run spans many events) and not safe for concurrent use.
//
// Only events inside a run (from turn.started to its turn.done) produce
// lines; events before the first turn.started it sees are skipped, so a
// rendering must be fed from the start of a run. Where the log lacks an event
// the grammar needs, the encoder closes what is open: deltas outside a
// provider call (a command's answer) form a turn of their own, a call cut off
// without step.done gets a StepEnd of what was streamed, and a tool call
// still unanswered when its turn ends gets ToolResult{ok: false}.
//
// A provider call that fails (step.done{stopReason: error}, or a call still
// open when its run ends with error) renders as pagent's does, which raises
// after the deltas: its turn gets no StepEnd and no TurnEnd, and RunEnd
// follows the deltas with stop_reason "error" and the error's message.
type Encoder struct {
	run      bool
	turnID   string
	turns    int     // turns begun in this run
	turn     *turn   // the open turn, if any
	last     StepEnd // the run's last StepEnd
	haveLast bool
	errMsg   string // the message of the run's last error event
}

// turn is one open provider call.
type turn struct {
	index     int
	text      strings.Builder
	reasoning strings.Builder
	stepEnded bool
	failed    bool // the provider call failed: no StepEnd, no TurnEnd
	calls     []events.StepToolCall
	begun     map[string]bool // ToolCallBegin sent
	answered  map[string]bool // ToolResult sent
}

// NewEncoder returns an encoder for one stream.
func NewEncoder() *Encoder { return &Encoder{} }

// Begin returns the lines that open a stream: none.
func (*Encoder) Begin() ([][]byte, error) { return nil, nil }

// Encode returns the lines ev renders as, possibly none. An error means the
// event's payload could not be read; the encoder's state is unchanged and
// the caller may go on with the next event.
func (e *Encoder) Encode(ev events.Event) ([][]byte, error) {
	var out []Event
	switch ev.Kind {
	case eventkind.TurnStarted:
		var p events.TurnStartedEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		if e.run {
			out = e.endRun(out, "")
		}
		e.run, e.turnID, e.turns, e.turn, e.last, e.haveLast, e.errMsg = true, p.TurnID, 0, nil, StepEnd{}, false, ""
		out = append(out, RunBegin{UserInput: p.Prompt})

	case eventkind.StepStarted:
		if !e.run {
			return nil, nil
		}
		out = e.endTurn(out)
		out = e.beginTurn(out)

	case eventkind.MessageDelta, eventkind.MessageReasoning:
		var p events.MessageDeltaEvent // message.reasoning has the same payload
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		if !e.run || p.Text == "" {
			return nil, nil
		}
		if e.turn == nil || e.turn.over() {
			out = e.endTurn(out)
			out = e.beginTurn(out)
		}
		if ev.Kind == eventkind.MessageDelta {
			e.turn.text.WriteString(p.Text)
			out = append(out, TextDelta{Text: p.Text})
		} else {
			e.turn.reasoning.WriteString(p.Text)
			out = append(out, ReasoningDelta{Text: p.Text})
		}

	case eventkind.StepDone:
		var p events.StepDoneEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		if !e.run {
			return nil, nil
		}
		if e.turn == nil || e.turn.over() {
			out = e.endTurn(out)
			out = e.beginTurn(out)
		}
		out, p.Reasoning = e.catchUp(out, &e.turn.reasoning, p.Reasoning, false)
		out, p.Text = e.catchUp(out, &e.turn.text, p.Text, true)
		if p.StopReason == events.StepDoneStopReasonError {
			e.turn.failed = true
			break
		}
		out = e.stepEnd(out, p)
		if len(p.ToolCalls) == 0 {
			out = e.endTurn(out)
		}

	case eventkind.ToolCall:
		var p events.ToolCallEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		if t := e.turn; e.run && t != nil && t.stepEnded && !t.begun[p.CallID] {
			t.begun[p.CallID] = true
			out = append(out, ToolCallBegin{ToolCallID: p.CallID, Name: p.Name, Arguments: events.ArgsJSON(p.Args)})
		}

	case eventkind.ToolResult:
		var p events.ToolResultEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		t := e.turn
		if !e.run || t == nil || !t.stepEnded || t.answered[p.CallID] {
			return nil, nil
		}
		out = e.answer(out, p.CallID, p.Name, p.Content(), p.OK)
		if t.allAnswered() {
			out = e.endTurn(out)
		}

	case eventkind.MessageDone:
		if e.run {
			out = e.endTurn(out)
		}

	case eventkind.Error:
		var p events.ErrorEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		if e.run && p.Message != "" {
			e.errMsg = p.Message
		}

	case eventkind.TurnDone:
		var p events.TurnDoneEvent
		if err := events.DecodePayload(ev, &p); err != nil {
			return nil, err
		}
		// A queued turn that never started ends too; it is not this run.
		if !e.run || p.TurnID != e.turnID {
			return nil, nil
		}
		out = e.endRun(out, p.Reason)
	}
	return lines(out)
}

func lines(evs []Event) ([][]byte, error) {
	out := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		b, err := EncodeEventLine(ev)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (e *Encoder) beginTurn(out []Event) []Event {
	e.turn = &turn{index: e.turns, begun: map[string]bool{}, answered: map[string]bool{}}
	e.turns++
	return append(out, TurnBegin{Turn: e.turn.index})
}

// catchUp makes the deltas streamed so far add up to whole, the text a
// step.done reports: what the log's deltas lack (none were stored, or the
// stream joined late) is sent as one more delta. When the deltas are not a
// prefix of whole, what was streamed wins, so the sum still holds.
func (e *Encoder) catchUp(out []Event, streamed *strings.Builder, whole string, text bool) ([]Event, string) {
	sofar := streamed.String()
	rest, ok := strings.CutPrefix(whole, sofar)
	if !ok {
		return out, sofar
	}
	if rest != "" {
		streamed.WriteString(rest)
		if text {
			out = append(out, TextDelta{Text: rest})
		} else {
			out = append(out, ReasoningDelta{Text: rest})
		}
	}
	return out, whole
}

// stepEnd sends the StepEnd of the open turn.
func (e *Encoder) stepEnd(out []Event, p events.StepDoneEvent) []Event {
	t := e.turn
	t.stepEnded = true
	t.calls = p.ToolCalls
	se := StepEnd{Content: p.Text, ReasoningContent: p.Reasoning, ToolCalls: make([]ToolCall, 0, len(p.ToolCalls))}
	for _, c := range p.ToolCalls {
		se.ToolCalls = append(se.ToolCalls, ToolCall{ID: c.ID, Type: "function", Function: FunctionCall{Name: c.Name, Arguments: events.ArgsJSON(c.Args)}})
	}
	if u := p.Usage; u != nil {
		se.Usage = &Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	}
	e.last, e.haveLast = se, true
	return append(out, se)
}

// answer sends a call's ToolCallBegin (unless sent: a denied call has no
// tool.call) and its ToolResult.
func (e *Encoder) answer(out []Event, id, name, content string, ok bool) []Event {
	t := e.turn
	if !t.begun[id] {
		t.begun[id] = true
		args := "{}"
		for _, c := range t.calls {
			if c.ID == id {
				args = events.ArgsJSON(c.Args)
				if name == "" {
					name = c.Name
				}
			}
		}
		out = append(out, ToolCallBegin{ToolCallID: id, Name: name, Arguments: args})
	}
	t.answered[id] = true
	return append(out, ToolResult{ToolCallID: id, Name: name, Content: content, OK: ok})
}

// over reports whether the turn's provider call is over: it ended or
// failed.
func (t *turn) over() bool { return t.stepEnded || t.failed }

func (t *turn) allAnswered() bool {
	for _, c := range t.calls {
		if !t.answered[c.ID] {
			return false
		}
	}
	return true
}

// endTurn closes the open turn, first sending what the log lacks: the
// StepEnd of a call cut off (or of a command's answer), and the results of
// calls left unanswered. A failed call's turn closes without a line.
func (e *Encoder) endTurn(out []Event) []Event {
	t := e.turn
	if t == nil {
		return out
	}
	if t.failed {
		e.turn = nil
		return out
	}
	if !t.stepEnded {
		out = e.stepEnd(out, events.StepDoneEvent{Text: t.text.String(), Reasoning: t.reasoning.String()})
	}
	for _, c := range t.calls {
		if !t.answered[c.ID] {
			msg := notRun
			if t.begun[c.ID] {
				msg = cutOff
			}
			out = e.answer(out, c.ID, c.Name, msg, false)
		}
	}
	e.turn = nil
	return append(out, TurnEnd{Turn: t.index, Stopped: len(t.calls) == 0})
}

// endRun closes the open run: RunEnd repeats its last StepEnd and says how
// the run ended (reason is turn.done's; "" when a new run began before this
// one's turn.done, which the log never does, so it is reported as
// interrupted) with the run's last error message.
func (e *Encoder) endRun(out []Event, reason string) []Event {
	if t := e.turn; t != nil && !t.stepEnded && reason == events.TurnDoneReasonError {
		t.failed = true // the open provider call failed with the run
	}
	out = e.endTurn(out)
	end := RunEnd{ToolCalls: []ToolCall{}}
	if e.haveLast {
		l := e.last
		end = RunEnd{Content: l.Content, ToolCalls: l.ToolCalls, ReasoningContent: l.ReasoningContent, Usage: l.Usage}
	}
	if reason == "" {
		reason = "interrupted"
	}
	end.StopReason = reason
	// A run that completed reports no error (a denial it went on from is
	// the model's business); one that did not carries its last error, or
	// says that the log has none.
	if reason != "complete" {
		end.Error = e.errMsg
		if end.Error == "" && reason == "error" {
			end.Error = runFailed
		}
	}
	e.run, e.turnID, e.errMsg = false, "", ""
	return append(out, end)
}
