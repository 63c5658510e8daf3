package session

import (
	"context"
	"slices"
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
)

// What session.prompt does when a turn is running (its whenBusy).
const (
	WhenBusyEnqueue   = "enqueue"   // queue the prompt behind the turn (turn.queued)
	WhenBusyQueue     = "queue"     // protocol 1.x name of enqueue
	WhenBusyReject    = "reject"    // answer session_busy; nothing changes
	WhenBusyInterrupt = "interrupt" // interrupt the turn (as session.interrupt), then run the prompt
	WhenBusyRollback  = "rollback"  // interrupt, drop the turn from the model's history, then run the prompt
	WhenBusySteer     = "steer"     // send the text into the running turn (as session.steer)
)

// PromptWhenBusy is Prompt with the choice of what happens when a turn is
// running ("" = enqueue).
func (s *Service) PromptWhenBusy(ctx context.Context, id, text string, atts []Attachment, origin, whenBusy string) (string, error) {
	switch whenBusy {
	case "", WhenBusyEnqueue, WhenBusyQueue, WhenBusyReject, WhenBusyInterrupt, WhenBusyRollback, WhenBusySteer:
	default:
		return "", errs.New(errcode.InvalidParams, "whenBusy %q is not one of enqueue, queue, reject, interrupt, rollback, steer", whenBusy)
	}
	command := strings.HasPrefix(strings.TrimSpace(text), "/") && len(atts) == 0
	if !command {
		if strings.TrimSpace(text) == "" && len(atts) == 0 {
			return "", errs.New(errcode.InvalidParams, "text is empty: a prompt needs text or attachments")
		}
		if err := validateAttachments(atts); err != nil {
			return "", err
		}
	}
	if whenBusy == WhenBusySteer && len(atts) > 0 {
		return "", errs.New(errcode.InvalidParams, "whenBusy steer sends text only into the running turn: send attachments with whenBusy enqueue (or interrupt) instead")
	}
	switch whenBusy {
	case WhenBusyInterrupt, WhenBusyRollback:
		// As session.interrupt: the running turn stops, queued prompts are
		// dropped, and this prompt runs next.
		if s.Busy(id) {
			if whenBusy == WhenBusyRollback {
				s.markRollback(id)
			}
			if err := s.Interrupt(ctx, id); err != nil {
				return "", err
			}
		}
	case WhenBusySteer:
		if !command {
			turnID, _, err := s.Steer(ctx, id, text, origin)
			return turnID, err
		}
	}
	reject := whenBusy == WhenBusyReject
	if command {
		name, args, _ := strings.Cut(strings.TrimSpace(text), " ")
		if reject && s.Busy(id) {
			return "", busyError(id)
		}
		return s.RunCommand(ctx, id, name, strings.TrimSpace(args), origin)
	}
	return s.enqueue(ctx, id, &pending{turnID: newTurnID(ctx), text: text, attachments: atts, rejectBusy: reject}, origin)
}

func busyError(id string) error {
	return errs.New(errcode.SessionBusy, "session %s is running a turn and the prompt asked whenBusy=reject: wait for turn.done, or send it with whenBusy enqueue, steer or interrupt", id)
}

// markRollback asks that the running turn of session id, once interrupted,
// be dropped from the model's history.
func (s *Service) markRollback(id string) {
	l := s.liveSession(id)
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ts := l.running; ts != nil && ts.id != "" && !ts.ended.Load() {
		ts.rollback.Store(true)
	}
}

// Steer sends text into the running turn of session id as a user message
// that its model reads at its next call (turn.steered). With no turn to
// steer (the session is idle, compacting, or its turn is already ending) the
// text becomes a prompt of its own, and started is true. turnID is the turn
// the text went into, or the one it started.
func (s *Service) Steer(ctx context.Context, id, text, origin string) (turnID string, started bool, err error) {
	if strings.TrimSpace(text) == "" {
		return "", false, errs.New(errcode.InvalidParams, "text is empty: session.steer needs the message to send into the running turn")
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return "", false, err
	}
	l.mu.Lock()
	if ts := l.running; ts != nil && ts.id != "" && !ts.ended.Load() && !ts.steerClosed {
		if n := len(ts.steered); n >= MaxQueuedPrompts {
			l.mu.Unlock()
			return "", false, errs.New(errcode.SessionBusy,
				"the running turn of session %s already has %d steered messages its model has not read yet, the most it takes; wait for its next model call, or interrupt", id, n).
				WithData("limit", MaxQueuedPrompts)
		}
		ts.steered = append(ts.steered, agent.Steer{Text: text, Principal: actorOf(ctx)})
		l.mu.Unlock()
		return ts.id, false, nil
	}
	l.mu.Unlock()
	turnID, err = s.enqueue(ctx, id, &pending{turnID: newTurnID(ctx), text: text}, origin)
	return turnID, err == nil, err
}

// steeredInto is the agent.Turn.Steered of ts's loop: it hands over the
// messages steered into ts, and closes ts to more once the loop, about to
// end the turn, finds none.
func (l *live) steeredInto(ts *turnState) func(ending bool) []agent.Steer {
	return func(ending bool) []agent.Steer {
		l.mu.Lock()
		defer l.mu.Unlock()
		out := ts.steered
		ts.steered = nil
		if ending && len(out) == 0 {
			ts.steerClosed = true
		}
		return out
	}
}

// settle does what the ended turn ts leaves to do, before the next one
// starts: a rollback drops the turn from the model's history; text steered
// into the turn that its model never read (the turn failed, ran out of
// rounds, or ran a command) becomes the next prompt. An interrupted turn's
// unread steered text is dropped, as its queue is.
func (s *Service) settle(l *live, ts *turnState) {
	bg := context.Background()
	stopping := s.stopping()
	l.mu.Lock()
	left := ts.steered
	ts.steered, ts.steerClosed = nil, true
	id := l.row.SessionID
	var p *pending
	if len(left) > 0 && !ts.interrupted.Load() && !l.row.Closed && !stopping {
		texts := make([]string, len(left))
		for i, st := range left {
			texts[i] = st.Text
		}
		p = &pending{turnID: ids.New("t"), text: strings.Join(texts, "\n\n"), queued: true, principal: left[0].Principal}
		l.queue = slices.Insert(l.queue, 0, p)
	}
	waiting := len(l.queue)
	l.mu.Unlock()
	if ts.rollback.Load() {
		s.rollback(bg, id, ts)
	}
	if p != nil {
		s.recordOpenTurns(bg, l)
		if _, err := s.deps.Events.Append(bg, id, eventkind.TurnQueued, events.TurnQueuedEvent{TurnID: p.turnID, Position: 1, Prompt: p.text, Queued: waiting}); err != nil {
			s.deps.Log.Error("emit turn.queued", "sessionId", id, "err", err)
		}
	}
}

// rollback drops the messages of the interrupted turn ts from the history
// of session id (turn.rollback); its events stay in the log.
func (s *Service) rollback(ctx context.Context, id string, ts *turnState) {
	n := 0
	if start := ts.historyStart; start >= 0 {
		raw, err := s.deps.Store.LoadHistory(ctx, id)
		if err == nil && len(raw) > start {
			n = len(raw) - start
			err = s.deps.Store.ReplaceHistory(ctx, s.writer(id), id, raw[:start])
		}
		if err != nil {
			s.deps.Log.Error("roll the interrupted turn back", "sessionId", id, "turnId", ts.id, "err", s.refused(ctx, id, err))
			return
		}
	}
	if _, err := s.deps.Events.Append(ctx, id, eventkind.TurnRollback, events.TurnRollbackEvent{TurnID: ts.id, Messages: n, Principal: ts.interruptedBy.Load()}); err != nil {
		s.deps.Log.Error("emit turn.rollback", "sessionId", id, "err", err)
	}
}

// QueuedPrompt is a prompt waiting behind a session's running turn.
type QueuedPrompt struct {
	TurnID      string
	Position    int // 1 runs next
	Prompt      string
	Attachments int
}

// Queue lists the prompts queued behind the running turn of session id, in
// the order they run.
func (s *Service) Queue(ctx context.Context, id string) ([]QueuedPrompt, error) {
	if _, err := s.row(ctx, id); err != nil {
		return nil, err
	}
	out := []QueuedPrompt{}
	l := s.liveSession(id)
	if l == nil {
		return out, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range l.queue {
		out = append(out, QueuedPrompt{TurnID: p.turnID, Position: i + 1, Prompt: p.text, Attachments: len(p.attachments)})
	}
	return out, nil
}

// RemoveQueued removes the queued prompt of turn turnID from session id's
// queue: turn.dequeued{removed} and turn.done{interrupted}.
func (s *Service) RemoveQueued(ctx context.Context, id, turnID string) error {
	removed, err := s.removeQueued(ctx, id, func(p *pending) bool { return p.turnID == turnID })
	if err == nil && removed == 0 {
		err = errs.New(errcode.NotFound, "no prompt of turn %s waits in the queue of session %s (it may have started or been removed already); session.queue.list lists the queue", turnID, id)
	}
	return err
}

// ClearQueue removes every queued prompt of session id (as RemoveQueued)
// and counts them; the running turn goes on.
func (s *Service) ClearQueue(ctx context.Context, id string) (int, error) {
	return s.removeQueued(ctx, id, func(*pending) bool { return true })
}

func (s *Service) removeQueued(ctx context.Context, id string, which func(*pending) bool) (int, error) {
	if _, err := s.row(ctx, id); err != nil {
		return 0, err
	}
	l := s.liveSession(id)
	if l == nil {
		return 0, nil
	}
	l.mu.Lock()
	var removed, kept []*pending
	for _, p := range l.queue {
		if which(p) {
			removed = append(removed, p)
		} else {
			kept = append(kept, p)
		}
	}
	l.queue = kept
	l.mu.Unlock()
	if len(removed) == 0 {
		return 0, nil
	}
	s.recordOpenTurns(ctx, l)
	s.dequeue(ctx, id, removed, events.TurnDequeuedReasonRemoved, actorOf(ctx))
	return len(removed), nil
}

// dequeue records that queued prompts left the queue without running (why
// says how): turn.dequeued and turn.done{interrupted} for each, by naming
// who made them leave.
func (s *Service) dequeue(ctx context.Context, id string, gone []*pending, why string, by *events.PrincipalRef) {
	bg := context.WithoutCancel(ctx)
	for _, p := range gone {
		_, _ = s.deps.Events.Append(bg, id, eventkind.TurnDequeued, events.TurnDequeuedEvent{TurnID: p.turnID, Reason: why})
		_, _ = s.deps.Events.Append(bg, id, eventkind.TurnDone, events.TurnDoneEvent{TurnID: p.turnID, Reason: events.TurnDoneReasonInterrupted, Principal: by})
	}
}
