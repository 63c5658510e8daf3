package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// SignatureHeader carries the HMAC-SHA256 of a webhook request's body.
const SignatureHeader = "X-Trellis-Signature"

// maxWebhookBody bounds an inbound webhook request.
const maxWebhookBody = 1 << 20

// WebhookMessage is the body of an inbound webhook request.
type WebhookMessage struct {
	Text      string `json:"text"`
	MessageID string `json:"messageId,omitempty"`
	ChannelID string `json:"channelId,omitempty"`
	UserID    string `json:"userId,omitempty"`
	// ReplyURL receives the answer as a JSON POST of WebhookReply.
	ReplyURL string `json:"replyUrl,omitempty"`
	// Wait asks for the answer as the HTTP response instead.
	Wait bool `json:"wait,omitempty"`
}

// WebhookReply is the answer posted back (or returned when Wait).
type WebhookReply struct {
	BindingID string `json:"bindingId"`
	Text      string `json:"text"`
	InReplyTo string `json:"inReplyTo"`
}

// Sign returns the X-Trellis-Signature value of body under key.
func Sign(key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// verify checks a signature header in constant time.
func verify(key string, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(key, body)), []byte(strings.TrimSpace(header)))
}

// receiver is the webhook receiver's handler.
func (s *Service) receiver() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/gateway/webhook/{bindingId}", s.serveWebhook)
	mux.HandleFunc("POST /v1/gateway/slack/{bindingId}", s.serveSlack)
	mux.HandleFunc("POST /v1/gateway/discord/{bindingId}/interactions", s.serveDiscordInteraction)
	return mux
}

// inbound is the binding of platform an inbound request's path names
// (and its id); nil when there is none, answered 404.
func (s *Service) inbound(w http.ResponseWriter, r *http.Request, platform string) (*binding, string) {
	id := r.PathValue("bindingId")
	s.mu.Lock()
	b := s.bindings[id]
	s.mu.Unlock()
	if b == nil || b.rec.Platform != platform {
		httpError(w, http.StatusNotFound, "no "+platform+" binding "+id)
		return nil, id
	}
	return b, id
}

// readBody reads an inbound request's body, at most maxWebhookBody; false
// when it could not (answered 413).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, "the body is unreadable or larger than 1 MiB")
		return nil, false
	}
	return body, true
}

func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	b, id := s.inbound(w, r, PlatformWebhook)
	if b == nil {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if b.secret == "" || !verify(b.secret, body, r.Header.Get(SignatureHeader)) {
		// Checked before the body is parsed: nothing unauthenticated is read.
		httpError(w, http.StatusUnauthorized, "missing or bad "+SignatureHeader+": want sha256=<hex HMAC-SHA256 of the body keyed by the binding's credential>")
		return
	}
	var m WebhookMessage
	if err := json.Unmarshal(body, &m); err != nil || strings.TrimSpace(m.Text) == "" {
		httpError(w, http.StatusBadRequest, `the body must be JSON {"text": "...", "channelId"?, "userId"?, "replyUrl"?, "wait"?} with a non-empty text`)
		return
	}
	if (b.rec.ChannelID != "" && m.ChannelID != "" && m.ChannelID != b.rec.ChannelID) || (b.rec.UserID != "" && m.UserID != b.rec.UserID) {
		httpError(w, http.StatusForbidden, "this binding does not accept messages of that channel or user")
		return
	}
	if m.ChannelID == "" {
		m.ChannelID = b.rec.ChannelID
	}
	if m.MessageID == "" {
		m.MessageID = ids.New("m")
	}
	if !m.Wait && m.ReplyURL == "" {
		httpError(w, http.StatusBadRequest, `give a "replyUrl" for the answer, or "wait": true to receive it as the response`)
		return
	}
	msg := message{ID: m.MessageID, Text: m.Text, ChannelID: m.ChannelID, UserID: m.UserID}
	if m.Wait {
		// The wait also ends when the service closes, so that Close does
		// not hang on a turn.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		a, err := s.answer(ctx, b, msg)
		if err != nil {
			s.setState(b, err)
			httpError(w, http.StatusBadGateway, s.scrub(b, err.Error()))
			return
		}
		if err := s.reply(ctx, b, msg, a); err != nil {
			s.notReplied(b, msg, err)
			httpError(w, http.StatusConflict, s.scrub(b, err.Error()))
			return
		}
		s.replied(b, msg, a)
		writeJSON(w, http.StatusOK, WebhookReply{BindingID: id, Text: a.text, InReplyTo: msg.ID})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"bindingId": id, "messageId": msg.ID})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx := s.ctx
		a, err := s.answer(ctx, b, msg)
		if err != nil {
			s.setState(b, err)
			return
		}
		if err := s.reply(ctx, b, msg, a); err != nil {
			s.notReplied(b, msg, err)
			return
		}
		err = s.postJSON(ctx, m.ReplyURL, WebhookReply{BindingID: id, Text: a.text, InReplyTo: msg.ID})
		s.setState(b, err)
		if err != nil {
			s.emit(b, EventError, map[string]any{"messageId": msg.ID, "message": s.scrub(b, err.Error())})
			return
		}
		s.replied(b, msg, a)
	}()
}

// notReplied says why the reply to msg was not made: its guard refused it.
// Losing the lease is not the binding's error (another daemon serves the
// session now); failing to record the reply is.
func (s *Service) notReplied(b *binding, msg message, err error) {
	if !errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, errNotOwner) {
		s.setState(b, err)
	}
	s.log.Warn("gateway reply not made", "bindingId", b.rec.BindingID, "messageId", msg.ID, "err", err)
	s.emit(b, EventError, map[string]any{"messageId": msg.ID, "message": s.scrub(b, err.Error())})
}

// postJSON posts v to url and wants a 2xx answer.
func (s *Service) postJSON(ctx context.Context, url string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("reply URL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post the reply: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post the reply: HTTP %d", resp.StatusCode)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
