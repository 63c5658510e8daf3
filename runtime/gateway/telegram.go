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
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// tgUpdate is the part of a Bot API Update the gateway reads.
type tgUpdate struct {
	UpdateID int64 `json:"update_id"`
	Message  *struct {
		MessageID int64  `json:"message_id"`
		Text      string `json:"text"`
		Chat      struct {
			ID int64 `json:"id"`
		} `json:"chat"`
		From *struct {
			ID int64 `json:"id"`
		} `json:"from"`
	} `json:"message"`
}

// tgResponse is the Bot API envelope.
type tgResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	Description string          `json:"description"`
}

// pollTelegram long-polls getUpdates until ctx ends, answering each text
// message of the bound chat (and user) in order. Failures put the binding
// in state error and are retried with a capped backoff.
func (s *Service) pollTelegram(ctx context.Context, b *binding) {
	// The offset is persisted, so that a restart does not answer the
	// messages it already took again.
	offset := s.loadOffset(ctx, b.rec.BindingID)
	backoff := time.Second
	for ctx.Err() == nil {
		var ups []tgUpdate
		q := url.Values{"timeout": {strconv.Itoa(int(s.opts.PollTimeout / time.Second))}, "allowed_updates": {`["message"]`}}
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
			// message rather than answering it twice. Under the binding's
			// lease: a poller that lost it answers nothing more.
			if err := s.saveOffset(ctx, b, offset); errors.Is(err, store.ErrLeaseLost) || errors.Is(err, errNotOwner) {
				s.log.Warn("telegram poller stopped: the binding's lease is lost", "bindingId", b.rec.BindingID, "err", err)
				return
			}
			s.handleTelegram(ctx, b, u)
		}
	}
}

// OffsetNamespace holds each Telegram binding's next update offset.
const OffsetNamespace = "gateway.telegram.offset"

func (s *Service) loadOffset(ctx context.Context, bindingID string) int64 {
	raw, err := s.deps.Settings.GetSetting(ctx, OffsetNamespace, bindingID)
	if err != nil {
		return 0
	}
	var off int64
	if json.Unmarshal(raw, &off) != nil {
		return 0
	}
	return off
}

// saveOffset stores b's next update offset, fenced by b's lease when
// daemons share the store (a deposed poller's offset is refused: the new
// holder's stays).
func (s *Service) saveOffset(ctx context.Context, b *binding, off int64) error {
	id := b.rec.BindingID
	if s.deps.Leases != nil {
		f, ok := s.deps.Leases.Fence(leaseKey(id))
		if !ok {
			return fmt.Errorf("save the offset of binding %s: %w %s", id, errNotOwner, leaseKey(id))
		}
		ctx = store.WithFences(ctx, map[string]store.Fence{leaseKey(id): f})
	}
	raw, _ := json.Marshal(off)
	err := s.deps.Settings.PutSetting(ctx, OffsetNamespace, id, raw)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("save the telegram update offset", "bindingId", id, "err", err)
	}
	return err
}

func (s *Service) handleTelegram(ctx context.Context, b *binding, u tgUpdate) {
	m := u.Message
	if m == nil || m.Text == "" {
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
	a, err := s.answer(ctx, b, msg)
	if err != nil {
		if ctx.Err() == nil {
			s.setState(b, err)
		}
		return
	}
	text := a.text
	if text == "" {
		text = "(no answer)"
	}
	// Recorded under the binding's lease before it is sent: a daemon
	// deposed while the turn ran (another one polls the channel now)
	// sends nothing.
	if err := s.recordPost(ctx, b, leaseKey(b.rec.BindingID), postRecord{Kind: "reply", ChannelID: chat, ReplyTo: msg.ID}); err != nil {
		s.notReplied(b, msg, err)
		return
	}
	err = s.telegram(ctx, b, "sendMessage", nil, map[string]any{
		"chat_id": m.Chat.ID, "text": text, "reply_to_message_id": m.MessageID,
	}, nil)
	if err != nil {
		s.setState(b, err)
		s.emit(b, EventError, map[string]any{"messageId": msg.ID, "message": s.scrub(b, err.Error())})
		return
	}
	s.replied(b, msg, a)
}

// telegram calls a Bot API method: a GET with q, or a JSON POST of body.
// Its errors never carry the URL, which holds the bot token.
func (s *Service) telegram(ctx context.Context, b *binding, method string, q url.Values, body any, out any) error {
	u := s.opts.TelegramAPI + "/bot" + b.secret + "/" + method
	var req *http.Request
	var err error
	if body != nil {
		raw, merr := json.Marshal(body)
		if merr != nil {
			return merr
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(raw))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u+"?"+q.Encode(), nil)
	}
	if err != nil {
		return fmt.Errorf("telegram %s: bad API base URL", method)
	}
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("telegram %s: %s", method, s.scrub(b, err.Error()))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("telegram %s: read the answer: %w", method, err)
	}
	var env tgResponse
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("telegram %s: HTTP %d, not a Bot API answer", method, resp.StatusCode)
	}
	if !env.OK {
		return fmt.Errorf("telegram %s: HTTP %d: %s", method, resp.StatusCode, s.scrub(b, env.Description))
	}
	if out != nil {
		if err := json.Unmarshal(env.Result, out); err != nil {
			return fmt.Errorf("telegram %s: unexpected result: %w", method, err)
		}
	}
	return nil
}
