package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// message is one inbound message of a channel.
type message struct {
	ID        string
	Text      string
	ChannelID string
	UserID    string
	// Key names the conversation (its session) when the platform has
	// threads (Slack: channel and thread); "" is channel and user.
	Key string
}

// errTurnEnded: the turn ended without an answer (error, interrupt, denial).
var errTurnEnded = errors.New("the turn ended without an answer")

// answered is a turn's answer to an inbound message.
type answered struct {
	text      string // the turn's last message.done text
	sessionID string
	// fence is the lease the turn ran under, noted as it began (nil off a
	// cluster): a reply to it is recorded under it (reply). own says it
	// is this daemon's, so that its clock judges it too.
	fence *store.Fence
	own   bool
	// fenceErr says why no lease could be noted: the reply is not made.
	fenceErr error
}

// answer prompts the binding's session with m and returns the turn's answer
// (its last message.done text). Approvals go to the unattended queue: the
// prompt has no origin. It announces the message and a failed turn; the
// reply is announced once it passed its guard and was made (replied).
func (s *Service) answer(ctx context.Context, b *binding, m message) (answered, error) {
	s.emit(b, EventMessage, map[string]any{"messageId": m.ID, "channelId": m.ChannelID, "userId": m.UserID, "text": m.Text})
	a, err := s.runTurn(ctx, b, m)
	if err != nil {
		s.emit(b, EventError, map[string]any{"messageId": m.ID, "sessionId": a.sessionID, "message": s.scrub(b, err.Error())})
		return a, err
	}
	return a, nil
}

// replied announces a reply made to m.
func (s *Service) replied(b *binding, m message, a answered) {
	s.emit(b, EventReply, map[string]any{"messageId": m.ID, "sessionId": a.sessionID, "text": a.text})
}

func (s *Service) runTurn(ctx context.Context, b *binding, m message) (answered, error) {
	t, err := s.startTurn(ctx, b, m, false)
	if err != nil {
		return t.a, err
	}
	defer t.close()
	s.noteLease(ctx, &t.a)
	t.a.text, err = follow(ctx, t.sub, t.turnID, nil)
	return t.a, err
}

// startedTurn is the turn an inbound message started in its
// conversation's session.
type startedTurn struct {
	a      answered // its session, so far
	turnID string
	// sub has the session's events from before the prompt on, so that
	// none of the turn's is missed; queue (when asked for, and the daemon
	// has approvals) the approval queue's, watched from before it too.
	sub   *eventlog.Subscription
	queue <-chan approval.QueueEvent
	// ctx ends with close: what runs beside the turn (a streamer, the
	// approvals' poster) runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	beside sync.WaitGroup // what runBeside started
}

// runBeside runs fn beside the turn, under its ctx; close waits for it.
func (t *startedTurn) runBeside(fn func(ctx context.Context)) {
	t.beside.Add(1)
	go func() {
		defer t.beside.Done()
		fn(t.ctx)
	}()
}

// close ends the turn's subscription and approval watch, and waits for
// what runBeside started.
func (t *startedTurn) close() {
	t.cancel()
	t.sub.Close()
	t.beside.Wait()
}

// startTurn prompts the session of m's conversation with m's text, once
// the binding's owner may act, subscribed to the session's events (and,
// with approvals, watching the approval queue) first. On an error the
// returned turn holds nothing to close, only the session (t.a) if known.
func (s *Service) startTurn(ctx context.Context, b *binding, m message, approvals bool) (*startedTurn, error) {
	t := &startedTurn{}
	if b.rec.Owner != "" && s.deps.OwnerMayAct != nil {
		if err := s.deps.OwnerMayAct(ctx, b.rec.Owner, b.rec.BindingID); err != nil {
			return t, err
		}
	}
	sid, err := s.sessionFor(ctx, b, m)
	if err != nil {
		return t, err
	}
	t.a.sessionID = sid
	last, err := s.deps.Events.LastSeq(ctx, sid)
	if err != nil {
		return t, fmt.Errorf("session %s: %w", sid, err)
	}
	tctx, cancel := context.WithCancel(ctx)
	sub, err := s.deps.Events.Subscribe(tctx, sid, last)
	if err != nil {
		cancel()
		return t, fmt.Errorf("session %s: %w", sid, err)
	}
	if approvals && s.deps.Approvals != nil {
		t.queue = s.deps.Approvals.Watch(tctx)
	}
	t.turnID, err = s.prompt(ctx, sid, m.Text)
	if err != nil {
		cancel()
		sub.Close()
		return t, fmt.Errorf("prompt session %s: %w", sid, err)
	}
	t.sub, t.ctx, t.cancel = sub, tctx, cancel
	return t, nil
}

// noteLease notes, as the turn of a's session begins, the lease it runs
// under (nothing off a cluster): this daemon's when it holds the session,
// else that of the daemon serving it (the prompt was forwarded there) as
// the store has it.
func (s *Service) noteLease(ctx context.Context, a *answered) {
	if s.deps.Leases == nil {
		return
	}
	if f, ok := s.deps.Leases.Fence(a.sessionID); ok {
		a.fence, a.own = &f, true
		return
	}
	rows, ok := s.deps.Settings.(leaseRows)
	if !ok {
		a.fenceErr = fmt.Errorf("the store keeps no lease of session %s", a.sessionID)
		return
	}
	l, err := rows.GetLease(ctx, a.sessionID)
	if err != nil {
		a.fenceErr = fmt.Errorf("read the lease of session %s: %w", a.sessionID, err)
		return
	}
	f := l.Fence()
	a.fence, a.own = &f, l.OwnerID == s.deps.Leases.ID()
}

// leaseRows is what noteLease reads of a store several daemons share
// (store.ClusterStore).
type leaseRows interface {
	GetLease(ctx context.Context, sessionID string) (store.Lease, error)
}

// reply is the guard of a reply to an inbound message that is not a
// Telegram poller's (those are made under the binding's lease): it is
// recorded under the lease the turn ran under, so that a daemon deposed
// from the session while the turn ran, or relaying the answer of a daemon
// that was, makes no reply.
func (s *Service) reply(ctx context.Context, b *binding, m message, a answered) error {
	rec := postRecord{Kind: "reply", ChannelID: m.ChannelID, ReplyTo: m.ID}
	if a.fenceErr != nil {
		return fmt.Errorf("%s not posted: %w", rec.what(b), a.fenceErr)
	}
	lease := ""
	w := store.Unfenced()
	if a.fence != nil {
		w = store.Under(*a.fence)
		if a.own {
			lease = a.sessionID
		}
	}
	return s.recordPost(ctx, w, b, lease, rec)
}

// follow reads a session's events until turn.done of turnID; onDelta,
// when set, gets each message.delta chunk of the turn.
func follow(ctx context.Context, sub *eventlog.Subscription, turnID string, onDelta func(string)) (string, error) {
	r := turnReader{turnID: turnID}
	for {
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case it, ok := <-sub.Items():
			if !ok {
				return "", errStreamEnded
			}
			chunk, done, err := r.read(it.Event)
			if chunk != "" && onDelta != nil {
				onDelta(chunk)
			}
			if done {
				return r.text, err
			}
		}
	}
}

// errStreamEnded: the subscription ended before the turn.
var errStreamEnded = errors.New("the session's event stream ended before the turn did (the daemon is stopping)")

// turnReader reads one turn out of its session's events: the chunks of
// its answer as they stream, then its end.
type turnReader struct {
	turnID  string
	inTurn  bool   // its turn.started was read
	text    string // its last message.done text
	lastErr string // its last error event's message
}

// read takes the session's next event (nil is skipped): chunk is a
// message.delta's text of the turn; done says the turn ended, with err
// errTurnEnded (and why) unless it completed (its answer is then r.text).
func (r *turnReader) read(ev *store.Event) (chunk string, done bool, err error) {
	if ev == nil {
		return "", false, nil
	}
	switch ev.Kind {
	case eventkind.TurnStarted:
		var p events.TurnStartedEvent
		if json.Unmarshal(ev.Payload, &p) == nil && p.TurnID == r.turnID {
			r.inTurn = true
		}
	case eventkind.MessageDelta:
		var p events.MessageDeltaEvent
		if r.inTurn && json.Unmarshal(ev.Payload, &p) == nil {
			return p.Text, false, nil
		}
	case eventkind.MessageDone:
		var p events.MessageDoneEvent
		if r.inTurn && json.Unmarshal(ev.Payload, &p) == nil {
			r.text = p.Text
		}
	case eventkind.Error:
		var p events.ErrorEvent
		if r.inTurn && json.Unmarshal(ev.Payload, &p) == nil {
			r.lastErr = p.Message
		}
	case eventkind.TurnDone:
		var p events.TurnDoneEvent
		if json.Unmarshal(ev.Payload, &p) != nil || p.TurnID != r.turnID {
			return "", false, nil
		}
		switch {
		case p.Reason == events.TurnDoneReasonComplete:
			return "", true, nil
		case r.lastErr != "":
			return "", true, fmt.Errorf("%w (%s): %s", errTurnEnded, p.Reason, r.lastErr)
		default:
			return "", true, fmt.Errorf("%w (%s)", errTurnEnded, p.Reason)
		}
	}
	return "", false, nil
}

// sessionFor returns the session a message prompts: the bound session, or
// the conversation's own session (created on its first message and
// remembered with the binding).
func (s *Service) sessionFor(ctx context.Context, b *binding, m message) (string, error) {
	t := b.rec.Target
	if t.Session != "" {
		return t.Session, nil
	}
	key := m.ChannelID + "/" + m.UserID
	if m.Key != "" {
		key = m.Key
	}
	b.convMu.Lock()
	defer b.convMu.Unlock()
	b.mu.Lock()
	sid := b.rec.Conversations[key]
	b.mu.Unlock()
	if sid == "" && s.deps.Leases != nil {
		sid = s.storedConversation(ctx, b.rec.BindingID, key) // begun through another daemon
	}
	var gone string // the remembered session, deleted since
	if sid != "" {
		if _, err := s.deps.Sessions.Get(ctx, sid); errs.CodeOf(err) != errcode.NotFound {
			return sid, nil // alive, or a failure its prompt reports
		}
		// Deleted (session.deleteSaved, a retention sweep): the
		// conversation goes on in a new session.
		s.log.Info("a gateway conversation's session was deleted: the conversation starts a new one",
			"bindingId", b.rec.BindingID, "conversation", key, "sessionId", sid)
		gone = sid
	}
	p := session.CreateParams{Kind: store.KindChat, Owner: b.rec.Owner}
	if t.Agent != "" {
		p.Agent, p.Workdir = t.Agent, s.opts.Workdir
	} else {
		p.Workdir, p.Mode = t.NewSession.Workdir, t.NewSession.Mode
	}
	sid, err := s.deps.Sessions.Create(ctx, p)
	if err != nil {
		return "", fmt.Errorf("create the conversation's session: %w", err)
	}
	if !s.live(b) {
		return sid, nil // unbound meanwhile: nothing to remember
	}
	// Added to the stored record atomically: a conversation another daemon
	// remembered meanwhile (in the same or another binding field) is kept,
	// and if it is this one, its session wins.
	won := sid
	err = s.updateRecord(ctx, b.rec.BindingID, func(rec *record) {
		if have := rec.Conversations[key]; have != "" && have != gone {
			won = have
			return
		}
		rec.Conversations = maps.Clone(rec.Conversations)
		if rec.Conversations == nil {
			rec.Conversations = map[string]string{}
		}
		rec.Conversations[key] = sid
	})
	if err != nil {
		s.log.Warn("remember a gateway conversation", "bindingId", b.rec.BindingID, "sessionId", sid, "err", err)
	}
	b.mu.Lock()
	convs := maps.Clone(b.rec.Conversations)
	if convs == nil {
		convs = map[string]string{}
	}
	convs[key] = won
	b.rec.Conversations = convs
	b.mu.Unlock()
	return won, nil
}

// storedConversation returns the session of a conversation as the store
// has it ("" when none).
func (s *Service) storedConversation(ctx context.Context, bindingID, key string) string {
	raw, err := s.deps.Settings.GetSetting(ctx, Namespace, bindingID)
	if err != nil {
		return ""
	}
	var rec record
	if json.Unmarshal(raw, &rec) != nil {
		return ""
	}
	return rec.Conversations[key]
}

// live reports whether b is still bound.
func (s *Service) live(b *binding) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bindings[b.rec.BindingID] == b
}
