package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/telemetry"
)

const (
	// DefaultMaxToolRounds is the number of provider calls a turn may make
	// when Settings.MaxToolRounds is 0.
	DefaultMaxToolRounds = 50
	// MaxDenials is how many denied tool calls a turn survives; the next
	// one ends it with reason "denied".
	MaxDenials = 3
)

// ErrMissingDependency is returned by Run when the Loop lacks one of its
// dependencies.
var ErrMissingDependency = errors.New("agent: the loop is missing a dependency")

// Settings tune the model calls of a turn. Zero values mean defaults.
type Settings struct {
	Model         string // "" = the provider's DefaultModel, if it lists models
	System        string
	MaxTokens     int
	MaxToolRounds int    // provider calls per turn; 0 = DefaultMaxToolRounds
	Effort        string // llm.Request.Effort
}

// Loop runs the turns of one session. All fields but Settings and Guard
// are required. A Loop runs one turn at a time.
type Loop struct {
	Provider llm.Provider
	Tools    Tools
	Gate     Gate
	Emitter  Emitter
	History  History
	Settings Settings
	// Guard, when set, is asked right before each provider call and each
	// tool run whether the turn may still act (a daemon checks that it
	// still owns the session): an error stops the turn there, and the
	// call or the tool does not start.
	Guard func() error
	// Prices, when set, prices each provider call for its usage event;
	// without it every call is unpriced.
	Prices Pricer
	// Budget, when set, keeps the turn's provider calls within the
	// session's budget: it is asked right before each call (never
	// mid-stream, never mid-tool), and a call that would pass it pauses the
	// turn there (turn.paused) until the budget is raised (turn.resumed) or
	// the turn is interrupted.
	Budget Budget
	// Checkpoints, when set, records the workdir right before each call
	// of a tool that may change it (Tools' WorkdirChanger says which) and
	// at the end of the turn.
	Checkpoints Checkpoints
}

// Estimate is what the next provider call is expected to add to the
// session's spending before it is made: its input, estimated from the
// request, and that input's price.
type Estimate struct {
	Tokens       int64
	CostMicroUSD int64
}

// BudgetState is a session's budget and spending at one check.
type BudgetState struct {
	Budget events.Budget
	Spent  events.BudgetSpent
	// Reached: the next call would pass a limit, so it must wait.
	Reached bool
	// Changed is closed once the budget may have changed (raised or
	// cleared): the loop then checks again.
	Changed <-chan struct{}
}

// Budget is the session's side of the pause: its spending and limits, and
// the durable record of a pause.
type Budget interface {
	// Check reports the budget and spending for the next call of turnID.
	Check(ctx context.Context, turnID string, next Estimate) (BudgetState, error)
	// Paused records, durably, that turnID is paused at st (before the
	// loop emits turn.paused); Resumed drops that record (before
	// turn.resumed).
	Paused(ctx context.Context, turnID string, st BudgetState) error
	Resumed(ctx context.Context, turnID string) error
	// Detach is asked when a paused turn's context ends: true when the
	// turn must stay paused for a later owner of the session (the daemon
	// is stopping, or lost the session), so the loop returns without
	// ending it (Result.Reason ReasonDetached, no turn.done).
	Detach() bool
}

// ReasonDetached is Result.Reason of a paused turn left open for the
// session's next owner: it emitted no turn.done.
const ReasonDetached = "detached"

// Pricer prices a provider call from its usage: what it cost in
// micro-US-dollars, and whether the price table knows the vendor's model
// (a model it does not know costs 0).
type Pricer interface {
	Cost(vendor, model string, u llm.Usage) (microUSD int64, priced bool)
}

// Turn is one prompt to answer. The caller has already emitted turn.started
// and message.user for it.
type Turn struct {
	ID     string // "t-…"
	Prompt string // the user message as the model reads it
	// InterruptedBy names who interrupted the turn, for its turn.done;
	// nil (the func, or its answer) when nobody did or no principal did.
	InterruptedBy func() *events.PrincipalRef
	// Steered, when set, hands over the user messages sent into the turn
	// (session.steer) since the loop last asked, in the order they came.
	// The loop asks right before each model call, and again when the
	// model's answer would end the turn (ending true): what it gets then
	// continues the turn with one more model call. Asked with ending and
	// answering none, the turn takes no more: the caller gives later text
	// a turn of its own.
	Steered func(ending bool) []Steer
	// Notices, when set, hands over the lines queued for the model
	// (session.notice) since the loop last asked; the loop asks right
	// before each model call, and the model reads each as a message
	// "[system] " + line.
	Notices func() []string
	// Resume continues a turn a daemon started earlier and left paused:
	// its prompt and everything it did are already in the History and its
	// turn.paused in the log, so the loop records no prompt and, while the
	// budget stays reached, emits no second turn.paused.
	Resume bool
}

// Steer is a user message sent into a running turn.
type Steer struct {
	Text string
	// Principal sent it; nil when none did.
	Principal *events.PrincipalRef
}

// Result summarises a finished turn.
type Result struct {
	Reason string    // the turn.done reason
	Text   string    // the whole answer text (as in message.done)
	Usage  llm.Usage // summed over the provider calls
	// CostMicroUSD is the cost of the provider calls the price table
	// priced, in micro-US-dollars.
	CostMicroUSD int64
	Steps        int // provider calls made
	Denials      int
}

// Run answers turn: it appends the prompt to the History, then calls the
// provider and runs tools until the turn ends, emitting every event from the
// first step.started to turn.done. Cancelling ctx interrupts the turn: the
// provider call, the gate and the running tool get the cancelled context,
// and the turn ends at once with turn.done{interrupted}.
//
// The outcome of the turn is in Result.Reason. Run returns an error only when
// the turn could not be recorded: the Emitter or the History failed. After a
// History failure the turn still ends with error{internal} and
// turn.done{error}; after an Emitter failure nothing more is emitted and the
// caller must close the turn itself — except that a tool.call the Emitter
// held (store_unavailable: shown to the clients, stored later) gets its
// failed tool.result. A call runs only once its tool.call was emitted
// without error, that is stored.
func (l *Loop) Run(ctx context.Context, turn Turn) (Result, error) {
	if l.Provider == nil || l.Tools == nil || l.Gate == nil || l.Emitter == nil || l.History == nil {
		return Result{}, ErrMissingDependency
	}
	r := &turnRun{
		loop:     l,
		turn:     turn,
		ctx:      ctx,
		bg:       context.WithoutCancel(ctx),
		provider: l.Provider.Name(),
		model:    l.Settings.Model,
	}
	if lister, ok := l.Provider.(llm.ModelLister); ok && r.model == "" {
		r.model = lister.DefaultModel()
	}
	return r.run()
}

// turnRun is the state of one Run.
type turnRun struct {
	loop     *Loop
	turn     Turn
	ctx      context.Context // cancelled by an interrupt
	bg       context.Context // not cancelled: for what must be recorded anyway
	provider string
	model    string

	history   []llm.Message
	paused    bool            // the turn's turn.paused is out and no turn.resumed yet
	text      strings.Builder // the answer text of the whole turn
	lastUsage *llm.Usage
	res       Result
	changers  bool // a tool that may change the workdir ran (Checkpoints)

	mu         sync.Mutex // serialises emits; tool progress comes from tool goroutines
	progressOn bool       // tool.progress is accepted (a tool is running)
	emitErr    error      // the Emitter failed: emit nothing more
	historyErr error      // the History failed: end the turn
}

func (r *turnRun) run() (Result, error) {
	prior, err := r.loop.History.Messages(r.bg)
	if err != nil {
		r.historyErr = err
		return r.stop()
	}
	r.history = prior
	if !r.turn.Resume {
		r.record(llm.UserText(r.turn.Prompt))
	}
	r.paused = r.turn.Resume
	specs := r.loop.Tools.Specs(r.ctx)

	maxRounds := r.loop.Settings.MaxToolRounds
	if maxRounds <= 0 {
		maxRounds = DefaultMaxToolRounds
	}
	for step := 0; ; step++ {
		if r.broken() {
			return r.stop()
		}
		if r.ctx.Err() != nil {
			return r.finish(events.TurnDoneReasonInterrupted)
		}
		if step >= maxRounds {
			return r.finish(events.TurnDoneReasonBudget)
		}
		if reason := r.awaitBudget(specs); reason != "" {
			if reason == ReasonDetached {
				r.res.Reason = reason
				return r.res, r.emitErr
			}
			if r.broken() {
				return r.stop()
			}
			return r.finish(reason)
		}
		r.takeSteered(false)
		r.takeNotices()
		calls, reason := r.callProvider(step, specs)
		if r.broken() {
			return r.stop()
		}
		if reason != "" {
			return r.finish(reason)
		}
		if len(calls) == 0 {
			if r.takeSteered(true) {
				continue // the model reads the steered text before the turn ends
			}
			return r.finish(events.TurnDoneReasonComplete)
		}
		if reason := r.runTools(calls); reason != "" {
			if r.broken() {
				return r.stop()
			}
			return r.finish(reason)
		}
	}
}

// awaitBudget holds the turn right before a provider call while the call
// would pass the session's budget: the first time, it records the pause and
// emits turn.paused; once the budget lets the call go, turn.resumed. It
// returns "" to make the call, else the reason the turn ends (or
// ReasonDetached: it stays paused for the session's next owner).
func (r *turnRun) awaitBudget(specs []llm.ToolSpec) string {
	b := r.loop.Budget
	if b == nil {
		return ""
	}
	est := r.estimate(specs)
	for {
		st, err := b.Check(r.bg, r.turn.ID, est)
		if err != nil {
			r.emit(eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: "the session's budget could not be checked: " + err.Error()})
			return events.TurnDoneReasonError
		}
		if !st.Reached {
			if r.paused {
				if err := b.Resumed(r.bg, r.turn.ID); err != nil {
					r.emit(eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: "the turn's pause could not be cleared: " + err.Error()})
					return events.TurnDoneReasonError
				}
				r.paused = false
				r.emit(eventkind.TurnResumed, events.TurnResumedEvent{TurnID: r.turn.ID, Budget: &st.Budget, Spent: &st.Spent})
			}
			return ""
		}
		if !r.paused {
			if err := b.Paused(r.bg, r.turn.ID, st); err != nil {
				r.emit(eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: "the turn's pause could not be recorded: " + err.Error()})
				return events.TurnDoneReasonError
			}
			r.paused = true
			r.emit(eventkind.TurnPaused, events.TurnPausedEvent{TurnID: r.turn.ID, Reason: events.TurnPausedReasonBudgetReached, Budget: &st.Budget, Spent: &st.Spent})
			if r.broken() {
				return events.TurnDoneReasonError
			}
		}
		select {
		case <-st.Changed:
		case <-r.ctx.Done():
			if b.Detach() {
				return ReasonDetached
			}
			return events.TurnDoneReasonInterrupted
		}
	}
}

// estimate is the expected input of the next provider call and its price.
func (r *turnRun) estimate(specs []llm.ToolSpec) Estimate {
	n := llm.EstimateRequestTokens(llm.Request{Model: r.model, System: r.loop.Settings.System, Messages: r.history, Tools: specs})
	e := Estimate{Tokens: int64(n)}
	if r.loop.Prices != nil {
		e.CostMicroUSD, _ = r.loop.Prices.Cost(r.provider, r.model, llm.Usage{InputTokens: n})
	}
	return e
}

// takeSteered records the user messages steered into the turn since the
// last call (turn.steered, then the history), and reports whether there were
// any.
func (r *turnRun) takeSteered(ending bool) bool {
	if r.turn.Steered == nil {
		return false
	}
	steered := r.turn.Steered(ending)
	for _, st := range steered {
		r.emit(eventkind.TurnSteered, events.TurnSteeredEvent{TurnID: r.turn.ID, Text: st.Text, Principal: st.Principal})
		r.record(llm.UserText(st.Text))
	}
	return len(steered) > 0
}

// takeNotices records the lines queued for the model since the last call.
func (r *turnRun) takeNotices() {
	if r.turn.Notices == nil {
		return
	}
	for _, n := range r.turn.Notices() {
		r.record(llm.UserText("[system] " + n))
	}
}

// callProvider makes one provider call and streams it. It returns the tool
// calls to run, or the reason the turn must end.
func (r *turnRun) callProvider(step int, specs []llm.ToolSpec) ([]llm.ToolCall, string) {
	r.emit(eventkind.StepStarted, events.StepStartedEvent{Step: step})
	r.res.Steps++
	req := llm.Request{
		Model:     r.model,
		System:    r.loop.Settings.System,
		Messages:  r.history[:len(r.history):len(r.history)], // appends must not alias
		Tools:     specs,
		MaxTokens: r.loop.Settings.MaxTokens,
		Effort:    r.loop.Settings.Effort,
	}

	var text, reasoning strings.Builder
	var calls []llm.ToolCall
	var usage *llm.Usage
	var stop llm.StopReason
	obs := r.observeProvider(step)
	defer func() { obs.end(usage, stop) }()
	var stream llm.Stream
	err := r.guard()
	if err == nil {
		stream, err = r.loop.Provider.Stream(llm.WithRetryObserver(obs.ctx, r.retried), req)
	}
	if err == nil {
		defer stream.Close()
		for !r.broken() {
			var c llm.Chunk
			if c, err = stream.Next(); err != nil {
				break
			}
			obs.chunk()
			switch c.Kind {
			case llm.ChunkText:
				if c.Text != "" {
					text.WriteString(c.Text)
					r.text.WriteString(c.Text)
					r.emit(eventkind.MessageDelta, events.MessageDeltaEvent{Text: c.Text})
				}
			case llm.ChunkReasoning:
				if c.Text != "" {
					reasoning.WriteString(c.Text)
					r.emit(eventkind.MessageReasoning, events.MessageReasoningEvent{Text: c.Text})
				}
			case llm.ChunkToolCall:
				calls = append(calls, normalizeCall(c.ToolCall))
			case llm.ChunkUsage:
				u := c.Usage
				usage = &u
			case llm.ChunkStop:
				stop = c.StopReason
			}
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if r.broken() {
		return nil, ""
	}
	if err == nil && stop == llm.StopError {
		err = llm.NewError(r.provider, 0, "the model provider ended its answer with an error")
	}

	done := events.StepDoneEvent{
		Step: step, Text: text.String(), Reasoning: reasoning.String(), ToolCalls: []events.StepToolCall{},
		Provider: r.provider, Model: r.model,
	}
	if err != nil {
		obs.err = err
		obs.interrupted = r.ctx.Err() != nil
		// Keep what the model said before it was cut off; its tool calls
		// are dropped since none of them will run.
		if done.Text != "" || done.Reasoning != "" {
			r.record(llm.Message{Role: llm.RoleAssistant, Text: done.Text, Reasoning: done.Reasoning})
		}
		if r.ctx.Err() != nil {
			done.StopReason = events.StepDoneStopReasonAborted
			r.emit(eventkind.StepDone, done)
			return nil, events.TurnDoneReasonInterrupted
		}
		done.StopReason = string(llm.StopError)
		r.emit(eventkind.StepDone, done)
		if errs.CodeOf(err) == errcode.LeaseLost {
			r.emit(eventkind.Error, events.ErrorEvent{Code: errcode.LeaseLost, Message: err.Error()})
		} else {
			r.emit(eventkind.Error, events.ErrorEvent{Code: errcode.ProviderError, Message: providerMessage(r.provider, err)})
		}
		return nil, events.TurnDoneReasonError
	}

	if usage == nil { // the vendor reported none: estimate it
		out := done.Text + done.Reasoning
		for _, c := range calls {
			out += c.Name + string(c.Arguments)
		}
		usage = &llm.Usage{InputTokens: llm.EstimateRequestTokens(req), OutputTokens: llm.EstimateTokens(out)}
	}
	if stop == "" {
		stop = llm.StopEnd
		if len(calls) > 0 {
			stop = llm.StopToolUse
		}
	}
	var cost int64
	var priced bool
	if r.loop.Prices != nil {
		cost, priced = r.loop.Prices.Cost(r.provider, r.model, *usage)
	}
	obs.cost, obs.priced = cost, priced
	r.lastUsage = usage
	r.res.Usage.InputTokens += usage.InputTokens
	r.res.Usage.OutputTokens += usage.OutputTokens
	r.res.Usage.ReasoningTokens += usage.ReasoningTokens
	r.res.Usage.CacheReadTokens += usage.CacheReadTokens
	r.res.Usage.CacheWriteTokens += usage.CacheWriteTokens
	r.res.CostMicroUSD += cost
	r.emit(eventkind.Usage, events.UsageEvent{
		InputTokens: int64(usage.InputTokens), OutputTokens: int64(usage.OutputTokens), Provider: r.provider, Model: r.model,
		ReasoningTokens: int64(usage.ReasoningTokens), CacheReadTokens: int64(usage.CacheReadTokens),
		CacheWriteTokens: int64(usage.CacheWriteTokens), CostMicroUsd: cost, Priced: priced, TurnID: r.turn.ID,
	})
	for _, c := range calls {
		done.ToolCalls = append(done.ToolCalls, events.StepToolCall{ID: c.ID, Name: c.Name, Args: argsObject(c.Arguments)})
	}
	done.Usage = &events.TokenUsage{InputTokens: int64(usage.InputTokens), OutputTokens: int64(usage.OutputTokens)}
	done.StopReason = string(stop)
	r.emit(eventkind.StepDone, done)
	r.record(llm.Message{Role: llm.RoleAssistant, Text: done.Text, Reasoning: done.Reasoning, ToolCalls: calls})
	return calls, ""
}

// retried emits provider.retry for a model call about to be tried again.
func (r *turnRun) retried(t llm.Retry) {
	r.emit(eventkind.ProviderRetry, events.ProviderRetryEvent{
		TurnID: r.turn.ID, Attempt: t.Attempt, WaitMs: t.Wait.Milliseconds(), Reason: t.Reason, Status: t.Status,
		Provider: r.provider, Model: r.model, Message: providerMessage(r.provider, t.Err),
	})
}

// providerMessage is the error event's message for a failed provider call.
func providerMessage(provider string, err error) string {
	var e *errs.Error
	if errors.As(err, &e) && e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("the %s provider failed: %v", provider, err)
}

// runTools handles the calls of one provider answer in order. It returns the
// reason the turn must end, or "" to call the provider again. Every call gets
// exactly one tool.result and one tool message in the history.
func (r *turnRun) runTools(calls []llm.ToolCall) string {
	for i, c := range calls {
		if r.broken() {
			return events.TurnDoneReasonError
		}
		if r.ctx.Err() != nil {
			r.skip(calls[i:], "interrupted")
			return events.TurnDoneReasonInterrupted
		}
		if !isObject(c.Arguments) {
			telemetry.ToolCall(c.Name, "error")
			r.failCall(c, fmt.Sprintf("invalid arguments: expected a JSON object, got %s", clip(string(c.Arguments), 200)))
			continue
		}
		call := ToolCall{TurnID: r.turn.ID, CallID: c.ID, Name: c.Name, Args: c.Arguments}
		// One span per call, covering its approval and its run.
		ctx, span := telemetry.Start(r.ctx, "tool "+c.Name, trace.WithAttributes(
			attribute.String("trellis.tool.name", c.Name), attribute.String("trellis.tool.call_id", c.ID)))
		if err := r.loop.Gate.Authorize(ctx, call); err != nil {
			endToolSpan(span, c.Name, "denied", err)
			if r.ctx.Err() != nil {
				r.skip(calls[i:], "interrupted")
				return events.TurnDoneReasonInterrupted
			}
			r.res.Denials++
			r.emit(eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: err.Error()})
			r.failCall(c, "denied: "+err.Error())
			if r.res.Denials > MaxDenials {
				r.skip(calls[i+1:], "not run: the turn ended after too many denied tool calls")
				return events.TurnDoneReasonDenied
			}
			continue
		}

		// A call acts only once its tool.call is stored: a daemon that
		// cannot record it (its store is full, or another daemon took the
		// session over) must not do what nobody will find in the log.
		r.emit(eventkind.ToolCall, events.ToolCallEvent{CallID: c.ID, Name: c.Name, Args: c.Arguments})
		if r.broken() {
			endToolSpan(span, c.Name, "error", errors.New("not run: its tool.call was not recorded"))
			r.notRecorded(calls[i:])
			return events.TurnDoneReasonError
		}
		if err := r.guard(); err != nil {
			endToolSpan(span, c.Name, "error", err)
			r.emit(eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: err.Error()})
			r.skip(calls[i:], "not run: "+err.Error())
			return events.TurnDoneReasonError
		}
		r.checkpointBefore(call)
		res := r.runTool(ctx, call)
		if res.OK {
			endToolSpan(span, c.Name, "ok", nil)
		} else {
			endToolSpan(span, c.Name, "error", errors.New(res.Error))
		}
		if !res.OK && res.Code != "" {
			r.emit(eventkind.Error, events.ErrorEvent{Code: res.Code, Message: res.Error})
		}
		r.emitResult(c, res.OK, res.Output, res.Error, res.Images...)
		if res.Diff != nil {
			r.emit(eventkind.Diff, *res.Diff)
		}
		if r.ctx.Err() != nil {
			r.skip(calls[i+1:], "interrupted")
			return events.TurnDoneReasonInterrupted
		}
	}
	return ""
}

// checkpointBefore records the workdir before a call of a tool that may
// change it.
func (r *turnRun) checkpointBefore(call ToolCall) {
	if r.loop.Checkpoints == nil {
		return
	}
	if wc, ok := r.loop.Tools.(WorkdirChanger); ok && wc.ChangesWorkdir(call.Name) {
		r.changers = true
		r.loop.Checkpoints.BeforeTool(r.bg, call)
	}
}

// guard asks the Loop's Guard whether the turn may still act.
func (r *turnRun) guard() error {
	if r.loop.Guard == nil {
		return nil
	}
	return r.loop.Guard()
}

// runTool runs an allowed call, turning its progress into tool.progress
// events until it returns.
func (r *turnRun) runTool(ctx context.Context, call ToolCall) ToolResult {
	r.mu.Lock()
	r.progressOn = true
	r.mu.Unlock()
	progress := func(p Progress) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.progressOn || r.emitErr != nil {
			return // late output of a tool that already returned
		}
		stream := p.Stream
		if stream == "" {
			stream = "stdout"
		}
		r.emitLocked(eventkind.ToolProgress, events.ToolProgressEvent{
			CallID: call.CallID, Name: call.Name, Stream: stream, Chunk: p.Chunk, Truncated: p.Truncated,
		})
	}
	res := r.loop.Tools.Run(ctx, call, progress)
	r.mu.Lock()
	r.progressOn = false
	r.mu.Unlock()
	return res
}

// notRecorded answers calls that did not run because the tool.call of the
// first one could not be stored. The history gets a tool message for each,
// so that the conversation stays one the provider accepts. When that
// tool.call was held (store_unavailable: sent to the clients from memory and
// stored later under its seq), the clients saw it: it gets its failed
// tool.result too, held alike, even though the Emitter failed.
func (r *turnRun) notRecorded(calls []llm.ToolCall) {
	const msg = "not run: the call could not be recorded in the session's log, so it was not started"
	r.mu.Lock()
	held := errs.Is(r.emitErr, errcode.StoreUnavailable)
	r.mu.Unlock()
	if held {
		c := calls[0]
		// Best effort: the turn ends with the Emitter's first error.
		_ = r.loop.Emitter.Emit(r.bg, eventkind.ToolResult, events.ToolResultEvent{CallID: c.ID, Name: c.Name, OK: false, Error: ptr(msg)})
	}
	for _, c := range calls {
		r.record(llm.ToolMessage(llm.ToolResult{CallID: c.ID, Name: c.Name, Content: msg, IsError: true}))
	}
}

func ptr[T any](v T) *T { return &v }

// failCall answers a call that did not run.
func (r *turnRun) failCall(c llm.ToolCall, msg string) { r.emitResult(c, false, "", msg) }

// skip answers calls the turn will not get to.
func (r *turnRun) skip(calls []llm.ToolCall, msg string) {
	for _, c := range calls {
		r.failCall(c, msg)
	}
}

// emitResult emits tool.result and records what the model will read: the
// output and the images the tool returned.
func (r *turnRun) emitResult(c llm.ToolCall, ok bool, output, errMsg string, images ...llm.Image) {
	p := events.ToolResultEvent{CallID: c.ID, Name: c.Name, OK: ok, Output: output}
	content := output
	if !ok {
		if errMsg == "" {
			errMsg = "the tool failed"
		}
		p.Error = &errMsg
		content = errMsg
		if output != "" {
			content = output + "\n\nerror: " + errMsg
		}
	}
	r.emit(eventkind.ToolResult, p)
	r.record(llm.ToolMessage(llm.ToolResult{CallID: c.ID, Name: c.Name, Content: content, IsError: !ok, Images: images}))
}

// finish ends the turn with reason. A turn that ended under the loop's
// control (complete, denied, budget) also gets message.done and context.
func (r *turnRun) finish(reason string) (Result, error) {
	if r.broken() {
		return r.stop()
	}
	r.res.Reason = reason
	r.res.Text = r.text.String()
	if r.changers {
		r.loop.Checkpoints.TurnEnd(r.bg, r.turn.ID)
	}
	if reason == events.TurnDoneReasonComplete || reason == events.TurnDoneReasonDenied || reason == events.TurnDoneReasonBudget {
		r.emit(eventkind.MessageDone, events.MessageDoneEvent{Text: r.res.Text, Role: string(llm.RoleAssistant)})
		r.emit(eventkind.Context, r.contextPayload())
	}
	done := events.TurnDoneEvent{TurnID: r.turn.ID, Reason: reason}
	if reason == events.TurnDoneReasonInterrupted && r.turn.InterruptedBy != nil {
		done.Principal = r.turn.InterruptedBy()
	}
	r.emit(eventkind.TurnDone, done)
	if r.emitErr != nil {
		return r.res, r.emitErr
	}
	return r.res, nil
}

// stop ends a turn that could not be recorded.
func (r *turnRun) stop() (Result, error) {
	r.res.Reason = events.TurnDoneReasonError
	r.res.Text = r.text.String()
	if r.emitErr != nil {
		return r.res, r.emitErr
	}
	err := fmt.Errorf("agent: saving the history: %w", r.historyErr)
	code, msg := errcode.Internal, "the conversation could not be saved, so the turn was stopped"
	if errs.Is(r.historyErr, errcode.StoreUnavailable) {
		code, msg = errcode.StoreUnavailable, "the store cannot write (its disk is full or it is read-only), so the conversation could not be saved and the turn was stopped; free disk space, then prompt again"
	}
	r.emit(eventkind.Error, events.ErrorEvent{Code: code, Message: msg})
	r.emit(eventkind.TurnDone, events.TurnDoneEvent{TurnID: r.turn.ID, Reason: events.TurnDoneReasonError})
	if r.emitErr != nil {
		return r.res, errors.Join(err, r.emitErr)
	}
	return r.res, err
}

func (r *turnRun) contextPayload() events.ContextEvent {
	var p events.ContextEvent
	if u := r.lastUsage; u != nil {
		p.Used = int64(u.InputTokens + u.OutputTokens)
	}
	if cw, ok := r.loop.Provider.(llm.ContextWindower); ok {
		if w := cw.ContextWindow(r.model); w > 0 {
			window, pct := int64(w), math.Round(float64(p.Used)*1000/float64(w))/10
			p.Window, p.Percent = &window, &pct
		}
	}
	return p
}

// broken reports whether the turn can no longer be recorded.
func (r *turnRun) broken() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emitErr != nil || r.historyErr != nil
}

func (r *turnRun) emit(kind string, payload any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(kind, payload)
}

func (r *turnRun) emitLocked(kind string, payload any) {
	if r.emitErr != nil {
		return
	}
	if err := r.loop.Emitter.Emit(r.bg, kind, payload); err != nil {
		r.emitErr = fmt.Errorf("agent: emitting %s: %w", kind, err)
	}
}

// record appends m to the conversation and persists it.
func (r *turnRun) record(m llm.Message) {
	r.history = append(r.history, m)
	if r.historyErr != nil {
		return
	}
	if err := r.loop.History.Append(r.bg, m); err != nil {
		r.mu.Lock()
		r.historyErr = err
		r.mu.Unlock()
	}
}

// normalizeCall gives a call an id and arguments that are valid JSON: empty
// arguments become {}, text that does not parse is kept as a JSON string.
func normalizeCall(c llm.ToolCall) llm.ToolCall {
	if c.ID == "" {
		c.ID = ids.New("call")
	}
	args := bytes.TrimSpace(c.Arguments)
	switch {
	case len(args) == 0:
		c.Arguments = json.RawMessage(`{}`)
	case !json.Valid(args):
		s, _ := json.Marshal(string(args))
		c.Arguments = s
	default:
		c.Arguments = args
	}
	return c
}

func isObject(args json.RawMessage) bool {
	return len(args) > 0 && args[0] == '{'
}

// argsObject returns args when it is an object, else {}.
func argsObject(args json.RawMessage) json.RawMessage {
	if isObject(args) {
		return args
	}
	return json.RawMessage(`{}`)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
