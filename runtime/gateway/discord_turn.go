package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/store"
)

// dcApprovalPrefix starts the custom_id of an approval button:
// "trellis:ap:<requestId>:allow|deny".
const dcApprovalPrefix = "trellis:ap:"

// Button styles.
const (
	dcStyleSuccess = 3
	dcStyleDanger  = 4
)

// answerMessage runs the turn of one message and streams its answer: the
// reply is posted at the first text and edited at a bounded rate as the
// text grows; the turn's approval requests are posted with buttons.
func (dc *dcConn) answerMessage(ctx context.Context, dm dcMessage) {
	s, b := dc.s, dc.b
	// One session per channel (a thread is a channel of its own): the
	// conversation's key is the channel's, with no user, as it has been
	// stored since Discord bindings began.
	msg := message{ID: dm.ID, Text: dm.Content, ChannelID: dm.ChannelID, UserID: dm.Author.ID, Key: dm.ChannelID + "/"}
	s.emit(b, EventMessage, map[string]any{"messageId": msg.ID, "channelId": msg.ChannelID, "userId": msg.UserID, "text": msg.Text})
	st := &dcStream{dc: dc, msg: msg}
	a, err := dc.runTurn(ctx, msg, st)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotOwner) || errors.Is(err, store.ErrLeaseLost) {
			s.notReplied(b, msg, err) // another daemon answers the channel now
			return
		}
		s.emit(b, EventError, map[string]any{"messageId": msg.ID, "sessionId": a.sessionID, "message": s.scrub(b, err.Error())})
		s.setState(b, err)
		if st.mid != "" {
			// The streamed part stays, with why it stops there.
			_ = st.finish(ctx, st.text+"\n\n*(the turn ended without a complete answer)*")
		}
		return
	}
	text := a.text
	if text == "" {
		text = "(no answer)"
	}
	if err := st.finish(ctx, text); err != nil {
		if errors.Is(err, errNotOwner) || errors.Is(err, store.ErrLeaseLost) || strings.Contains(err.Error(), "not posted") {
			s.notReplied(b, msg, err)
			return
		}
		s.setState(b, err)
		s.emit(b, EventError, map[string]any{"messageId": msg.ID, "message": s.scrub(b, err.Error())})
		return
	}
	s.setState(b, nil)
	s.replied(b, msg, a)
}

// runTurn prompts the channel's session with m and follows the turn,
// feeding its text to st and putting its approval requests to the channel.
func (dc *dcConn) runTurn(ctx context.Context, m message, st *dcStream) (answered, error) {
	t, err := dc.s.startTurn(ctx, dc.b, m, true)
	if err != nil {
		return t.a, err
	}
	defer t.close()
	a, queue := t.a, t.queue // queue is nil once it closed
	// The reply is made under the binding's lease (as a Telegram poller's):
	// recorded before it is posted, judged again before each edit.
	r := turnReader{turnID: t.turnID}
	var tick <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return a, context.Cause(ctx)
		case <-tick:
			tick = nil
			if err := st.flush(ctx); err != nil {
				return a, err
			}
		case qe, ok := <-queue:
			if !ok {
				queue = nil
				continue
			}
			if qe.Pending != nil && qe.Pending.SessionID == a.sessionID && !qe.Pending.IsQuestion() && qe.Pending.Tool != approval.BudgetTool {
				dc.postApproval(ctx, m.ChannelID, *qe.Pending)
			}
			if qe.Resolved != nil {
				dc.resolved(ctx, *qe.Resolved)
			}
		case it, ok := <-t.sub.Items():
			if !ok {
				return a, errStreamEnded
			}
			chunk, done, err := r.read(it.Event)
			if done {
				dc.settle(ctx, queue, a.sessionID)
				a.text = r.text
				return a, err
			}
			if chunk == "" {
				continue
			}
			st.text += chunk
			wait := st.due()
			if wait <= 0 {
				if err := st.flush(ctx); err != nil {
					return a, err
				}
			} else if tick == nil {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				tick = timer.C
			}
		}
	}
}

// settle takes in the resolutions of the turn's approval messages still
// showing buttons: the turn cannot end with one pending, but its
// resolution may still be on its way (at most 5 s).
func (dc *dcConn) settle(ctx context.Context, queue <-chan approval.QueueEvent, sid string) {
	open := func() bool {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		for _, p := range dc.approvals {
			if p.sessionID == sid {
				return true
			}
		}
		return false
	}
	if queue == nil || !open() {
		return
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for open() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case qe, ok := <-queue:
			if !ok {
				return
			}
			if qe.Resolved != nil {
				dc.resolved(ctx, *qe.Resolved)
			}
		}
	}
}

// dcStream is a streamed reply: posted at its first text, then edited.
type dcStream struct {
	dc   *dcConn
	msg  message
	text string // the text so far
	mid  string // the reply's message id, once posted
	sent string // the text it shows
	last time.Time
}

// due is how long until the next edit may go out.
func (st *dcStream) due() time.Duration {
	if st.mid == "" {
		return 0
	}
	return st.dc.s.opts.Discord.EditInterval - time.Since(st.last)
}

// flush shows the text so far: the first time by posting the reply
// (recorded first under the binding's lease), then by an edit (made only
// while this daemon holds the lease).
func (st *dcStream) flush(ctx context.Context) error {
	show := st.text
	if parts := splitContent(show); len(parts) > 1 {
		show = parts[0]
	}
	if show == st.sent || strings.TrimSpace(show) == "" {
		return nil
	}
	return st.show(ctx, show)
}

func (st *dcStream) show(ctx context.Context, text string) error {
	s, b := st.dc.s, st.dc.b
	st.last = time.Now()
	if st.mid == "" {
		if err := s.recordPost(ctx, s.noLease(), b, leaseKey(b.rec.BindingID), postRecord{Kind: "reply", ChannelID: st.msg.ChannelID, ReplyTo: st.msg.ID}); err != nil {
			return err
		}
		id, err := s.discordSend(ctx, b, st.msg.ChannelID, dcMessageOut{Content: text, MessageReference: &dcMessageRef{MessageID: st.msg.ID}})
		if err != nil {
			return err
		}
		st.mid, st.sent = id, text
		return nil
	}
	if s.deps.Leases != nil {
		if _, ok := s.deps.Leases.Fence(leaseKey(b.rec.BindingID)); !ok {
			return s.notOwner(b, leaseKey(b.rec.BindingID), postRecord{Kind: "reply", ReplyTo: st.msg.ID})
		}
	}
	if err := s.discordEdit(ctx, b, st.msg.ChannelID, st.mid, dcMessageOut{Content: text}); err != nil {
		return err
	}
	st.sent = text
	return nil
}

// finish shows the whole answer: the reply (posted or edited) holds its
// first 2000 characters, further messages the rest.
func (st *dcStream) finish(ctx context.Context, text string) error {
	parts := splitContent(text)
	if parts[0] != st.sent || st.mid == "" {
		if err := st.show(ctx, parts[0]); err != nil {
			return err
		}
	}
	for _, p := range parts[1:] {
		if _, err := st.dc.s.discordSend(ctx, st.dc.b, st.msg.ChannelID, dcMessageOut{Content: p}); err != nil {
			return err
		}
	}
	return nil
}

// postApproval puts a pending request of the turn to the channel as a
// message with Allow and Deny buttons.
func (dc *dcConn) postApproval(ctx context.Context, channel string, req approval.Request) {
	s, b := dc.s, dc.b
	args := string(req.Args)
	if len(args) > 1200 {
		args = args[:1200] + "…"
	}
	text := fmt.Sprintf("**Approval needed**: `%s` (%s risk)\n```json\n%s\n```", req.Tool, req.Risk, strings.ReplaceAll(args, "```", "'''"))
	if req.Note != "" {
		text += "\n" + req.Note
	}
	if err := s.recordPost(ctx, s.noLease(), b, leaseKey(b.rec.BindingID), postRecord{Kind: "post", ChannelID: channel}); err != nil {
		s.log.Warn("discord approval message not posted", "bindingId", b.rec.BindingID, "requestId", req.RequestID, "err", err)
		return
	}
	// Noted before the post: a click may come before discordSend returns.
	dc.mu.Lock()
	dc.approvals[req.RequestID] = dcPosted{channel: channel, sessionID: req.SessionID, text: text}
	dc.mu.Unlock()
	id, err := s.discordSend(ctx, b, channel, dcMessageOut{Content: text, Components: []dcComponent{{Type: 1, Components: []dcComponent{
		{Type: 2, Style: dcStyleSuccess, Label: "Allow", CustomID: dcApprovalPrefix + req.RequestID + ":" + approval.DecisionAllow},
		{Type: 2, Style: dcStyleDanger, Label: "Deny", CustomID: dcApprovalPrefix + req.RequestID + ":" + approval.DecisionDeny},
	}}}})
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if err != nil {
		delete(dc.approvals, req.RequestID)
		s.setState(b, err)
		s.emit(b, EventError, map[string]any{"messageId": nil, "requestId": req.RequestID, "message": s.scrub(b, err.Error())})
		return
	}
	if p, ok := dc.approvals[req.RequestID]; ok {
		p.message = id
		dc.approvals[req.RequestID] = p
	}
}

// resolved shows how a request posted here ended and takes its buttons off.
func (dc *dcConn) resolved(ctx context.Context, res approval.Resolution) {
	dc.mu.Lock()
	p, ok := dc.approvals[res.RequestID]
	delete(dc.approvals, res.RequestID)
	dc.mu.Unlock()
	if !ok || p.message == "" {
		return
	}
	verb := "Allowed"
	if res.Decision == approval.DecisionDeny {
		verb = "Denied"
	}
	who := res.By
	if strings.HasPrefix(who, "discord:") {
		who = "<@" + strings.TrimPrefix(who, "discord:") + ">"
	}
	text := p.text + "\n" + verb + " by " + who
	if err := dc.s.discordEdit(ctx, dc.b, p.channel, p.message, dcMessageOut{Content: text}); err != nil {
		dc.s.log.Warn("discord approval message not updated", "bindingId", dc.b.rec.BindingID, "requestId", res.RequestID, "err", dc.s.scrub(dc.b, err.Error()))
	}
}

// interaction answers a button click that came over the gateway, with
// POST /interactions/{id}/{token}/callback.
func (dc *dcConn) interaction(ctx context.Context, in dcInteraction) {
	if in.Type != 3 {
		return // not a message component
	}
	dc.callback(ctx, in, dc.s.discordClick(ctx, dc.b, in))
}

// discordClick answers a button click and returns the interaction's
// answer: an approval button of a request pending in one of b's sessions
// answers it as "discord:<user id>" and is acknowledged (type 6, deferred
// update: the resolution edits the message); a refused click is answered
// with an ephemeral message (type 4, flags 64) saying why.
func (s *Service) discordClick(ctx context.Context, b *binding, in dcInteraction) map[string]any {
	u := in.user()
	refuse := func(why string) map[string]any {
		s.log.Info("discord button click refused", "bindingId", b.rec.BindingID, "customId", in.Data.CustomID, "why", why)
		return map[string]any{"type": 4, "data": map[string]any{"content": why, "flags": 64}}
	}
	rest, ok := strings.CutPrefix(in.Data.CustomID, dcApprovalPrefix)
	reqID, decision, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || (decision != approval.DecisionAllow && decision != approval.DecisionDeny) {
		return refuse("This button is not one of Trellis's approval buttons.")
	}
	if u == nil || !isSnowflake(u.ID) {
		return refuse("Who clicked is unknown.")
	}
	if (b.rec.UserID != "" && u.ID != b.rec.UserID) || (b.rec.ChannelID != "" && in.ChannelID != "" && in.ChannelID != b.rec.ChannelID) {
		return refuse("Only the bound user may answer this approval.")
	}
	if s.deps.Approvals == nil || !s.pendingHere(b, reqID) {
		return refuse("This approval request is no longer pending.")
	}
	reason := "answered on Discord by " + u.Username + " (" + u.ID + ")"
	if err := s.deps.Approvals.Respond(ctx, "discord:"+u.ID, reqID, decision, approval.ScopeOnce, reason); err != nil {
		return refuse("Not answered: " + err.Error())
	}
	s.log.Info("discord approval answered", "bindingId", b.rec.BindingID, "requestId", reqID, "decision", decision, "userId", u.ID)
	return map[string]any{"type": 6}
}

// pendingHere reports whether reqID is an approval request pending in one
// of b's sessions (its conversations', or its target session): a button
// answers nothing else (nor a paused turn's budget request, which is not
// posted: raising a budget needs the caller's role).
func (s *Service) pendingHere(b *binding, reqID string) bool {
	b.mu.Lock()
	sessions := map[string]bool{}
	if b.rec.Target.Session != "" {
		sessions[b.rec.Target.Session] = true
	}
	for _, sid := range b.rec.Conversations {
		sessions[sid] = true
	}
	b.mu.Unlock()
	for sid := range sessions {
		for _, r := range s.deps.Approvals.ListAll(sid) {
			if r.RequestID == reqID && !r.IsQuestion() && r.Tool != approval.BudgetTool {
				return true
			}
		}
	}
	return false
}

// callback answers an interaction (POST /interactions/{id}/{token}/callback).
func (dc *dcConn) callback(ctx context.Context, in dcInteraction, body any) {
	path := "/interactions/" + in.ID + "/" + in.Token + "/callback"
	if err := dc.s.discordREST(ctx, dc.b, http.MethodPost, path, "POST /interactions/{id}/{token}/callback", in.ID, body, nil); err != nil {
		dc.s.log.Warn("discord interaction not acknowledged", "bindingId", dc.b.rec.BindingID, "interactionId", in.ID,
			"err", strings.ReplaceAll(dc.s.scrub(dc.b, err.Error()), in.Token, "[token]"))
	}
}

// discordPost sends a job's answer to a Discord binding's channel.
func (s *Service) discordPost(ctx context.Context, b *binding, text string) error {
	for _, p := range splitContent(text) {
		if _, err := s.discordSend(ctx, b, b.rec.ChannelID, dcMessageOut{Content: p}); err != nil {
			return err
		}
	}
	return nil
}
