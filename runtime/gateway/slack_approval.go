package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/approval"
)

// Approvals is what the Slack, Discord and Telegram bindings need of the approval
// broker (approval.Broker) to put their turns' approval requests to the
// channel as buttons and answer them as the clicking user: the queue's
// requests, and answering them.
type Approvals interface {
	Watch(ctx context.Context) <-chan approval.QueueEvent
	List(caller, sessionID string) []approval.Request
	ListAll(sessionID string) []approval.Request
	Respond(ctx context.Context, by, requestID, decision, scope, reason string) error
}

// SlackApprover is the approver a click answers as: "slack:<user id>".
func SlackApprover(userID string) string { return "slack:" + userID }

// approvals posts each approval request of the turn's session that waits in
// the unattended queue (a gateway prompt has no origin) as a message with
// Allow and Deny buttons, and edits it to its outcome once it is resolved,
// until ctx ends (the turn is over).
func (o *slackOut) approvals(ctx context.Context, queue <-chan approval.QueueEvent) {
	posted := map[string]string{} // request id → message ts
	o.s.followApprovals(ctx, o.a.sessionID, queue, func(req approval.Request) {
		if _, ok := posted[req.RequestID]; ok {
			return
		}
		posted[req.RequestID] = ""
		ts, err := o.post(ctx, slackApprovalMessage(req))
		if err != nil {
			if ctx.Err() == nil {
				o.s.log.Warn("slack: post an approval request", "bindingId", o.b.rec.BindingID, "requestId", req.RequestID, "err", o.s.scrub(o.b, err.Error()))
			}
			return
		}
		posted[req.RequestID] = ts
	}, func(r approval.Resolution) {
		ts := posted[r.RequestID]
		if ts == "" {
			return
		}
		if err := o.update(ctx, ts, slackResolvedMessage(r)); err != nil && ctx.Err() == nil {
			o.s.log.Warn("slack: show an approval's outcome", "bindingId", o.b.rec.BindingID, "requestId", r.RequestID, "err", o.s.scrub(o.b, err.Error()))
		}
	})
}

// followApprovals calls show for each approval request of session sid
// that waits in the unattended queue (a gateway prompt has no origin),
// those pending already and those asked later, and resolved for each
// request resolved, until ctx ends (the turn is over) or queue closes.
func (s *Service) followApprovals(ctx context.Context, sid string, queue <-chan approval.QueueEvent, show func(approval.Request), resolved func(approval.Resolution)) {
	// A paused turn's budget request is not the channel's to allow: raising
	// a budget needs the caller's role (approval.respond checks it).
	ours := func(req approval.Request) bool {
		return req.SessionID == sid && req.Origin == "" && req.Tool != approval.BudgetTool
	}
	// Watched before the prompt; listed now for the ones asked meanwhile.
	for _, req := range s.deps.Approvals.List("", sid) {
		if ours(req) {
			show(req)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-queue:
			if !ok {
				return
			}
			switch {
			case ev.Pending != nil && ours(*ev.Pending):
				show(*ev.Pending)
			case ev.Resolved != nil:
				resolved(*ev.Resolved)
			}
		}
	}
}

// slackApprovalMessage is a request as a Block Kit message with buttons
// whose value is the request id.
func slackApprovalMessage(req approval.Request) map[string]any {
	args := string(req.Args)
	if len(args) > 600 {
		args = clipTo(args, 600)
	}
	what := fmt.Sprintf("*Approval needed*: the agent wants to run `%s` (%s, risk %s)", req.Tool, req.Tag, req.Risk)
	text := what + "\n```" + strings.ReplaceAll(args, "```", "'''") + "```"
	if req.Note != "" {
		text += "\n" + req.Note
	}
	button := func(label, action, style string) map[string]any {
		return map[string]any{
			"type": "button", "action_id": action, "value": req.RequestID, "style": style,
			"text": map[string]any{"type": "plain_text", "text": label},
		}
	}
	return map[string]any{
		"text": fmt.Sprintf("Approval needed: %s (%s)", req.Tool, req.RequestID),
		"blocks": []any{
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}},
			map[string]any{"type": "actions", "block_id": "trellis_approval", "elements": []any{
				button("Allow", slackActionAllow, "primary"),
				button("Deny", slackActionDeny, "danger"),
			}},
		},
	}
}

// slackResolvedMessage replaces a request's buttons by its outcome.
func slackResolvedMessage(r approval.Resolution) map[string]any {
	who := r.By
	if id, ok := strings.CutPrefix(r.By, "slack:"); ok {
		who = "<@" + id + ">"
	}
	verb := "Allowed"
	if r.Decision != approval.DecisionAllow {
		verb = "Denied"
	}
	text := fmt.Sprintf("%s by %s (%s)", verb, who, r.RequestID)
	return map[string]any{
		"text":   text,
		"blocks": []any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}}},
	}
}

func clipTo(s string, n int) string {
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// slackInteraction answers the approval a button click names, as the
// clicking user. A click on a request that is not of one of this binding's
// conversations, or by a user the binding does not take, answers nothing.
func (s *Service) slackInteraction(ctx context.Context, b *binding, a slackAction) {
	if a.Type != "block_actions" || a.User.ID == "" {
		return
	}
	if b.rec.UserID != "" && a.User.ID != b.rec.UserID {
		s.log.Warn("slack: a click by a user this binding does not take", "bindingId", b.rec.BindingID, "userId", a.User.ID)
		return
	}
	if s.deps.Approvals == nil {
		return
	}
	for _, act := range a.Actions {
		decision := ""
		switch act.ActionID {
		case slackActionAllow:
			decision = approval.DecisionAllow
		case slackActionDeny:
			decision = approval.DecisionDeny
		default:
			continue
		}
		if err := s.slackRespond(ctx, b, a, act.Value, decision); err != nil {
			s.log.Warn("slack: answer an approval", "bindingId", b.rec.BindingID, "requestId", act.Value, "userId", a.User.ID, "err", err)
			s.emit(b, EventError, map[string]any{"messageId": nil, "message": s.scrub(b, err.Error())})
		}
	}
}

// errNotThisBinding: the request a click names is not of a conversation
// of the binding.
var errNotThisBinding = errors.New("the approval request is not of this binding's conversations")

func (s *Service) slackRespond(ctx context.Context, b *binding, a slackAction, requestID, decision string) error {
	var req *approval.Request
	for _, r := range s.deps.Approvals.List("", "") {
		if r.RequestID == requestID {
			req = &r
			break
		}
	}
	if req == nil || req.Tool == approval.BudgetTool {
		return fmt.Errorf("approval request %q is not pending (answered, timed out or unknown)", requestID)
	}
	if !s.bindingSession(b, req.SessionID) {
		return fmt.Errorf("approval request %s: %w", requestID, errNotThisBinding)
	}
	name := a.User.Username
	if name == "" {
		name = a.User.Name
	}
	reason := "answered in Slack by " + a.User.ID
	if name != "" {
		reason += " (" + name + ")"
	}
	if err := s.deps.Approvals.Respond(ctx, SlackApprover(a.User.ID), requestID, decision, approval.ScopeOnce, reason); err != nil {
		return fmt.Errorf("approval request %s: %w", requestID, err)
	}
	s.log.Info("slack: approval answered", "bindingId", b.rec.BindingID, "requestId", requestID, "decision", decision, "by", SlackApprover(a.User.ID))
	return nil
}

// bindingSession reports whether sid is the bound session or the session
// of one of b's conversations (as this daemon or the store has them).
func (s *Service) bindingSession(b *binding, sid string) bool {
	if sid == "" {
		return false
	}
	if b.rec.Target.Session == sid {
		return true
	}
	b.mu.Lock()
	for _, v := range b.rec.Conversations {
		if v == sid {
			b.mu.Unlock()
			return true
		}
	}
	b.mu.Unlock()
	raw, err := s.deps.Settings.GetSetting(s.ctx, Namespace, b.rec.BindingID)
	if err != nil {
		return false
	}
	var rec record
	if json.Unmarshal(raw, &rec) != nil {
		return false
	}
	for _, v := range rec.Conversations {
		if v == sid {
			return true
		}
	}
	return false
}
