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
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// Slack bindings (PlatformSlack). A binding's inbound side is either Socket
// Mode (SlackModeSocket: the daemon holding the binding's lease opens a
// WebSocket session with apps.connections.open and acknowledges each
// envelope) or the Events API over HTTP (SlackModeEvents: Slack POSTs
// signed requests to the receiver's /v1/gateway/slack/{bindingId}, events
// and interactive payloads alike). Messages and app mentions of a channel
// or thread are one conversation per channel and thread, each with its own
// session; the answer is posted into the thread with chat.postMessage and
// streamed there with chat.update at most every
// Options.SlackUpdateInterval. The approval requests of a conversation's
// turn are posted as Block Kit buttons; a click answers the request as
// "slack:<user id>". An event is answered once, across retries and
// daemons: its event_id and its message (channel and ts) are recorded in
// the store first (SlackSeenNamespace).

// Slack binding modes.
const (
	SlackModeSocket = "socket"
	SlackModeEvents = "events"
)

// Slack's request signing (Events API over HTTP and interactivity).
const (
	SlackSignatureHeader = "X-Slack-Signature"
	SlackTimestampHeader = "X-Slack-Request-Timestamp"
	SlackRetryHeader     = "X-Slack-Retry-Num"
	// SlackMaxSkew is how far a request's timestamp may be from now.
	SlackMaxSkew = 5 * time.Minute
)

// SlackSeenNamespace holds, per Slack binding, the events and messages
// recently taken (so that a retry or a second daemon takes none again).
const SlackSeenNamespace = "gateway.slack.seen"

// slackSeenKeep is how long a taken event is remembered (Slack retries
// within minutes), and slackSeenMax how many at most.
const (
	slackSeenKeep = 2 * time.Hour
	slackSeenMax  = 5000
)

// Button action ids of an approval message.
const (
	slackActionAllow = "trellis_approval_allow"
	slackActionDeny  = "trellis_approval_deny"
)

// slackMaxText bounds the text of one Slack message (Slack's limit is
// 40,000 characters).
const slackMaxText = 39000

// slackState is a Slack binding's tokens and mode.
type slackState struct {
	botToken      string // xoxb-…: the Web API
	signingSecret string // verifies the Events API's requests
	appToken      string // xapp-…: apps.connections.open
	mode          string

	seenMu sync.Mutex // serializes the seen record on a store without SettingUpdater
}

// tokens are the values scrub hides.
func (st *slackState) tokens() []string {
	var out []string
	for _, v := range []string{st.botToken, st.signingSecret, st.appToken} {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// parseSlackCredential reads a Slack credential: lines of name=value with
// the names bot_token, signing_secret and app_token (also spelled
// SLACK_BOT_TOKEN, ...; blank lines and # comments are skipped), or one
// bare bot token, whose signing secret and app-level token are then the
// environment's SLACK_SIGNING_SECRET and SLACK_APP_TOKEN. Errors name the
// field, never a value.
func parseSlackCredential(secret string, getenv func(string) string) (*slackState, error) {
	st := &slackState{}
	secret = strings.TrimSpace(secret)
	if !strings.Contains(secret, "=") && !strings.ContainsAny(secret, "\n\r") {
		st.botToken = secret
		st.signingSecret = strings.TrimSpace(getenv("SLACK_SIGNING_SECRET"))
		st.appToken = strings.TrimSpace(getenv("SLACK_APP_TOKEN"))
	} else {
		for n, line := range strings.Split(secret, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, value, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("line %d is not name=value", n+1)
			}
			name = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(name)), "slack_")
			value = strings.Trim(strings.TrimSpace(value), `"'`)
			switch name {
			case "bot_token":
				st.botToken = value
			case "signing_secret":
				st.signingSecret = value
			case "app_token":
				st.appToken = value
			default:
				return nil, fmt.Errorf("line %d: unknown name %q (want bot_token, signing_secret or app_token)", n+1, name)
			}
		}
	}
	if !strings.HasPrefix(st.botToken, "xoxb-") {
		return nil, errors.New("bot_token: want a bot token (xoxb-…)")
	}
	if st.appToken != "" && !strings.HasPrefix(st.appToken, "xapp-") {
		return nil, errors.New("app_token: want an app-level token (xapp-…)")
	}
	return st, nil
}

// slackBinding checks a Slack binding's credential against its mode (rec's;
// "" is set to the one the credential allows) and returns its state.
func (s *Service) slackBinding(rec *record, secret string) (*slackState, error) {
	st, err := parseSlackCredential(secret, s.opts.Getenv)
	if err != nil {
		return nil, errs.New(errcode.InvalidParams, "credentialsRef %q: not a Slack credential: %v", rec.CredentialsRef, err)
	}
	if rec.Mode == "" {
		rec.Mode = SlackModeEvents
		if st.appToken != "" {
			rec.Mode = SlackModeSocket
		}
	}
	switch rec.Mode {
	case SlackModeSocket:
		if st.appToken == "" {
			return nil, errs.New(errcode.InvalidParams, "credentialsRef %q: mode socket needs an app-level token (app_token=xapp-… in the credential, or SLACK_APP_TOKEN)", rec.CredentialsRef)
		}
	case SlackModeEvents:
		if st.signingSecret == "" {
			return nil, errs.New(errcode.InvalidParams, "credentialsRef %q: mode events needs the app's signing secret (signing_secret=… in the credential, or SLACK_SIGNING_SECRET)", rec.CredentialsRef)
		}
	default:
		return nil, errs.New(errcode.InvalidParams, "mode %q is not one of socket, events", rec.Mode)
	}
	st.mode = rec.Mode
	return st, nil
}

// SlackSign returns the X-Slack-Signature of a request: v0= and the hex
// HMAC-SHA256 of "v0:{timestamp}:{body}" keyed by the signing secret.
func SlackSign(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + timestamp + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// verifySlack checks a request's signature (in constant time) and that its
// timestamp is within SlackMaxSkew of now.
func verifySlack(secret, timestamp string, body []byte, signature string, now time.Time) error {
	if secret == "" {
		return errors.New("the binding has no signing secret")
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("missing or bad %s", SlackTimestampHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > SlackMaxSkew || d < -SlackMaxSkew {
		return fmt.Errorf("%s is more than 5 minutes from now", SlackTimestampHeader)
	}
	if !hmac.Equal([]byte(SlackSign(secret, strings.TrimSpace(timestamp), body)), []byte(strings.TrimSpace(signature))) {
		return fmt.Errorf("bad %s", SlackSignatureHeader)
	}
	return nil
}

// slackEnvelope is an Events API request body (and a Socket Mode
// events_api payload).
type slackEnvelope struct {
	Type      string      `json:"type"` // url_verification, event_callback
	Challenge string      `json:"challenge"`
	EventID   string      `json:"event_id"`
	Event     *slackEvent `json:"event"`
}

// slackEvent is the part of a message or app_mention event the gateway reads.
type slackEvent struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	User     string `json:"user"`
	BotID    string `json:"bot_id"`
	Text     string `json:"text"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts"`
}

// slackAction is a block_actions interactive payload.
type slackAction struct {
	Type string `json:"type"`
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		Name     string `json:"name"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
}

// parseSlackEnvelope reads an Events API body.
func parseSlackEnvelope(body []byte) (slackEnvelope, error) {
	var env slackEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("not an Events API body: %w", err)
	}
	if env.Type == "" {
		return env, errors.New("not an Events API body: no type")
	}
	return env, nil
}

// parseSlackInteraction reads an interactive request's body: the
// form-encoded payload field, a JSON block_actions payload.
func parseSlackInteraction(body []byte) (slackAction, error) {
	var a slackAction
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return a, fmt.Errorf("not a form body: %w", err)
	}
	raw := form.Get("payload")
	if raw == "" {
		return a, errors.New("no payload field")
	}
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return a, fmt.Errorf("payload is not JSON: %w", err)
	}
	return a, nil
}

// serveSlack is an Events API binding's request URL, for events and
// interactivity alike. Nothing runs before the signature is checked.
func (s *Service) serveSlack(w http.ResponseWriter, r *http.Request) {
	b, id := s.inbound(w, r, PlatformSlack)
	if b == nil {
		return
	}
	if b.slack == nil {
		httpError(w, http.StatusServiceUnavailable, "slack binding "+id+" has no usable credential (gateway.list shows why)")
		return
	}
	if b.slack.mode != SlackModeEvents {
		httpError(w, http.StatusNotFound, "slack binding "+id+" is not in mode events: it has no request URL")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if err := verifySlack(b.slack.signingSecret, r.Header.Get(SlackTimestampHeader), body, r.Header.Get(SlackSignatureHeader), time.Now()); err != nil {
		httpError(w, http.StatusUnauthorized, err.Error()+": want "+SlackSignatureHeader+": v0=<hex HMAC-SHA256 of v0:{timestamp}:{body} keyed by the signing secret>")
		return
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		a, err := parseSlackInteraction(body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "interactive request: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
		s.goSlack(func(ctx context.Context) { s.slackInteraction(ctx, b, a) })
		return
	}
	env, err := parseSlackEnvelope(body)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch env.Type {
	case "url_verification":
		writeJSON(w, http.StatusOK, map[string]string{"challenge": env.Challenge})
	case "event_callback":
		// Acknowledged at once (Slack wants an answer within 3 s); the
		// turn runs after.
		w.WriteHeader(http.StatusOK)
		s.goSlack(func(ctx context.Context) { s.slackEventCallback(ctx, b, env) })
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// goSlack runs fn in the background until the service closes.
func (s *Service) goSlack(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

// leadingMention is the bot's mention that begins an app_mention's text.
var leadingMention = regexp.MustCompile(`^\s*<@[A-Z0-9]+(\|[^>]*)?>\s*`)

// slackEventCallback answers a message or app mention once.
func (s *Service) slackEventCallback(ctx context.Context, b *binding, env slackEnvelope) {
	ev := env.Event
	if ev == nil || (ev.Type != "message" && ev.Type != "app_mention") {
		return
	}
	if ev.Subtype != "" || ev.BotID != "" || ev.User == "" || ev.Channel == "" || ev.TS == "" {
		return // edits, joins, bots (this one too)
	}
	text := strings.TrimSpace(leadingMention.ReplaceAllString(ev.Text, ""))
	if text == "" {
		return
	}
	if (b.rec.ChannelID != "" && ev.Channel != b.rec.ChannelID) || (b.rec.UserID != "" && ev.User != b.rec.UserID) {
		return
	}
	// A mention in a channel the bot reads is a message and an
	// app_mention event: both name the message (channel and ts).
	keys := []string{"m:" + ev.Channel + "/" + ev.TS}
	if env.EventID != "" {
		keys = append(keys, "e:"+env.EventID)
	}
	first, err := s.slackTake(ctx, b, keys)
	if err != nil {
		s.setState(b, err)
		s.log.Warn("slack event not taken: it could not be recorded first", "bindingId", b.rec.BindingID, "eventId", env.EventID, "err", err)
		return
	}
	if !first {
		return // a retry, or taken by another daemon
	}
	thread := ev.ThreadTS
	if thread == "" {
		thread = ev.TS
	}
	m := message{ID: ev.TS, Text: text, ChannelID: ev.Channel, UserID: ev.User, Key: "slack:" + ev.Channel + "/" + thread}
	s.slackAnswer(ctx, b, m, thread)
}

// slackSeen is the stored record of the events a binding took.
type slackSeen struct {
	Taken map[string]time.Time `json:"taken"`
}

// errSeen: the event was taken already.
var errSeen = errors.New("taken already")

// slackTake records keys as taken by this daemon, atomically: false when
// one of them was taken already (here, before a restart, or by another
// daemon).
func (s *Service) slackTake(ctx context.Context, b *binding, keys []string) (bool, error) {
	now := time.Now().UTC()
	take := func(old json.RawMessage) (json.RawMessage, error) {
		var seen slackSeen
		if len(old) > 0 {
			if err := json.Unmarshal(old, &seen); err != nil {
				return nil, err
			}
		}
		if seen.Taken == nil {
			seen.Taken = map[string]time.Time{}
		}
		for _, k := range keys {
			if _, ok := seen.Taken[k]; ok {
				return nil, errSeen
			}
		}
		for k, at := range seen.Taken {
			if now.Sub(at) > slackSeenKeep {
				delete(seen.Taken, k)
			}
		}
		for len(seen.Taken) >= slackSeenMax {
			oldest, first := "", time.Time{}
			for k, at := range seen.Taken {
				if oldest == "" || at.Before(first) {
					oldest, first = k, at
				}
			}
			delete(seen.Taken, oldest)
		}
		for _, k := range keys {
			seen.Taken[k] = now
		}
		return json.Marshal(seen)
	}
	id := b.rec.BindingID
	if up, ok := s.deps.Settings.(store.SettingUpdater); ok {
		err := up.UpdateSetting(ctx, store.Unfenced(), SlackSeenNamespace, id, take)
		if errors.Is(err, store.ErrNotFound) {
			// Made when the binding was; absent only if it was removed.
			err = s.putSeen(ctx, id, take)
		}
		if errors.Is(err, errSeen) {
			return false, nil
		}
		return err == nil, err
	}
	b.slack.seenMu.Lock()
	defer b.slack.seenMu.Unlock()
	err := s.putSeen(ctx, id, take)
	if errors.Is(err, errSeen) {
		return false, nil
	}
	return err == nil, err
}

// putSeen applies take to the stored record by a read and a put.
func (s *Service) putSeen(ctx context.Context, id string, take func(json.RawMessage) (json.RawMessage, error)) error {
	old, err := s.deps.Settings.GetSetting(ctx, SlackSeenNamespace, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	raw, err := take(old)
	if err != nil {
		return err
	}
	return s.deps.Settings.PutSetting(ctx, store.Unfenced(), SlackSeenNamespace, id, raw)
}

// slackAnswer runs m's turn in its conversation's session, streaming the
// answer into the thread and posting the turn's approval requests there.
func (s *Service) slackAnswer(ctx context.Context, b *binding, m message, thread string) {
	s.emit(b, EventMessage, map[string]any{"messageId": m.ID, "channelId": m.ChannelID, "userId": m.UserID, "text": m.Text})
	a, err := s.slackTurn(ctx, b, m, thread)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, errNotPosted) {
			s.setState(b, err)
		}
		s.emit(b, EventError, map[string]any{"messageId": m.ID, "sessionId": a.sessionID, "message": s.scrub(b, err.Error())})
		return
	}
	s.setState(b, nil)
	s.replied(b, m, a)
}

// errNotPosted: a post's guard refused it (the binding's or the session's
// lease is another daemon's now); the error wraps the reason.
var errNotPosted = errors.New("not posted")

// slackTurn is runTurn with the answer streamed and the approvals shown.
func (s *Service) slackTurn(ctx context.Context, b *binding, m message, thread string) (answered, error) {
	t, err := s.startTurn(ctx, b, m, true)
	if err != nil {
		return t.a, err
	}
	s.noteLease(ctx, &t.a)
	a := t.a
	out := &slackOut{s: s, b: b, m: m, thread: thread, a: a}
	if t.queue != nil {
		t.runBeside(func(ctx context.Context) { out.approvals(ctx, t.queue) })
	}
	defer t.close()
	st := newAnswerStream(answerOut{
		post: func(ctx context.Context, text string) (string, error) {
			return out.post(ctx, map[string]any{"text": text})
		},
		edit: func(ctx context.Context, ts, text string) error {
			return out.update(ctx, ts, map[string]any{"text": text})
		},
		shown: clip,
		warn: func(err error) {
			s.log.Warn("slack: stream the answer", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
		},
	})
	text, _, ferr, perr := st.streamTurn(ctx, t, s.opts.SlackUpdateInterval, func(reason string) string {
		return "_(" + s.scrub(b, reason) + ")_"
	})
	a.text = text
	if ferr != nil {
		return a, ferr
	}
	return a, perr
}

// slackOut posts into one conversation's thread under its guard.
type slackOut struct {
	s      *Service
	b      *binding
	m      message
	thread string
	a      answered
}

// guard records a post before it is made: under the binding's lease in
// Socket Mode (its holder took the message), under the lease of the
// session that answered in Events mode (the receiving daemon took it).
func (o *slackOut) guard(ctx context.Context) error {
	var err error
	if o.b.slack.mode == SlackModeSocket {
		err = o.s.recordPost(ctx, o.s.noLease(), o.b, leaseKey(o.b.rec.BindingID), postRecord{Kind: "reply", ChannelID: o.m.ChannelID, ReplyTo: o.m.ID})
	} else {
		err = o.s.reply(ctx, o.b, o.m, o.a)
	}
	if err != nil {
		o.s.log.Warn("gateway reply not made", "bindingId", o.b.rec.BindingID, "messageId", o.m.ID, "err", err)
		return fmt.Errorf("%w: %w", errNotPosted, err)
	}
	return nil
}

// post posts a message into the thread and returns its ts.
func (o *slackOut) post(ctx context.Context, body map[string]any) (string, error) {
	if err := o.guard(ctx); err != nil {
		return "", err
	}
	body["channel"], body["thread_ts"] = o.m.ChannelID, o.thread
	var r slackResponse
	if err := o.s.slackAPI(ctx, o.b, o.b.slack.botToken, "chat.postMessage", body, &r); err != nil {
		return "", err
	}
	return r.TS, nil
}

// update edits the message ts of the thread.
func (o *slackOut) update(ctx context.Context, ts string, body map[string]any) error {
	if err := o.guard(ctx); err != nil {
		return err
	}
	body["channel"], body["ts"] = o.m.ChannelID, ts
	return o.s.slackAPI(ctx, o.b, o.b.slack.botToken, "chat.update", body, nil)
}

// clip bounds a message's text.
func clip(text string) string {
	if len(text) <= slackMaxText {
		return text
	}
	cut := slackMaxText
	for cut > 0 && !utf8Start(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }

// slackResponse is the part of a Web API answer the gateway reads.
type slackResponse struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	TS      string `json:"ts"`
	Channel string `json:"channel"`
	URL     string `json:"url"`
}

// slackAPI calls a Web API method with a JSON body (token as the bearer),
// waiting out an HTTP 429's Retry-After (a few times). Its errors name the
// method and Slack's error code, never a token.
func (s *Service) slackAPI(ctx context.Context, b *binding, token, method string, body any, out *slackResponse) error {
	if body == nil {
		body = map[string]any{}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.SlackAPI+"/"+method, bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("slack %s: bad API base URL", method)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := s.opts.Client.Do(req)
		if err != nil {
			return s.unanswered(b, "slack "+method, err)
		}
		data, rerr := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			wait := retryAfter(resp.Header.Get("Retry-After"))
			if attempt >= 4 {
				return fmt.Errorf("slack %s: rate limited (HTTP 429) %d times in a row", method, attempt+1)
			}
			s.log.Info("slack rate limit: waiting", "bindingId", b.rec.BindingID, "method", method, "retryAfter", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		if rerr != nil {
			return fmt.Errorf("slack %s: read the answer: %w", method, rerr)
		}
		var r slackResponse
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("slack %s: HTTP %d, not a Web API answer", method, resp.StatusCode)
		}
		if !r.OK {
			if r.Error == "" {
				r.Error = "unknown_error"
			}
			return fmt.Errorf("slack %s: HTTP %d: %s", method, resp.StatusCode, s.scrub(b, r.Error))
		}
		if out != nil {
			*out = r
		}
		return nil
	}
}

// retryAfter reads a Retry-After header in seconds (1 s when absent or
// bad, at most a minute).
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return time.Second
	}
	return min(time.Duration(n)*time.Second, time.Minute)
}
