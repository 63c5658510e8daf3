package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/telemetry"
)

// MaxQueuedPrompts bounds the prompts waiting behind a session's running
// turn: past it a prompt is refused with session_busy (data.queueLength),
// so a flood cannot pile up work that an interrupt must then unwind.
const MaxQueuedPrompts = 64

// interruptWait bounds how long Interrupt waits for the turn to close.
const interruptWait = 5 * time.Second

type turnIDKey struct{}

// WithTurnID returns ctx asking that the turn a call made with it starts
// (a prompt, a steer that starts one, a command) have id turnID: the
// caller chose and noted it before the call acted (runtime/rpc's operation
// receipts).
func WithTurnID(ctx context.Context, turnID string) context.Context {
	return context.WithValue(ctx, turnIDKey{}, turnID)
}

// newTurnID is the id of the turn a call starts: ctx's (WithTurnID), else
// a new one.
func newTurnID(ctx context.Context) string {
	if id, ok := ctx.Value(turnIDKey{}).(string); ok && id != "" {
		return id
	}
	return ids.New("t")
}

// Prompt starts a turn, or queues it behind the running one. A text starting
// with "/" runs a command.
func (s *Service) Prompt(ctx context.Context, id, text string, atts []Attachment, origin string) (string, error) {
	return s.PromptWhenBusy(ctx, id, text, atts, origin, WhenBusyEnqueue)
}

// Busy reports whether a turn of the live session id is running. A turn
// whose turn.done is out is not: clients that saw it find the session
// idle.
func (s *Service) Busy(id string) bool {
	l := s.liveSession(id)
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running != nil && !l.running.ended.Load()
}

// enqueue starts p on the session's actor, or queues it.
func (s *Service) enqueue(ctx context.Context, id string, p *pending, origin string) (string, error) {
	if l := s.liveSession(id); l == nil || !l.checkedPause() {
		// A turn a previous owner of the session left paused goes first:
		// this prompt queues behind it.
		if err := s.revive(ctx, id, nil); err != nil {
			return "", err
		}
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	row := l.row
	l.mu.Unlock()
	if err := s.checkWorkdir(row); err != nil {
		return "", err
	}
	p.caller = trace.SpanContextFromContext(ctx)
	p.principal = actorOf(ctx)
	if pr, ok := auth.PrincipalFrom(ctx); ok {
		p.key, p.keyMaxRunning = pr.KeyID, pr.KeyMaxRunning
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return "", errs.New(errcode.Overloaded, "the daemon is shutting down").WithData("retryAfterMs", 1000)
	}
	if s.live[id] != l {
		// Unloaded since load returned it: load it again.
		s.mu.Unlock()
		return s.enqueue(ctx, id, p, origin)
	}
	s.wg.Add(1)
	// Lock order s.mu → l.mu, as in unload: the session cannot be unloaded
	// between this check and the turn taking it.
	l.mu.Lock()
	s.mu.Unlock()

	if ts := l.running; ts != nil && ts.ended.Load() {
		// The running turn's turn.done is out, and a client that saw it
		// finds the session idle (not busy, nothing to queue behind): wait
		// the moment the actor takes to wind down, then start over.
		l.mu.Unlock()
		s.wg.Done()
		select {
		case <-ts.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return s.enqueue(ctx, id, p, origin)
	}

	// A prompt does not make its caller the origin (only create and
	// resume do): with the origin gone, approvals go to the unattended queue.
	if l.running != nil && p.rejectBusy {
		l.mu.Unlock()
		s.wg.Done()
		return "", busyError(id)
	}
	if l.running != nil && len(l.queue) >= MaxQueuedPrompts {
		n := len(l.queue)
		l.mu.Unlock()
		s.wg.Done()
		return "", errs.New(errcode.SessionBusy,
			"the session already has %d prompts queued behind its running turn, the most it takes; wait for turns to end or interrupt", n).
			WithData("queueLength", n).WithData("limit", MaxQueuedPrompts)
	}
	if l.running != nil {
		p.queued = true
		l.queue = append(l.queue, p)
		pos := len(l.queue)
		l.mu.Unlock()
		s.wg.Done()
		s.recordOpenTurns(ctx, l)
		if _, err := s.deps.Events.Append(ctx, id, eventkind.TurnQueued, events.TurnQueuedEvent{TurnID: p.turnID, Position: pos, Prompt: p.text, Queued: pos}); err != nil {
			return "", err
		}
		return p.turnID, nil
	}
	if err := s.keyRuns.start(p); err != nil {
		l.mu.Unlock()
		s.wg.Done()
		return "", err
	}
	ts := s.newTurnState(p.turnID)
	ts.key = p.key
	l.running = ts
	s.turns.Store(id, ts)
	l.mu.Unlock()
	s.recordOpenTurns(ctx, l)
	// The turn's first event is stored before the prompt is answered: if
	// the store cannot take it, the prompt fails instead of answering a
	// turn nobody will ever report. A turn the store failed to close is
	// closed first.
	err = s.closeUnclosed(ctx, l)
	if err == nil {
		_, err = s.deps.Events.Append(context.WithoutCancel(ctx), id, eventkind.TurnStarted,
			events.TurnStartedEvent{TurnID: p.turnID, Prompt: p.text, Queued: false})
		// A held turn.started reached the watching clients: end the turn
		// for them too (error + turn.done, held alike).
		em := emitter{events: s.deps.Events, id: id, svc: s}
		if s.endUnstored(context.WithoutCancel(ctx), em, err) {
			s.closeTurn(context.WithoutCancel(ctx), em, p.turnID, events.TurnDoneReasonError)
		}
	}
	if err != nil {
		l.mu.Lock()
		l.running = nil
		s.keyRuns.end(ts.key) // before done: whoever waits on it finds the key's count down
		close(ts.done)
		s.turns.CompareAndDelete(id, ts)
		l.mu.Unlock()
		ts.cancel()
		s.recordOpenTurns(ctx, l)
		s.wg.Done()
		return "", err
	}
	p.started = true
	go s.actor(l, p)
	return p.turnID, nil
}

func (s *Service) newTurnState(turnID string) *turnState {
	ctx, cancel := context.WithCancel(context.Background())
	return &turnState{id: turnID, ctx: ctx, cancel: cancel, done: make(chan struct{}), started: time.Now(), historyStart: -1}
}

// actor runs p, then every queued prompt, one after another.
func (s *Service) actor(l *live, p *pending) {
	defer s.wg.Done()
	for {
		l.mu.Lock()
		ts := l.running
		l.mu.Unlock()

		s.runTurn(ts.ctx, l, p, ts)
		ts.cancel()
		s.settle(l, ts)
		if p = s.next(l, ts); p == nil {
			return
		}
	}
}

// next finishes the running turn ts and takes the next queued prompt,
// emitting its turn.dequeued{started}; nil when the queue is empty (the
// session is then idle).
func (s *Service) next(l *live, ts *turnState) *pending {
	bg := context.Background()
	l.mu.Lock()
	s.keyRuns.end(ts.key) // before done: whoever waits on it finds the key's count down
	close(ts.done)
	id := l.row.SessionID
	s.turns.CompareAndDelete(id, ts)
	if ts.id != "" && !ts.closed.Load() {
		l.unclosed = ts.id
	}
	if len(l.queue) == 0 || l.row.Closed {
		l.running = nil
		unload := l.row.Kind != store.KindChat && !s.originAttached(s.origins.Of(id)) && l.unclosed == ""
		l.mu.Unlock()
		s.recordOpenTurns(bg, l)
		if unload {
			s.unload(l)
		}
		return nil
	}
	p := l.queue[0]
	l.queue = l.queue[1:]
	l.running = s.newTurnState(p.turnID)
	// A queued prompt's turn counts for its key from now on, over its
	// limit or not: it was accepted when it was queued.
	s.keyRuns.count(p.key)
	l.running.key = p.key
	s.turns.Store(id, l.running)
	l.mu.Unlock()
	s.recordOpenTurns(bg, l)
	if _, err := s.deps.Events.Append(bg, id, eventkind.TurnDequeued, events.TurnDequeuedEvent{TurnID: p.turnID, Reason: events.TurnDequeuedReasonStarted}); err != nil {
		s.deps.Log.Error("emit turn.dequeued", "sessionId", id, "err", err)
	}
	return p
}

// emitter appends a turn's events to the session's log.
type emitter struct {
	events EventLog
	id     string
	svc    *Service
	turn   *turnState // marked ended when its turn.done is stored
}

// streamingKinds are the small, frequent events of a streaming turn.
var streamingKinds = map[string]bool{eventkind.MessageDelta: true, eventkind.MessageReasoning: true, eventkind.ToolProgress: true}

// Emit appends one event. A turn that ends because the daemon is stopping
// says so: its turn.done is synthetic (PROTOCOL.md, system.shutdown).
func (e emitter) Emit(ctx context.Context, kind string, payload any) error {
	if done, ok := payload.(events.TurnDoneEvent); ok && e.svc != nil && e.svc.stopping() {
		done.Synthetic = true
		payload = done
	}
	if streamingKinds[kind] {
		// Chunks share commits; the next other event waits for them (the
		// log commits a session's events in order and fails the later ones
		// after a failure), so a failure surfaces there. Text chunks that
		// come faster than the log commits are merged into one event.
		var err error
		switch p := payload.(type) {
		case events.MessageDeltaEvent:
			_, err = e.events.EnqueueText(ctx, e.id, kind, p.Text)
		case events.MessageReasoningEvent:
			_, err = e.events.EnqueueText(ctx, e.id, kind, p.Text)
		default:
			_, err = e.events.Enqueue(ctx, e.id, kind, payload)
		}
		if err == nil {
			// Once the store refused the session's events, stop the turn at
			// the next chunk instead of streaming on into memory.
			err = e.svc.heldError(e.id)
		}
		return err
	}
	if kind == eventkind.TurnDone && e.turn != nil {
		// Before the append: a client that sees turn.done must find the
		// session idle (the actor may still be winding down; claimIdle
		// waits for that). The turn ends whether or not the event lands.
		e.turn.ended.Store(true)
	}
	_, err := e.events.Append(ctx, e.id, kind, payload)
	// A held turn.done (the store cannot write) was sent from memory and is
	// stored later under its seq: the turn is closed either way.
	if (err == nil || errs.Is(err, errcode.StoreUnavailable)) && kind == eventkind.TurnDone && e.turn != nil {
		e.turn.closed.Store(true)
		if done, ok := payload.(events.TurnDoneEvent); ok {
			telemetry.TurnEnded(done.Reason, time.Since(e.turn.started))
			trace.SpanFromContext(ctx).SetAttributes(attribute.String("trellis.turn.outcome", done.Reason))
		}
	}
	return err
}

// closeUnclosed stores the turn.done of a turn the store failed to close,
// before anything else happens in the session (the caller holds no lock).
// An error means the store still cannot write.
func (s *Service) closeUnclosed(ctx context.Context, l *live) error {
	l.mu.Lock()
	turn, id := l.unclosed, l.row.SessionID
	l.mu.Unlock()
	if turn == "" {
		return nil
	}
	_, err := s.deps.Events.Append(context.WithoutCancel(ctx), id, eventkind.TurnDone,
		events.TurnDoneEvent{TurnID: turn, Reason: events.TurnDoneReasonError, Synthetic: true})
	if err != nil && !errs.Is(err, errcode.StoreUnavailable) {
		return err
	}
	// Stored, or held to be stored: closed either way.
	l.mu.Lock()
	if l.unclosed == turn {
		l.unclosed = ""
	}
	l.mu.Unlock()
	return err
}

// runTurn runs one turn: turn.started, message.user, then the agent loop (or
// the command) until turn.done.
func (s *Service) runTurn(ctx context.Context, l *live, p *pending, ts *turnState) {
	l.mu.Lock()
	row := l.row
	l.mu.Unlock()
	origin := s.origins.Of(row.SessionID)
	// One span per turn, a child of the call that asked for it; the ids go
	// into the context so that the turn's log lines carry them.
	ctx, span := telemetry.Start(trace.ContextWithSpanContext(ctx, p.caller), "turn",
		trace.WithAttributes(attribute.String("trellis.session.id", row.SessionID), attribute.String("trellis.turn.id", p.turnID)))
	defer span.End()
	ctx = telemetry.WithTurnID(ctx, p.turnID)
	bg := context.WithoutCancel(ctx)
	em := emitter{events: s.deps.Events, id: row.SessionID, svc: s, turn: ts}
	log := s.deps.Log.With("sessionId", row.SessionID, "turnId", p.turnID)

	prompt := promptText(p)
	if p.resume {
		s.runResumed(ctx, l, em, p, ts, row, origin)
		return
	}
	if !p.started {
		if err := s.closeUnclosed(bg, l); err != nil {
			log.ErrorContext(ctx, "close the previous turn", "err", err)
			return
		}
		if err := em.Emit(bg, eventkind.TurnStarted, events.TurnStartedEvent{TurnID: p.turnID, Prompt: p.text, Queued: p.queued}); err != nil {
			log.ErrorContext(ctx, "emit turn.started", "err", err)
			if s.endUnstored(bg, em, err) {
				s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
			}
			return
		}
	}
	if !s.materialised(ctx, l, em, p.turnID) {
		return
	}
	if err := em.Emit(bg, eventkind.MessageUser, events.MessageUserEvent{Text: p.text, Attachments: attachmentRefs(p.attachments), Principal: p.principal}); err != nil {
		log.ErrorContext(ctx, "emit message.user", "err", err)
		s.endUnstored(bg, em, err)
		s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
		return
	}
	now := time.Now().UTC()
	upd := store.SessionUpdate{LastPrompt: &p.text, LastActivityAt: &now}
	if row.Title == "" {
		title := titleOf(p.text)
		upd.Title = &title
		l.mu.Lock()
		l.row.Title = title
		l.mu.Unlock()
	}
	if err := s.deps.Store.UpdateSession(bg, s.writer(row.SessionID), row.SessionID, upd); err != nil {
		log.WarnContext(ctx, "update session activity", "err", err)
	}

	if p.command != nil && p.command.Source == "builtin" {
		s.runBuiltin(ctx, l, em, p)
		return
	}
	if p.command != nil {
		prompt = strings.ReplaceAll(p.command.body, "$ARGUMENTS", p.args)
		if !strings.Contains(p.command.body, "$ARGUMENTS") && p.args != "" {
			prompt += "\n\n" + p.args
		}
	}
	s.runLoop(ctx, l, em, p, ts, row, origin, prompt)
}

// runResumed goes on with a turn a previous owner of the session left
// paused by its budget: its turn.started and message.user are in the log
// and its prompt in the history.
func (s *Service) runResumed(ctx context.Context, l *live, em emitter, p *pending, ts *turnState, row store.Session, origin string) {
	if !s.materialised(ctx, l, em, p.turnID) {
		return
	}
	s.runLoop(ctx, l, em, p, ts, row, origin, "")
}

// runLoop runs the agent loop of a turn on prompt.
func (s *Service) runLoop(ctx context.Context, l *live, em emitter, p *pending, ts *turnState, row store.Session, origin, prompt string) {
	bg := context.WithoutCancel(ctx)
	log := s.deps.Log.With("sessionId", row.SessionID, "turnId", p.turnID)
	prov, err := s.deps.Providers.Open(row.Provider)
	if err != nil {
		_ = em.Emit(bg, eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: err.Error()})
		s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
		return
	}
	info := Info{SessionID: row.SessionID, Workdir: row.Workdir, Mode: row.Mode, Kind: row.Kind, JobID: row.JobID, Origin: origin, Agent: row.Agent, Backend: row.Backend, DenyExec: s.deniesExec(ctx, row.SessionID)}
	system, tools, effort, err := s.turnSettings(ctx, row, s.deps.Toolbox.Tools(ctx, info))
	if err != nil {
		_ = em.Emit(bg, eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: err.Error()})
		s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
		return
	}
	loop := agent.Loop{
		Provider: prov,
		Tools:    tools,
		Gate:     s.deps.Toolbox.Gate(ctx, info, p.turnID),
		Emitter:  em,
		History:  turnHistory{storeHistory{st: s.deps.Store, id: row.SessionID, writer: s.writer, owning: s.owning}, ts},
		Settings: agent.Settings{Model: row.Model, System: system, Effort: effort},
		Guard:    func() error { return s.owning(row.SessionID) },
		Prices:   s.deps.Prices,
		Budget:   turnBudget{s: s, l: l, ts: ts, id: row.SessionID},
	}
	loop.Checkpoints = s.turnCheckpointsFor(row)
	res, err := loop.Run(ctx, agent.Turn{ID: p.turnID, Prompt: prompt, InterruptedBy: ts.interruptedBy.Load, Steered: l.steeredInto(ts), Notices: l.takeNotices, Resume: p.resume})
	if res.Reason != agent.ReasonDetached && ts.pausedRec.Load() {
		// The turn ended (or never paused): no pause of it remains.
		if cerr := s.clearPaused(bg, row.SessionID); cerr != nil {
			log.WarnContext(ctx, "clear the turn's pause", "err", cerr)
		}
	}
	if err != nil {
		// The loop could not record the turn; unless its turn.done went
		// out (a history failure ends the turn itself), close it ourselves.
		log.ErrorContext(ctx, "turn failed to record", "err", err)
		if !ts.closed.Load() {
			s.endUnstored(bg, em, err)
			s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
		}
	}
}

// owning is nil while this daemon may act for session id: alone on its
// store always; in a cluster while it holds the session's lease and less
// than the lease less its margin passed since its last renewal (an
// in-memory check, made right before every provider call and tool run).
// Past it, lease_lost: the daemon deposed itself, and nothing more starts.
func (s *Service) owning(id string) error {
	if s.deps.Leases == nil || s.deps.Leases.Holds(id) {
		return nil
	}
	return errs.New(errcode.LeaseLost, "this daemon no longer holds the lease of session %s (another daemon may own it now), so nothing more of the turn runs here; prompt again to continue on the session's owner", id)
}

// heldError is store_unavailable while the event log holds events of
// session id in memory because the store could not take them.
func (s *Service) heldError(id string) error {
	if s == nil {
		return nil
	}
	h, ok := s.deps.Events.(interface{ Held(string) int })
	if !ok {
		return nil
	}
	if n := h.Held(id); n > 0 {
		return errs.New(errcode.StoreUnavailable, "the store cannot write: %d event(s) of session %s wait in memory to be stored", n, id)
	}
	return nil
}

// endUnstored tells the watching clients that the turn's events could not
// be stored, when err is a held append's store_unavailable: it emits an
// error event with that code (sent from memory and stored later, like the
// turn.done the caller then emits) and reports true.
func (s *Service) endUnstored(ctx context.Context, em emitter, err error) bool {
	if !errs.Is(err, errcode.StoreUnavailable) {
		return false
	}
	_ = em.Emit(ctx, eventkind.Error, events.ErrorEvent{Code: errcode.StoreUnavailable,
		Message: "the store cannot write (its disk is full, it is read-only or unreachable), so the turn was stopped; " +
			"its events were sent from memory and are stored once the store works again. Free disk space or restore access to the store, then prompt again"})
	return true
}

// closeTurn ends a turn the loop did not end.
func (s *Service) closeTurn(ctx context.Context, em emitter, turnID, reason string) {
	if err := em.Emit(ctx, eventkind.TurnDone, events.TurnDoneEvent{TurnID: turnID, Reason: reason}); err != nil {
		s.deps.Log.Error("emit turn.done", "sessionId", em.id, "turnId", turnID, "err", err)
	}
}

func promptText(p *pending) string {
	var b strings.Builder
	b.WriteString(p.text)
	for _, a := range p.attachments {
		if a.Kind == "text" && a.Text != "" {
			fmt.Fprintf(&b, "\n\n[attachment %s]\n%s", a.Name, a.Text)
		} else if a.Path != "" || a.Name != "" {
			fmt.Fprintf(&b, "\n\n[attachment %s %s]", a.Kind, orDefault(a.Path, a.Name))
		}
	}
	return b.String()
}

func titleOf(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if r := []rune(t); len(r) > 60 {
		t = string(r[:60]) + "…"
	}
	return t
}

func systemPrompt(row store.Session) string {
	return "You are Trellis, a coding agent working in " + row.Workdir +
		". Use the tools to inspect and change files there; ask before risky actions."
}

func defaultModel(p llm.Provider) string {
	if m, ok := p.(llm.ModelLister); ok {
		return m.DefaultModel()
	}
	return ""
}

// Interrupt stops the running turn, drops the queued prompts and denies the
// pending approvals (their gates see the cancelled context).
func (s *Service) Interrupt(ctx context.Context, id string) error {
	if _, err := s.row(ctx, id); err != nil {
		return err
	}
	by := actorOf(ctx)
	if l := s.liveSession(id); l == nil || !s.Busy(id) {
		// A turn a previous owner of the session left paused ends here:
		// it is picked up, interrupted before it does anything.
		err := s.revive(ctx, id, func(ts *turnState) {
			ts.interrupted.Store(true)
			ts.interruptedBy.CompareAndSwap(nil, by)
			ts.cancel()
		})
		if err != nil {
			return err
		}
	}
	if l := s.liveSession(id); l != nil {
		s.interrupt(ctx, l, by)
	}
	// After the turn: a turn waiting on a sub-agent stops it itself.
	if s.deps.Subagents != nil {
		s.deps.Subagents.InterruptChildren(ctx, id)
	}
	return nil
}

// interrupt drops l's queue and stops its running turn; by is who asked
// (nil: no principal), named by the turn.done of each.
func (s *Service) interrupt(ctx context.Context, l *live, by *events.PrincipalRef) {
	l.mu.Lock()
	dropped := l.queue
	l.queue = nil
	ts := l.running
	id := l.row.SessionID
	l.mu.Unlock()
	s.dequeue(ctx, id, dropped, events.TurnDequeuedReasonDropped, by)
	if len(dropped) > 0 {
		// After their ends are stored: a recovery in between finds them
		// ended (endedTurns) rather than not closing them at all.
		s.recordOpenTurns(ctx, l)
	}
	if ts == nil {
		return
	}
	ts.interrupted.Store(true)
	ts.interruptedBy.CompareAndSwap(nil, by)
	l.mu.Lock()
	cancel := ts.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	select {
	case <-ts.done:
	case <-time.After(interruptWait):
	case <-ctx.Done():
	}
}

// storeHistory is a session's model-facing history kept in the store.
type storeHistory struct {
	st Store
	id string
	// writer returns the writer each write is made under
	// (Service.writer): the daemon's lease on the session, if any.
	writer func(id string) store.Writer
	// owning, when set, is asked before each write: a daemon that no
	// longer owns the session writes nothing (the store would refuse it,
	// and one cut off from the store would wait for it to answer).
	owning func(id string) error
}

func (h storeHistory) Messages(ctx context.Context) ([]llm.Message, error) {
	raw, err := h.st.LoadHistory(ctx, h.id)
	if err != nil {
		telemetry.StoreError("load_history")
		return nil, err
	}
	msgs := make([]llm.Message, 0, len(raw))
	for _, r := range raw {
		var m llm.Message
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, fmt.Errorf("history of %s is corrupt: %w", h.id, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// turnHistory is the history a turn's loop reads and writes: it notes how
// many messages came before the turn, for a rollback.
type turnHistory struct {
	storeHistory
	ts *turnState
}

func (h turnHistory) Messages(ctx context.Context) ([]llm.Message, error) {
	msgs, err := h.storeHistory.Messages(ctx)
	if err == nil {
		h.ts.historyStart = len(msgs)
	}
	return msgs, err
}

func (h storeHistory) Append(ctx context.Context, msgs ...llm.Message) error {
	raw, err := marshalMessages(msgs)
	if err != nil {
		return err
	}
	if h.owning != nil {
		if err := h.owning(h.id); err != nil {
			return err
		}
	}
	if err := h.st.AppendHistory(ctx, h.writer(h.id), h.id, raw); err != nil {
		telemetry.StoreError("append_history")
		if store.CannotWrite(err) {
			return errs.Wrap(errcode.StoreUnavailable, err, "the store cannot write (its disk is full or it is read-only), so the conversation could not be saved")
		}
		if errors.Is(err, store.ErrLeaseLost) {
			return leaseLost(h.id, err)
		}
		return err
	}
	return nil
}

func marshalMessages(msgs []llm.Message) ([]json.RawMessage, error) {
	raw := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		raw = append(raw, b)
	}
	return raw, nil
}

// repairHistory answers, after a crash, the tool calls of the last assistant
// message that have no result, so that providers accept the history.
func repairHistory(ctx context.Context, st Store, writer func(id string) store.Writer, id string) error {
	return answerOpenCalls(ctx, st, writer, id, "interrupted: the daemon stopped before this call finished")
}

// answerOpenCalls answers the tool calls of the last assistant message of
// session id's history that have no result with an error result saying
// why (content).
func answerOpenCalls(ctx context.Context, st Store, writer func(id string) store.Writer, id, content string) error {
	h := storeHistory{st: st, id: id, writer: writer}
	msgs, err := h.Messages(ctx)
	if err != nil || len(msgs) == 0 {
		return err
	}
	answered := map[string]bool{}
	var last *llm.Message
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role == llm.RoleTool && m.ToolResult != nil {
			answered[m.ToolResult.CallID] = true
			continue
		}
		if m.Role == llm.RoleAssistant {
			last = &msgs[i]
		}
		break
	}
	if last == nil {
		return nil
	}
	var fix []llm.Message
	for _, c := range last.ToolCalls {
		if !answered[c.ID] {
			fix = append(fix, llm.ToolMessage(llm.ToolResult{CallID: c.ID, Name: c.Name, Content: content, IsError: true}))
		}
	}
	if len(fix) == 0 {
		return nil
	}
	return h.Append(ctx, fix...)
}

// unload forgets an idle session that no client holds (a finished scheduled
// run, a sub-agent): it stays saved and is loaded again on demand, so a
// daemon running frequent jobs does not keep every run in memory.
func (s *Service) unload(l *live) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.mu.Lock()
	idle := l.running == nil && len(l.queue) == 0
	id := l.row.SessionID
	l.mu.Unlock()
	if idle && s.live[id] == l {
		s.forget(id)
	}
}

// keyRuns counts, per API key, the sessions running a turn its prompts
// started (key.create maxRunningSessions): a prompt that would start a
// turn on one more idle session past the key's limit answers
// rate_limited. The count is this daemon's.
type keyRuns struct {
	mu sync.Mutex
	n  map[string]int
}

// start counts p's turn for its key, or refuses it past the key's limit.
func (k *keyRuns) start(p *pending) error {
	if p.key == "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if p.keyMaxRunning > 0 && k.n[p.key] >= p.keyMaxRunning {
		return errs.New(errcode.RateLimited, "this API key already keeps %d sessions running, its most (key.create maxRunningSessions); wait for one of their turns to end, interrupt one, or queue this prompt on a session that is running", k.n[p.key]).
			WithData("retryAfterMs", 1000).WithData("limit", "keyMaxRunningSessions").WithData("value", p.keyMaxRunning)
	}
	k.countLocked(p.key)
	return nil
}

// count counts a turn of key's that starts whatever the limit.
func (k *keyRuns) count(key string) {
	if key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.countLocked(key)
}

func (k *keyRuns) countLocked(key string) {
	if k.n == nil {
		k.n = map[string]int{}
	}
	k.n[key]++
}

// end counts a turn of key's out.
func (k *keyRuns) end(key string) {
	if key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key]--; k.n[key] <= 0 {
		delete(k.n, key)
	}
}
