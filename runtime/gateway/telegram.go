package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/store"
)

// Telegram bindings (PlatformTelegram). The daemon holding the binding's
// lease long-polls getUpdates for messages and callback queries (button
// clicks). A message's turn runs beside the poller, one message after the
// other, so that a click on one of its approval requests is taken while it
// waits. The answer is sent with sendMessage as a reply to the message as
// soon as its first text is there and edited with editMessageText as it
// streams, at most every Options.TelegramEditInterval; an answer longer
// than a message holds goes on in further messages. The approval requests
// of the turn are sent with an inline keyboard (Allow, Deny); a click of
// the bound user in the bound chat answers the request as
// "telegram:<user id>", scope once, and the message is edited to say so.

// tgMaxText is how long a message's text may be: 4096 characters, which
// Telegram counts in UTF-16 code units.
const tgMaxText = 4096

// tgCallbackPrefix starts the callback_data of an approval button:
// "ap:<requestId>:allow|deny", at most tgMaxCallbackData bytes.
const (
	tgCallbackPrefix  = "ap:"
	tgMaxCallbackData = 64
)

// tgQueue bounds the messages taken and not yet answered; the poller
// waits for room.
const tgQueue = 64

// TelegramApprover is the approver a click answers as: "telegram:<user id>".
func TelegramApprover(userID int64) string { return "telegram:" + strconv.FormatInt(userID, 10) }

// tgUpdate is the part of a Bot API Update the gateway reads.
type tgUpdate struct {
	UpdateID      int64            `json:"update_id"`
	Message       *tgMessage       `json:"message"`
	CallbackQuery *tgCallbackQuery `json:"callback_query"`
}

// tgMessage is the part of a Bot API Message the gateway reads.
type tgMessage struct {
	MessageID int64  `json:"message_id"`
	Text      string `json:"text"`
	Chat      struct {
		ID int64 `json:"id"`
	} `json:"chat"`
	From *tgUser `json:"from"`
}

type tgUser struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
}

// tgCallbackQuery is a click on an inline keyboard button.
type tgCallbackQuery struct {
	ID      string     `json:"id"`
	From    tgUser     `json:"from"`
	Message *tgMessage `json:"message"` // the message with the button (absent when too old)
	Data    string     `json:"data"`
}

// tgResponse is the Bot API envelope.
type tgResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// pollTelegram long-polls getUpdates until ctx ends: text messages of the
// bound chat (and user) are answered in order by one goroutine, clicks are
// taken at once. Failures put the binding in state error and are retried
// with a capped backoff.
func (s *Service) pollTelegram(ctx context.Context, b *binding) {
	work := make(chan *tgMessage, tgQueue)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-work:
				s.handleTelegram(ctx, b, m)
			}
		}
	}()
	// The offset is persisted, so that a restart does not answer the
	// messages it already took again.
	var offset int64
	s.loadLeased(ctx, OffsetNamespace, b.rec.BindingID, &offset)
	backoff := time.Second
	for ctx.Err() == nil {
		var ups []tgUpdate
		q := url.Values{"timeout": {strconv.Itoa(int(s.opts.PollTimeout / time.Second))}, "allowed_updates": {`["message","callback_query"]`}}
		if offset > 0 {
			q.Set("offset", strconv.FormatInt(offset, 10))
		}
		err := s.telegram(ctx, b, "getUpdates", q, nil, &ups)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.setState(b, err)
			s.log.Warn("telegram getUpdates failed", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		s.setState(b, nil)
		for _, u := range ups {
			if u.UpdateID < offset {
				continue // taken before a restart
			}
			offset = u.UpdateID + 1
			// Saved before the answer: a restart mid-answer skips this
			// update rather than answering it twice. Under the binding's
			// lease: a poller that lost it answers nothing more.
			if err := s.saveOffset(ctx, b, offset); errors.Is(err, store.ErrLeaseLost) || errors.Is(err, errNotOwner) {
				s.log.Warn("telegram poller stopped: the binding's lease is lost", "bindingId", b.rec.BindingID, "err", err)
				return
			}
			switch {
			case u.CallbackQuery != nil:
				s.telegramClick(ctx, b, *u.CallbackQuery)
			case u.Message != nil:
				select {
				case work <- u.Message:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// OffsetNamespace holds each Telegram binding's next update offset.
const OffsetNamespace = "gateway.telegram.offset"

// saveOffset stores b's next update offset, fenced by b's lease when
// daemons share the store (a deposed poller's offset is refused: the new
// holder's stays).
func (s *Service) saveOffset(ctx context.Context, b *binding, off int64) error {
	err := s.saveLeased(ctx, b, OffsetNamespace, "the offset", off)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("save the telegram update offset", "bindingId", b.rec.BindingID, "err", err)
	}
	return err
}

// handleTelegram answers a text message of the bound chat (and user).
func (s *Service) handleTelegram(ctx context.Context, b *binding, m *tgMessage) {
	if m.Text == "" {
		return
	}
	chat := strconv.FormatInt(m.Chat.ID, 10)
	user := ""
	if m.From != nil {
		user = strconv.FormatInt(m.From.ID, 10)
	}
	if (b.rec.ChannelID != "" && chat != b.rec.ChannelID) || (b.rec.UserID != "" && user != b.rec.UserID) {
		return
	}
	msg := message{ID: strconv.FormatInt(m.MessageID, 10), Text: m.Text, ChannelID: chat, UserID: user}
	s.emit(b, EventMessage, map[string]any{"messageId": msg.ID, "channelId": msg.ChannelID, "userId": msg.UserID, "text": msg.Text})
	a, err := s.telegramTurn(ctx, b, msg, m.Chat.ID, m.MessageID)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotPosted) {
			s.notReplied(b, msg, err) // another daemon answers the chat now
			return
		}
		s.setState(b, err)
		s.emit(b, EventError, map[string]any{"messageId": msg.ID, "sessionId": a.sessionID, "message": s.scrub(b, err.Error())})
		return
	}
	s.replied(b, msg, a)
}

// telegramTurn runs m's turn, streaming the answer into the chat as a
// reply to the message, and sending the turn's approval requests there.
func (s *Service) telegramTurn(ctx context.Context, b *binding, m message, chat, replyTo int64) (answered, error) {
	t, err := s.startTurn(ctx, b, m, true)
	if err != nil {
		return t.a, err
	}
	a := t.a
	out := &tgOut{s: s, b: b, m: m, chat: chat}
	if t.queue != nil {
		t.runBeside(func(ctx context.Context) { out.approvals(ctx, t.queue, a.sessionID) })
	}
	defer t.close()
	st := newAnswerStream(answerOut{
		post: func(ctx context.Context, text string) (string, error) {
			id, err := out.send(ctx, map[string]any{"text": text, "reply_to_message_id": replyTo})
			return strconv.FormatInt(id, 10), err
		},
		edit: func(ctx context.Context, id, text string) error {
			mid, _ := strconv.ParseInt(id, 10, 64)
			return out.edit(ctx, mid, text)
		},
		shown: func(text string) string { return splitTelegram(text)[0] },
		warn: func(err error) {
			s.log.Warn("telegram: stream the answer", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
		},
	})
	text, final, ferr, perr := st.streamTurn(ctx, t, s.opts.TelegramEditInterval, func(reason string) string {
		return "(" + s.scrub(b, reason) + ")"
	})
	a.text = text
	// The rest of a long answer follows in further messages.
	for _, part := range splitTelegram(final)[1:] {
		if perr != nil {
			break
		}
		_, perr = out.send(ctx, map[string]any{"text": part})
	}
	if ferr != nil {
		return a, ferr
	}
	return a, perr
}

// tgOut sends into one conversation's chat under its guard.
type tgOut struct {
	s    *Service
	b    *binding
	m    message
	chat int64
}

// guard records a post before it is made, under the binding's lease (its
// holder polls the chat).
func (o *tgOut) guard(ctx context.Context) error {
	if err := o.s.recordPost(ctx, o.s.noLease(), o.b, leaseKey(o.b.rec.BindingID), postRecord{Kind: "reply", ChannelID: o.m.ChannelID, ReplyTo: o.m.ID}); err != nil {
		return fmt.Errorf("%w: %w", errNotPosted, err)
	}
	return nil
}

// send sends a message (body's text and markup) to the chat and returns
// its message_id.
func (o *tgOut) send(ctx context.Context, body map[string]any) (int64, error) {
	if err := o.guard(ctx); err != nil {
		return 0, err
	}
	body["chat_id"] = o.chat
	var sent tgMessage
	if err := o.s.telegram(ctx, o.b, "sendMessage", nil, body, &sent); err != nil {
		return 0, err
	}
	return sent.MessageID, nil
}

// edit replaces a message's text; its inline keyboard, if any, goes.
func (o *tgOut) edit(ctx context.Context, messageID int64, text string) error {
	if err := o.guard(ctx); err != nil {
		return err
	}
	return o.s.telegram(ctx, o.b, "editMessageText", nil, map[string]any{"chat_id": o.chat, "message_id": messageID, "text": text}, nil)
}

// approvals sends each approval request of the turn's session with Allow
// and Deny buttons. A click shows its outcome itself (telegramClick); a
// request resolved otherwise (timed out, answered elsewhere) while the
// turn runs is shown here.
func (o *tgOut) approvals(ctx context.Context, queue <-chan approval.QueueEvent, sid string) {
	type sent struct {
		id   int64
		text string
	}
	posted := map[string]sent{}
	o.s.followApprovals(ctx, sid, queue, func(req approval.Request) {
		if _, ok := posted[req.RequestID]; ok || req.IsQuestion() {
			return
		}
		posted[req.RequestID] = sent{}
		body, err := telegramApprovalMessage(req)
		var id int64
		if err == nil {
			id, err = o.send(ctx, body)
		}
		if err != nil {
			if ctx.Err() == nil {
				o.s.log.Warn("telegram: send an approval request", "bindingId", o.b.rec.BindingID, "requestId", req.RequestID, "err", o.s.scrub(o.b, err.Error()))
			}
			return
		}
		posted[req.RequestID] = sent{id: id, text: body["text"].(string)}
	}, func(r approval.Resolution) {
		p := posted[r.RequestID]
		if p.id == 0 || strings.HasPrefix(r.By, "telegram:") {
			return
		}
		if err := o.edit(ctx, p.id, p.text+"\n\n"+resolvedLine(r)); err != nil && ctx.Err() == nil {
			o.s.log.Warn("telegram: show an approval's outcome", "bindingId", o.b.rec.BindingID, "requestId", r.RequestID, "err", o.s.scrub(o.b, err.Error()))
		}
	})
}

// telegramApprovalMessage is a request as a plain text message with an
// inline keyboard whose callback_data names the request and the decision.
func telegramApprovalMessage(req approval.Request) (map[string]any, error) {
	button := func(label, decision string) map[string]any {
		return map[string]any{"text": label, "callback_data": tgCallbackPrefix + req.RequestID + ":" + decision}
	}
	allow, deny := button("Allow", approval.DecisionAllow), button("Deny", approval.DecisionDeny)
	if len(deny["callback_data"].(string)) > tgMaxCallbackData {
		return nil, fmt.Errorf("request id %q is too long for a button's callback_data (%d bytes at most)", req.RequestID, tgMaxCallbackData)
	}
	args := string(req.Args)
	if len(args) > 1200 {
		args = clipTo(args, 1200)
	}
	text := fmt.Sprintf("Approval needed: the agent wants to run %s (%s, risk %s)\n\n%s", req.Tool, req.Tag, req.Risk, args)
	if req.Note != "" {
		text += "\n\n" + req.Note
	}
	return map[string]any{
		"text":         text,
		"reply_markup": map[string]any{"inline_keyboard": []any{[]any{allow, deny}}},
	}, nil
}

// resolvedLine says how a request ended and who answered it.
func resolvedLine(r approval.Resolution) string {
	verb := "Allowed"
	if r.Decision != approval.DecisionAllow {
		verb = "Denied"
	}
	return verb + " by " + r.By
}

// parseTelegramCallback reads an approval button's callback_data.
func parseTelegramCallback(data string) (requestID, decision string, ok bool) {
	rest, ok := strings.CutPrefix(data, tgCallbackPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", "", false
	}
	requestID, decision = rest[:i], rest[i+1:]
	if decision != approval.DecisionAllow && decision != approval.DecisionDeny {
		return "", "", false
	}
	return requestID, decision, true
}

// telegramClick answers a button click: an approval button of a request
// pending in one of b's sessions, clicked by the bound user in the bound
// chat, answers it as "telegram:<user id>" (scope once) and the message is
// edited to its outcome without buttons. The callback query is always
// answered (Telegram shows a spinner until it is); a refused click with an
// alert saying why.
func (s *Service) telegramClick(ctx context.Context, b *binding, q tgCallbackQuery) {
	ack := func(text string, alert bool) {
		if err := s.telegram(ctx, b, "answerCallbackQuery", nil, map[string]any{"callback_query_id": q.ID, "text": text, "show_alert": alert}, nil); err != nil && ctx.Err() == nil {
			s.log.Warn("telegram: answer a callback query", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
		}
	}
	refuse := func(why string) {
		s.log.Info("telegram button click refused", "bindingId", b.rec.BindingID, "data", q.Data, "userId", q.From.ID, "why", why)
		ack(why, true)
	}
	reqID, decision, ok := parseTelegramCallback(q.Data)
	if !ok {
		refuse("This button is not one of Trellis's approval buttons.")
		return
	}
	user := strconv.FormatInt(q.From.ID, 10)
	chat := ""
	if q.Message != nil {
		chat = strconv.FormatInt(q.Message.Chat.ID, 10)
	}
	if (b.rec.UserID != "" && user != b.rec.UserID) || (b.rec.ChannelID != "" && chat != b.rec.ChannelID) {
		refuse("Only the bound user may answer this approval.")
		return
	}
	if s.deps.Approvals == nil || !s.pendingHere(b, reqID) {
		refuse("This approval request is no longer pending.")
		return
	}
	reason := "answered on Telegram by " + user
	if q.From.Username != "" {
		reason += " (" + q.From.Username + ")"
	}
	by := TelegramApprover(q.From.ID)
	if err := s.deps.Approvals.Respond(ctx, by, reqID, decision, approval.ScopeOnce, reason); err != nil {
		refuse("Not answered: " + err.Error())
		return
	}
	s.log.Info("telegram approval answered", "bindingId", b.rec.BindingID, "requestId", reqID, "decision", decision, "by", by)
	line := resolvedLine(approval.Resolution{RequestID: reqID, Decision: decision, By: by})
	ack(line, false)
	if q.Message == nil {
		return
	}
	out := &tgOut{s: s, b: b, m: message{ChannelID: chat}, chat: q.Message.Chat.ID}
	if err := out.edit(ctx, q.Message.MessageID, q.Message.Text+"\n\n"+line); err != nil && ctx.Err() == nil {
		s.log.Warn("telegram: show an approval's outcome", "bindingId", b.rec.BindingID, "requestId", reqID, "err", s.scrub(b, err.Error()))
	}
}

// splitTelegram cuts text into messages Telegram takes (tgMaxText UTF-16
// code units each), at a line break near the limit when there is one.
func splitTelegram(text string) []string {
	var out []string
	for {
		units, cut, nl, nlUnits := 0, len(text), -1, 0
		for i, r := range text {
			w := 1
			if r >= 0x10000 {
				w = 2
			}
			if units+w > tgMaxText {
				cut = i
				break
			}
			units += w
			if r == '\n' {
				nl, nlUnits = i+1, units
			}
		}
		if cut == len(text) {
			return append(out, text)
		}
		if nl > 0 && units-nlUnits < 400 {
			cut = nl
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
}

// telegram calls a Bot API method: a GET with q, or a JSON POST of body.
// An answer 429 is waited out (retry_after, a few times). Its errors
// never carry the URL, which holds the bot token.
func (s *Service) telegram(ctx context.Context, b *binding, method string, q url.Values, body any, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		env, status, err := s.telegramOnce(ctx, b, method, q, raw)
		if err != nil {
			return err
		}
		if status == http.StatusTooManyRequests && attempt < 4 {
			wait := time.Second
			if env.Parameters != nil && env.Parameters.RetryAfter > 0 {
				wait = min(time.Duration(env.Parameters.RetryAfter)*time.Second, time.Minute)
			}
			s.log.Info("telegram rate limit: waiting", "bindingId", b.rec.BindingID, "method", method, "retryAfter", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		if !env.OK {
			return fmt.Errorf("telegram %s: HTTP %d: %s", method, status, s.scrub(b, env.Description))
		}
		if out != nil {
			if err := json.Unmarshal(env.Result, out); err != nil {
				return fmt.Errorf("telegram %s: unexpected result: %w", method, err)
			}
		}
		return nil
	}
}

// telegramOnce makes one Bot API call and reads its envelope.
func (s *Service) telegramOnce(ctx context.Context, b *binding, method string, q url.Values, body []byte) (tgResponse, int, error) {
	var env tgResponse
	u := s.opts.TelegramAPI + "/bot" + b.secret + "/" + method
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u+"?"+q.Encode(), nil)
	}
	if err != nil {
		return env, 0, fmt.Errorf("telegram %s: bad API base URL", method)
	}
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return env, 0, s.unanswered(b, "telegram "+method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return env, 0, fmt.Errorf("telegram %s: read the answer: %w", method, err)
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return env, 0, fmt.Errorf("telegram %s: HTTP %d, not a Bot API answer", method, resp.StatusCode)
	}
	return env, resp.StatusCode, nil
}
