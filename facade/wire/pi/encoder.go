package pi

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/events"
)

// Header describes the session a stream renders; it is the session header
// line. Provider and Model, when known, name the session's model: they fill
// the first assistant message_start, before a step.done has said which
// model answered.
type Header struct {
	SessionID string
	Timestamp time.Time // when the session was created
	Cwd       string    // its working directory, absolute
	Provider  string
	Model     string
}

// The provider, model and api of an assistant message that did not come from
// a provider call (a command's answer).
const (
	CommandProvider = "trellis"
	CommandModel    = "command"
)

// The result of a tool call its turn ended without answering: it never
// ran, or it was running.
const (
	notRun = "not run: the turn ended"
	cutOff = "the turn ended before the tool returned"
)

// providerFailed is the errorMessage of a failed provider call whose error
// event is missing.
const providerFailed = "the model provider failed"

// MaxPartialResult bounds the output a tool_execution_update carries: the
// latest bytes of what the tool printed so far (pi's partialResult is
// cumulative, not a delta; pi's own tools cap it similarly).
const MaxPartialResult = 50 << 10

// API returns the pi api name for one of our provider names.
func API(provider string) string {
	switch provider {
	case "openai":
		return "openai-completions"
	case "anthropic":
		return "anthropic-messages"
	case "", CommandProvider:
		return "trellis"
	}
	return "trellis-" + provider
}

// Encoder renders one session's events, fed in seq order, as "json" (pi)
// lines. It is stateful and not safe for concurrent use.
//
// Runs (turn.started to its turn.done) render as agent_start … agent_end,
// agent_settled; queue and compaction events render whenever they come. A
// queued prompt that starts right after a turn ended normally continues that
// run, as pi delivers a follow-up within the same agent run: the ended turn's
// turn.done with prompts queued holds agent_end back, and the next
// turn.dequeued{started} makes the dequeued turn's events turns of the same
// run; any other event in between ends the run first. A turn that ended
// interrupted or failed always ends its run (pi's loop stops there too).
// Events of a run whose turn.started the encoder did not see are skipped, so
// a rendering must be fed from the start of a run (best: of the session, so
// the queue is known). Where the log lacks an event the order needs, the
// encoder closes what is open: deltas outside a provider call (a command's
// answer) form an assistant message of their own, a call cut off without
// step.done ends "aborted" (or "error"), a tool call left unanswered gets an
// error result, and a run without any provider call gets an empty assistant
// message, so every turn_end has one.
type Encoder struct {
	header          Header
	provider, model string // the model that answered last, for message_start

	run        *run
	queue      []queued
	compaction string // the open compaction's reason, "" when none
}

type queued struct{ turnID, text string }

// run is an open agent run.
type run struct {
	turnID    string
	messages  []Message // ended in this run, in order
	turn      *turn     // the open pi turn
	turns     int       // pi turns of the current Trellis turn
	lastError string    // the message of the run's last error event
	// between is set once the run's Trellis turn ended with prompts queued:
	// agent_end waits for the next one to start (next is its turn id once
	// turn.dequeued{started} named it).
	between bool
	next    string
	aborted bool // the last Trellis turn was interrupted
}

// turn is an open pi turn: one provider call and its tool calls.
type turn struct {
	assistant   *assistant // nil until the call's message starts
	toolResults []Message
	calls       []events.StepToolCall
	started     map[string]bool // tool_execution_start sent
	answered    map[string]bool
	args        map[string]json.RawMessage
	output      map[string]string // each running call's output so far
}

// assistant is the assistant message of a turn.
type assistant struct {
	msg          Message
	ended        bool
	block        int  // the open text/thinking block's index, -1 when none
	pendingError bool // step.done{error} waits for its error event
}

// NewEncoder returns an encoder for one stream of the session h describes.
func NewEncoder(h Header) *Encoder {
	return &Encoder{header: h, provider: h.Provider, model: h.Model}
}

// Begin returns the line that opens a stream: the session header.
func (e *Encoder) Begin() ([][]byte, error) {
	b, err := EncodeEventLine(SessionHeader{
		Version: Version, ID: e.header.SessionID,
		Timestamp: e.header.Timestamp.UTC().Format(events.TimeFormat), Cwd: e.header.Cwd,
	})
	if err != nil {
		return nil, err
	}
	return [][]byte{b}, nil
}

// Encode returns the lines ev renders as, possibly none. An error means the
// event's payload could not be read; the encoder's state is unchanged and
// the caller may go on with the next event.
func (e *Encoder) Encode(ev events.Event) ([][]byte, error) {
	var out []Event
	payload, err := e.decode(ev)
	if err != nil {
		return nil, err
	}
	ts := ev.TS.UnixMilli()
	// A failed call's message ends with the error event that follows its
	// step.done; should the run go on without one, with a generic message.
	if r := e.run; r != nil && r.turn != nil && r.turn.assistant != nil && r.turn.assistant.pendingError && runKinds[ev.Kind] {
		msg := providerFailed
		if p, ok := payload.(events.ErrorEvent); ok {
			msg = p.Message
		}
		out = e.finishError(out, msg)
	}
	if r := e.run; r != nil && r.between && !e.continues(r, payload) {
		out = e.closeRun(out)
	}

	switch p := payload.(type) {
	case events.TurnStartedEvent:
		out = e.closeCompaction(out, true, nil)
		if r := e.run; r != nil && r.between && r.next == p.TurnID {
			r.turnID, r.turns, r.lastError, r.between, r.next = p.TurnID, 0, "", false, ""
			break
		}
		if e.run != nil {
			out = e.endRun(out, events.TurnDoneReasonInterrupted, ts)
		}
		e.run = &run{turnID: p.TurnID}
		out = append(out, AgentStart{})

	case events.MessageUserEvent:
		r := e.run
		if r == nil {
			break
		}
		if r.turn == nil {
			out = e.startTurn(out)
		}
		m := Message{Role: RoleUser, Content: []Content{{Type: ContentText, Text: p.Text}}, Timestamp: ts}
		r.messages = append(r.messages, m)
		out = append(out, MessageStart{Message: m}, MessageEnd{Message: m})

	case events.StepStartedEvent:
		r := e.run
		if r == nil {
			break
		}
		if r.turn != nil && r.turn.assistant != nil {
			out = e.endTurn(out, StopAborted, ts)
		}
		if r.turn == nil {
			out = e.startTurn(out)
		}
		out = e.startAssistant(out, e.provider, e.model, ts)

	case textChunk:
		if e.run == nil || p.text == "" {
			break
		}
		out = e.ensureAssistant(out, ts)
		out = e.chunk(out, p.kind, p.text)

	case events.StepDoneEvent:
		if e.run == nil {
			break
		}
		out = e.ensureAssistant(out, ts)
		out = e.stepDone(out, p)

	case events.ErrorEvent:
		if e.run != nil {
			e.run.lastError = p.Message
		}

	case events.ToolCallEvent:
		t := e.openTurn()
		if t == nil || t.started[p.CallID] {
			break
		}
		t.started[p.CallID] = true
		t.args[p.CallID] = p.Args
		out = append(out, ToolExecutionStart{ToolCallID: p.CallID, ToolName: p.Name, Args: argsObject(p.Args)})

	case events.ToolProgressEvent:
		t := e.openTurn()
		if t == nil || !t.started[p.CallID] || t.answered[p.CallID] {
			break
		}
		acc := tail(t.output[p.CallID]+p.Chunk, MaxPartialResult)
		t.output[p.CallID] = acc
		out = append(out, ToolExecutionUpdate{
			ToolCallID: p.CallID, ToolName: p.Name, Args: argsObject(t.args[p.CallID]),
			PartialResult: textOutput(acc),
		})

	case events.ToolResultEvent:
		t := e.openTurn()
		if t == nil || t.assistant == nil || !t.assistant.ended || t.answered[p.CallID] {
			break
		}
		out = e.answer(out, p.CallID, p.Name, p.Content(), !p.OK, ts)
		if t.allAnswered() {
			out = e.endTurn(out, StopStop, ts)
		}

	case events.MessageDoneEvent:
		if e.run != nil && e.run.turn != nil {
			out = e.endTurn(out, StopStop, ts)
		}

	case events.TurnDoneEvent:
		if e.run == nil || p.TurnID != e.run.turnID {
			break // a queued turn that never started, not this run
		}
		out = e.endRun(out, p.Reason, ts)

	case events.TurnQueuedEvent:
		e.queue = append(e.queue, queued{p.TurnID, p.Prompt})
		out = append(out, e.queueUpdate())

	case events.TurnDequeuedEvent:
		for i, q := range e.queue {
			if q.turnID == p.TurnID {
				e.queue = append(e.queue[:i:i], e.queue[i+1:]...)
				out = append(out, e.queueUpdate())
				break
			}
		}
		if r := e.run; r != nil && r.between && p.Reason == events.TurnDequeuedReasonStarted {
			r.next = p.TurnID
		}

	case events.CompactionStartedEvent:
		out = e.closeCompaction(out, true, nil)
		e.compaction = "manual"
		if p.Reason == "auto" {
			e.compaction = "threshold"
		}
		out = append(out, CompactionStart{Reason: e.compaction})

	case events.CompactionEvent:
		if e.compaction == "" {
			e.compaction = "manual"
			if p.Auto {
				e.compaction = "threshold"
			}
			out = append(out, CompactionStart{Reason: e.compaction})
		}
		out = e.closeCompaction(out, false, &p)
	}
	return lines(out)
}

// continues reports whether payload keeps run r, whose Trellis turn ended
// with prompts queued, open for the next one: the queue's own events (the
// dequeue that starts a queued prompt, once), the dequeued turn's
// turn.started, compaction, and the kinds the encoder does not render.
func (e *Encoder) continues(r *run, payload any) bool {
	switch p := payload.(type) {
	case nil, events.TurnQueuedEvent, events.CompactionStartedEvent, events.CompactionEvent:
		return true
	case events.TurnDequeuedEvent:
		return p.Reason == events.TurnDequeuedReasonStarted && r.next == "" && e.queued(p.TurnID)
	case events.TurnStartedEvent:
		return r.next != "" && p.TurnID == r.next
	}
	return false
}

// queued reports whether turn id waits in the queue.
func (e *Encoder) queued(id string) bool {
	for _, q := range e.queue {
		if q.turnID == id {
			return true
		}
	}
	return false
}

// runKinds are the kinds that belong to a run (the queue and compaction
// events come from outside it).
var runKinds = map[string]bool{
	eventkind.TurnStarted: true, eventkind.MessageUser: true, eventkind.StepStarted: true,
	eventkind.MessageDelta: true, eventkind.MessageReasoning: true, eventkind.StepDone: true, eventkind.Error: true,
	eventkind.ToolCall: true, eventkind.ToolProgress: true, eventkind.ToolResult: true,
	eventkind.MessageDone: true, eventkind.TurnDone: true,
}

// textChunk is a message.delta or message.reasoning payload.
type textChunk struct {
	kind string // ContentText or ContentThinking
	text string
}

// decode reads the payload of the kinds the encoder renders; other kinds
// give nil.
func (e *Encoder) decode(ev events.Event) (any, error) {
	var err error
	switch ev.Kind {
	case eventkind.TurnStarted:
		var p events.TurnStartedEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.MessageUser:
		var p events.MessageUserEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.StepStarted:
		var p events.StepStartedEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.MessageDelta, eventkind.MessageReasoning:
		var p events.MessageDeltaEvent // message.reasoning has the same payload
		err = events.DecodePayload(ev, &p)
		kind := ContentText
		if ev.Kind == eventkind.MessageReasoning {
			kind = ContentThinking
		}
		return textChunk{kind, p.Text}, err
	case eventkind.StepDone:
		var p events.StepDoneEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.Error:
		var p events.ErrorEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.ToolCall:
		var p events.ToolCallEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.ToolProgress:
		var p events.ToolProgressEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.ToolResult:
		var p events.ToolResultEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.MessageDone:
		var p events.MessageDoneEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.TurnDone:
		var p events.TurnDoneEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.TurnQueued:
		var p events.TurnQueuedEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.TurnDequeued:
		var p events.TurnDequeuedEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.CompactionStarted:
		var p events.CompactionStartedEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	case eventkind.Compaction:
		var p events.CompactionEvent
		err = events.DecodePayload(ev, &p)
		return p, err
	}
	return nil, nil
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

// openTurn returns the open turn of the open run, or nil.
func (e *Encoder) openTurn() *turn {
	if e.run == nil {
		return nil
	}
	return e.run.turn
}

func (e *Encoder) startTurn(out []Event) []Event {
	e.run.turn = &turn{
		started: map[string]bool{}, answered: map[string]bool{},
		args: map[string]json.RawMessage{}, output: map[string]string{},
	}
	e.run.turns++
	return append(out, TurnStart{})
}

// startAssistant opens the turn's assistant message.
func (e *Encoder) startAssistant(out []Event, provider, model string, ts int64) []Event {
	a := &assistant{block: -1, msg: Message{
		Role: RoleAssistant, Content: []Content{}, API: API(provider), Provider: provider, Model: model,
		StopReason: StopPending, Timestamp: ts,
	}}
	e.run.turn.assistant = a
	return append(out, MessageStart{Message: a.msg})
}

// ensureAssistant makes sure an assistant message is open to stream into:
// deltas without step.started (a command's answer) open one of their own.
func (e *Encoder) ensureAssistant(out []Event, ts int64) []Event {
	r := e.run
	if r.turn != nil && r.turn.assistant != nil && !r.turn.assistant.ended {
		return out
	}
	if r.turn != nil && r.turn.assistant != nil {
		out = e.endTurn(out, StopStop, ts)
	}
	if r.turn == nil {
		out = e.startTurn(out)
	}
	return e.startAssistant(out, CommandProvider, CommandModel, ts)
}

// chunk streams a text or thinking delta, opening a block when the kind
// changes.
func (e *Encoder) chunk(out []Event, kind, text string) []Event {
	a := e.run.turn.assistant
	if a.block < 0 || a.msg.Content[a.block].Type != kind {
		out = e.closeBlock(out)
		a.block = len(a.msg.Content)
		a.msg.Content = append(a.msg.Content, Content{Type: kind})
		start := TextStart
		if kind == ContentThinking {
			start = ThinkingStart
		}
		out = append(out, MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: AssistantMessageEvent{Type: start, ContentIndex: a.block}})
	}
	c := &a.msg.Content[a.block]
	delta := TextDelta
	if kind == ContentThinking {
		c.Thinking += text
		delta = ThinkingDelta
	} else {
		c.Text += text
	}
	return append(out, MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: AssistantMessageEvent{Type: delta, ContentIndex: a.block, Delta: text}})
}

// closeBlock ends the open text or thinking block.
func (e *Encoder) closeBlock(out []Event) []Event {
	a := e.run.turn.assistant
	if a.block < 0 {
		return out
	}
	c := a.msg.Content[a.block]
	ame := AssistantMessageEvent{Type: TextEnd, ContentIndex: a.block, Content: c.Text}
	if c.Type == ContentThinking {
		ame = AssistantMessageEvent{Type: ThinkingEnd, ContentIndex: a.block, Content: c.Thinking}
	}
	a.block = -1
	return append(out, MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: ame})
}

// streamed returns the concatenated blocks of one kind.
func (a *assistant) streamed(kind string) string {
	var b strings.Builder
	for _, c := range a.msg.Content {
		if c.Type == kind {
			b.WriteString(c.Text + c.Thinking)
		}
	}
	return b.String()
}

// stepDone completes the assistant message with the provider call's
// outcome: its tool calls stream as toolcall blocks, then message_end (for
// a failed call, once its error event says why).
func (e *Encoder) stepDone(out []Event, p events.StepDoneEvent) []Event {
	t := e.run.turn
	a := t.assistant
	// What the log's deltas lack of the step's whole texts (none were
	// stored, or the stream joined late) streams now; when the deltas are
	// not a prefix of the whole, what was streamed wins.
	for _, k := range []struct{ kind, whole string }{{ContentThinking, p.Reasoning}, {ContentText, p.Text}} {
		if rest, ok := strings.CutPrefix(k.whole, a.streamed(k.kind)); ok && rest != "" {
			out = e.chunk(out, k.kind, rest)
		}
	}
	out = e.closeBlock(out)
	if p.Provider != "" {
		e.provider, e.model = p.Provider, p.Model
	}
	a.msg.API, a.msg.Provider, a.msg.Model = API(p.Provider), p.Provider, p.Model
	if u := p.Usage; u != nil {
		a.msg.Usage = Usage{Input: u.InputTokens, Output: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	}
	t.calls = p.ToolCalls
	for _, c := range p.ToolCalls {
		i := len(a.msg.Content)
		block := Content{Type: ContentToolCall, ID: c.ID, Name: c.Name, Arguments: argsObject(c.Args)}
		a.msg.Content = append(a.msg.Content, block)
		out = append(out,
			MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: AssistantMessageEvent{Type: ToolCallStart, ContentIndex: i, ID: c.ID, ToolName: c.Name}},
			MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: AssistantMessageEvent{Type: ToolCallDelta, ContentIndex: i, Delta: events.ArgsJSON(c.Args)}},
			MessageUpdate{Usage: a.msg.Usage, AssistantMessageEvent: AssistantMessageEvent{Type: ToolCallEnd, ContentIndex: i, ToolCall: block}},
		)
	}
	a.msg.StopReason = stopReason(p.StopReason)
	if a.msg.StopReason == StopError {
		a.pendingError = true
		return out
	}
	out = e.endAssistant(out)
	if len(p.ToolCalls) == 0 {
		out = e.endTurn(out, StopStop, 0)
	}
	return out
}

// finishError ends a failed call's message with msg and closes its turn.
func (e *Encoder) finishError(out []Event, msg string) []Event {
	a := e.run.turn.assistant
	a.pendingError = false
	a.msg.ErrorMessage = msg
	out = e.endAssistant(out)
	return e.endTurn(out, StopError, 0)
}

func (e *Encoder) endAssistant(out []Event) []Event {
	a := e.run.turn.assistant
	a.ended = true
	e.run.messages = append(e.run.messages, a.msg)
	return append(out, MessageEnd{Message: a.msg})
}

// answer sends a call's tool_execution_start (unless sent: a denied call
// has no tool.call), its tool_execution_end and its toolResult message.
func (e *Encoder) answer(out []Event, id, name, content string, isError bool, ts int64) []Event {
	t := e.run.turn
	if !t.started[id] {
		t.started[id] = true
		for _, c := range t.calls {
			if c.ID == id {
				t.args[id] = c.Args
				if name == "" {
					name = c.Name
				}
			}
		}
		out = append(out, ToolExecutionStart{ToolCallID: id, ToolName: name, Args: argsObject(t.args[id])})
	}
	t.answered[id] = true
	delete(t.output, id)
	m := Message{Role: RoleToolResult, ToolCallID: id, ToolName: name, Content: textOutput(content).Content, IsError: isError, Timestamp: ts}
	t.toolResults = append(t.toolResults, m)
	e.run.messages = append(e.run.messages, m)
	return append(out,
		ToolExecutionEnd{ToolCallID: id, ToolName: name, Result: textOutput(content), IsError: isError},
		MessageStart{Message: m}, MessageEnd{Message: m})
}

func (t *turn) allAnswered() bool {
	for _, c := range t.calls {
		if !t.answered[c.ID] {
			return false
		}
	}
	return true
}

// endTurn closes the open turn. An assistant message still streaming ends
// with stop; one never started is an empty message with stop; calls left
// unanswered get an error result.
func (e *Encoder) endTurn(out []Event, stop string, ts int64) []Event {
	r := e.run
	t := r.turn
	if t == nil {
		return out
	}
	if t.assistant == nil {
		out = e.startAssistant(out, e.provider, e.model, ts)
	}
	a := t.assistant
	if a.pendingError {
		msg := r.lastError
		if msg == "" {
			msg = providerFailed
		}
		a.pendingError = false
		a.msg.ErrorMessage = msg
		out = e.endAssistant(out)
	}
	if !a.ended {
		out = e.closeBlock(out)
		a.msg.StopReason = stop
		if stop == StopError {
			a.msg.ErrorMessage = r.lastError
			if a.msg.ErrorMessage == "" {
				a.msg.ErrorMessage = providerFailed
			}
		}
		out = e.endAssistant(out)
	}
	for _, c := range t.calls {
		if !t.answered[c.ID] {
			msg := notRun
			if t.started[c.ID] {
				msg = cutOff
			}
			out = e.answer(out, c.ID, c.Name, msg, true, ts)
		}
	}
	r.turn = nil
	return append(out, TurnEnd{Message: a.msg, ToolResults: t.toolResults})
}

// endRun ends the open run's Trellis turn after turn.done with reason, and
// the run with it unless the turn completed with prompts queued (pi's loop
// goes on with a follow-up; it stops after an aborted or failed message).
func (e *Encoder) endRun(out []Event, reason string, ts int64) []Event {
	r := e.run
	stop := StopStop
	switch reason {
	case events.TurnDoneReasonInterrupted:
		stop = StopAborted
	case events.TurnDoneReasonError:
		stop = StopError
	}
	if r.turn == nil && r.turns == 0 {
		out = e.startTurn(out)
	}
	out = e.endTurn(out, stop, ts)
	// Interrupted while tools ran (the run's last message is a tool
	// result): pi's loop goes on to its next provider call, which the abort
	// ends at once, so the run ends with an empty aborted assistant message.
	if n := len(r.messages); reason == events.TurnDoneReasonInterrupted && n > 0 && r.messages[n-1].Role == RoleToolResult {
		out = e.startTurn(out)
		out = e.startAssistant(out, e.provider, e.model, ts)
		out = e.endTurn(out, StopAborted, ts)
	}
	r.aborted = reason == events.TurnDoneReasonInterrupted
	if stop == StopStop && len(e.queue) > 0 {
		r.between = true
		return out
	}
	return e.closeRun(out)
}

// closeRun ends the open run: agent_end with every message of the run, then
// agent_settled.
func (e *Encoder) closeRun(out []Event) []Event {
	r := e.run
	e.run = nil
	return append(out,
		AgentEnd{Messages: r.messages, WillRetry: false},
		AgentSettled{Aborted: r.aborted})
}

func (e *Encoder) queueUpdate() QueueUpdate {
	q := QueueUpdate{Steering: []string{}, FollowUp: make([]string, 0, len(e.queue))}
	for _, p := range e.queue {
		q.FollowUp = append(q.FollowUp, p.text)
	}
	return q
}

// closeCompaction ends the open compaction, if any; aborted when something
// else started before it finished. A finished compaction (done non-nil)
// carries its result, as pi always sends one: the summary, the tokens
// before, and Trellis's figures as details. firstKeptEntryId names pi's
// session entries, which a Trellis log does not have: it is "".
func (e *Encoder) closeCompaction(out []Event, aborted bool, done *events.CompactionEvent) []Event {
	if e.compaction == "" {
		return out
	}
	reason := e.compaction
	e.compaction = ""
	end := CompactionEnd{Reason: reason, Aborted: aborted, WillRetry: false}
	if done != nil && !aborted {
		b, err := json.Marshal(CompactionResult{
			Summary: done.Summary, FirstKeptEntryID: "", TokensBefore: done.Before,
			Details: CompactionDetails{TokensAfter: done.After, SummaryChars: done.SummaryChars},
		})
		if err == nil {
			end.Result = b
		}
	}
	return append(out, end)
}

// stopReason maps a step.done stop reason to pi's.
func stopReason(s string) string {
	switch s {
	case events.StepDoneStopReasonToolUse:
		return StopToolUse
	case events.StepDoneStopReasonLength:
		return StopLength
	case events.StepDoneStopReasonError:
		return StopError
	case events.StepDoneStopReasonAborted:
		return StopAborted
	}
	return StopStop
}

func textOutput(s string) ToolOutput {
	return ToolOutput{Content: []Content{{Type: ContentText, Text: s}}}
}

func argsObject(args json.RawMessage) json.RawMessage {
	if !isObject(args) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(events.ArgsJSON(args))
}

// tail returns the last max bytes of s, cut at a rune boundary.
func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
