package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// A Discord binding (API v10, JSON encoding) takes its messages from the
// Gateway WebSocket: GET /gateway/bot gives its URL; Hello (op 10) gives
// the heartbeat interval, the first heartbeat (op 1, the last sequence
// number) goes out after interval × a random fraction and the others every
// interval, and a heartbeat whose ACK (op 11) has not come when the next
// one is due closes the connection, which is then resumed. Identify (op 2)
// carries the bot token and the intents GUILD_MESSAGES | DIRECT_MESSAGES |
// MESSAGE_CONTENT; READY gives the session id and the resume URL. A dropped
// connection, a Reconnect (op 7) or an Invalid Session (op 9) with d=true
// is resumed (op 6: token, session id, last sequence number) at the resume
// URL, and Discord replays the dispatches missed; op 9 with d=false starts
// a new session. MESSAGE_CREATE of a bound channel (not of a bot) prompts
// the conversation's session (one per channel id, a thread being a
// channel); the answer is posted as a reply and edited while it streams,
// at most every DiscordOptions.EditInterval, and approval requests of the
// turn appear as messages with Allow/Deny buttons whose click (an
// INTERACTION_CREATE, type 3) answers the request as "discord:<user id>".
//
// The connection runs on the one daemon holding the binding's lease (as a
// Telegram poller). The session id, resume URL, sequence number and the
// last message taken are saved in the store under that lease before a
// message is answered: a replayed or repeated message is not answered
// again, and a daemon taking the binding over resumes where the last one
// stopped.

// Gateway opcodes.
const (
	dcOpDispatch       = 0
	dcOpHeartbeat      = 1
	dcOpIdentify       = 2
	dcOpResume         = 6
	dcOpReconnect      = 7
	dcOpInvalidSession = 9
	dcOpHello          = 10
	dcOpHeartbeatACK   = 11
)

// DiscordIntents are the intents a binding identifies with:
// GUILD_MESSAGES (1<<9) | DIRECT_MESSAGES (1<<12) | MESSAGE_CONTENT (1<<15).
const DiscordIntents = 1<<9 | 1<<12 | 1<<15

// DiscordStateNamespace holds each Discord binding's gateway state
// (dcState).
const DiscordStateNamespace = "gateway.discord.state"

// dcUser is the part of a user object the gateway reads.
type dcUser struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot"`
}

// dcMessage is the part of a MESSAGE_CREATE the gateway reads.
type dcMessage struct {
	ID        string  `json:"id"`
	ChannelID string  `json:"channel_id"`
	GuildID   string  `json:"guild_id"`
	Content   string  `json:"content"`
	Author    *dcUser `json:"author"`
	WebhookID string  `json:"webhook_id"`
}

// dcInteraction is the part of an INTERACTION_CREATE the gateway reads.
type dcInteraction struct {
	ID        string `json:"id"`
	Token     string `json:"token"`
	Type      int    `json:"type"`
	ChannelID string `json:"channel_id"`
	Data      struct {
		CustomID      string `json:"custom_id"`
		ComponentType int    `json:"component_type"`
	} `json:"data"`
	Member *struct {
		User *dcUser `json:"user"`
	} `json:"member"`
	User    *dcUser `json:"user"`
	Message *struct {
		ID string `json:"id"`
	} `json:"message"`
}

// user is who clicked: the member's user in a guild, the user in a DM.
func (in dcInteraction) user() *dcUser {
	if in.Member != nil && in.Member.User != nil {
		return in.Member.User
	}
	return in.User
}

// dcReady is the part of READY the gateway reads.
type dcReady struct {
	SessionID        string `json:"session_id"`
	ResumeGatewayURL string `json:"resume_gateway_url"`
	User             dcUser `json:"user"`
}

// dcEvent is one parsed gateway payload: exactly what its opcode and
// dispatch type carry.
type dcEvent struct {
	Op          int
	Seq         *int64
	Type        string
	Interval    time.Duration // Hello
	Resumable   bool          // Invalid Session
	Ready       *dcReady
	Message     *dcMessage
	Interaction *dcInteraction
}

// parseDiscordPayload reads one Gateway payload. Unknown opcodes and
// dispatch types are returned with nothing parsed; a payload that is not a
// JSON object with an op, or whose data does not fit its opcode, is an
// error naming the field.
func parseDiscordPayload(raw []byte) (dcEvent, error) {
	var p struct {
		Op *int            `json:"op"`
		D  json.RawMessage `json:"d"`
		S  *int64          `json:"s"`
		T  string          `json:"t"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return dcEvent{}, fmt.Errorf("discord gateway payload: not a JSON object: %w", err)
	}
	if p.Op == nil {
		return dcEvent{}, errors.New("discord gateway payload: no op")
	}
	ev := dcEvent{Op: *p.Op, Seq: p.S, Type: p.T}
	switch ev.Op {
	case dcOpHello:
		var h struct {
			Interval *float64 `json:"heartbeat_interval"`
		}
		if err := json.Unmarshal(p.D, &h); err != nil || h.Interval == nil || *h.Interval <= 0 || *h.Interval > 10*60*1000 {
			return dcEvent{}, errors.New("discord gateway Hello: d.heartbeat_interval is not a positive number of milliseconds (at most 10 minutes)")
		}
		ev.Interval = time.Duration(*h.Interval * float64(time.Millisecond))
	case dcOpInvalidSession:
		// d is a boolean: whether the session may be resumed.
		_ = json.Unmarshal(p.D, &ev.Resumable)
	case dcOpDispatch:
		if p.S == nil {
			return dcEvent{}, fmt.Errorf("discord gateway dispatch %s: no s (sequence number)", p.T)
		}
		var err error
		switch p.T {
		case "READY":
			ev.Ready = &dcReady{}
			err = json.Unmarshal(p.D, ev.Ready)
			if err == nil && ev.Ready.SessionID == "" {
				err = errors.New("no session_id")
			}
		case "MESSAGE_CREATE":
			ev.Message = &dcMessage{}
			err = json.Unmarshal(p.D, ev.Message)
			if err == nil && (!isSnowflake(ev.Message.ID) || !isSnowflake(ev.Message.ChannelID)) {
				err = errors.New("id or channel_id is not a snowflake")
			}
		case "INTERACTION_CREATE":
			ev.Interaction = &dcInteraction{}
			err = json.Unmarshal(p.D, ev.Interaction)
			if err == nil && (ev.Interaction.ID == "" || ev.Interaction.Token == "") {
				err = errors.New("no id or token")
			}
		}
		if err != nil {
			return dcEvent{}, fmt.Errorf("discord gateway dispatch %s: d: %v", p.T, err)
		}
	}
	return ev, nil
}

// isSnowflake reports whether s is a Discord id (a decimal uint64).
func isSnowflake(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// snowflakeAfter reports whether snowflake a is newer than b ("" is oldest).
func snowflakeAfter(a, b string) bool {
	x, _ := strconv.ParseUint(a, 10, 64)
	y, _ := strconv.ParseUint(b, 10, 64)
	return x > y
}

// checkDiscordBind checks gateway.bind's params for a Discord binding.
func checkDiscordBind(p BindParams) error {
	if p.ChannelID != "" && !isSnowflake(p.ChannelID) {
		return errs.New(errcode.InvalidParams, "channelId %q is not a Discord channel id (a snowflake: digits only; Developer Mode → right-click the channel → Copy Channel ID)", p.ChannelID)
	}
	if p.UserID != "" && !isSnowflake(p.UserID) {
		return errs.New(errcode.InvalidParams, "userId %q is not a Discord user id (a snowflake: digits only)", p.UserID)
	}
	return nil
}

// dcState is what is kept of a binding's gateway session.
type dcState struct {
	SessionID   string `json:"sessionId,omitempty"`
	ResumeURL   string `json:"resumeUrl,omitempty"`
	Seq         int64  `json:"seq,omitempty"`
	BotUserID   string `json:"botUserId,omitempty"`
	LastMessage string `json:"lastMessageId,omitempty"` // the newest message taken
}

// errDiscordFatal: the gateway refused the bot for good (bad token,
// intents not allowed): the binding stays in state error until bound again,
// and its lease is given back (Service.refuse).
var errDiscordFatal = errors.New("discord refused the bot")

// runDiscord keeps b's gateway connection until ctx ends, resuming or
// identifying again after each drop, with a capped backoff after failures.
func (s *Service) runDiscord(ctx context.Context, b *binding) {
	dc := &dcConn{s: s, b: b, work: make(chan dcMessage, 256), approvals: map[string]dcPosted{}}
	s.loadLeased(ctx, DiscordStateNamespace, b.rec.BindingID, &dc.st)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dc.answerLoop(ctx)
	}()
	defer wg.Wait()
	backoff := time.Second
	for ctx.Err() == nil {
		healthy, err := dc.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotOwner) || errors.Is(err, store.ErrLeaseLost) {
			s.log.Warn("discord gateway stopped: the binding's lease is lost", "bindingId", b.rec.BindingID, "err", err)
			return
		}
		if err != nil {
			fatal := errors.Is(err, errDiscordFatal)
			if fatal {
				s.refuse(b) // before the state shows it: none holds the lease by then
			}
			s.setState(b, err)
			s.log.Warn("discord gateway connection ended", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
			if fatal {
				return
			}
		}
		if healthy {
			backoff = time.Second
			continue // resume at once
		}
		if sleepCtx(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 60*time.Second)
	}
}

// dcConn is a binding's gateway client.
type dcConn struct {
	s    *Service
	b    *binding
	st   dcState // the reader's (one goroutine)
	work chan dcMessage

	mu        sync.Mutex
	approvals map[string]dcPosted // request id → its message, while pending
}

// dcPosted is a message the gateway posted for an approval request.
type dcPosted struct {
	channel, message, sessionID, text string
}

// session runs one connection: Hello, Identify or Resume, then the
// dispatches until the connection ends. healthy says the connection got
// as far as READY or RESUMED, or ended on Discord's request (reconnect at
// once); err says why it ended otherwise.
func (dc *dcConn) session(ctx context.Context) (healthy bool, err error) {
	s, b := dc.s, dc.b
	gw := dc.st.ResumeURL
	if dc.st.SessionID == "" || gw == "" {
		var bot struct {
			URL string `json:"url"`
		}
		if err := s.discordREST(ctx, b, http.MethodGet, "/gateway/bot", "GET /gateway/bot", "", nil, &bot); err != nil {
			if strings.Contains(err.Error(), "HTTP 401") {
				return false, fmt.Errorf("%w: %v (check the bot token)", errDiscordFatal, err)
			}
			return false, err
		}
		if bot.URL == "" {
			return false, errors.New("discord GET /gateway/bot: no url")
		}
		gw = bot.URL
	}
	u, err := url.Parse(gw)
	if err != nil || (u.Scheme != "wss" && u.Scheme != "ws") {
		dc.st.SessionID, dc.st.ResumeURL = "", ""
		return false, fmt.Errorf("discord gateway URL %q is not a ws:// or wss:// URL", gw)
	}
	q := u.Query()
	q.Set("v", "10")
	q.Set("encoding", "json")
	u.RawQuery = q.Encode()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := ws.Dial(cctx, u.String(), ws.Options{ReadLimit: 16 << 20, Log: s.log})
	if err != nil {
		return false, fmt.Errorf("discord gateway: %w", err)
	}
	defer func() { _ = conn.CloseWithReason("reconnecting") }() // not 1000: the session stays resumable
	send := func(op int, d any) error {
		raw, _ := json.Marshal(map[string]any{"op": op, "d": d})
		wctx, wcancel := context.WithTimeout(cctx, 10*time.Second)
		defer wcancel()
		return conn.WriteMessage(wctx, raw)
	}
	raw, err := conn.ReadMessage(cctx)
	if err != nil {
		return false, fmt.Errorf("discord gateway: no Hello: %w", err)
	}
	hello, err := parseDiscordPayload(raw)
	if err != nil || hello.Op != dcOpHello {
		return false, fmt.Errorf("discord gateway: the first payload is not Hello (op 10): %v", err)
	}
	// The heartbeat: first after interval × jitter, then every interval;
	// a beat whose ACK has not come by the next one ends the connection.
	var hmu sync.Mutex
	awaiting, seq := false, dc.st.Seq
	beat := func() error {
		hmu.Lock()
		var d any
		if seq > 0 {
			d = seq
		}
		awaiting = true
		hmu.Unlock()
		return send(dcOpHeartbeat, d)
	}
	missed := make(chan struct{})
	go func() {
		t := time.NewTimer(time.Duration(rand.Float64() * float64(hello.Interval)))
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			hmu.Lock()
			late := awaiting
			hmu.Unlock()
			if late {
				close(missed)
				cancel() // ends the read
				return
			}
			if beat() != nil {
				cancel()
				return
			}
			t.Reset(hello.Interval)
		}
	}()
	resuming := dc.st.SessionID != ""
	if resuming {
		err = send(dcOpResume, map[string]any{"token": b.secret, "session_id": dc.st.SessionID, "seq": dc.st.Seq})
	} else {
		err = send(dcOpIdentify, map[string]any{"token": b.secret, "intents": DiscordIntents,
			"properties": map[string]string{"os": "linux", "browser": "trellis", "device": "trellis"}})
	}
	if err != nil {
		return false, fmt.Errorf("discord gateway: send %s: %w", map[bool]string{true: "Resume", false: "Identify"}[resuming], err)
	}
	for {
		raw, err := conn.ReadMessage(cctx)
		if err != nil {
			select {
			case <-missed:
				return true, errors.New("discord gateway: a heartbeat was not acknowledged; resuming")
			default:
			}
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return healthy, dc.closed(err)
		}
		ev, err := parseDiscordPayload(raw)
		if err != nil {
			s.log.Warn("discord gateway: a payload is unreadable; skipped", "bindingId", b.rec.BindingID, "err", err)
			continue
		}
		switch ev.Op {
		case dcOpHeartbeatACK:
			hmu.Lock()
			awaiting = false
			hmu.Unlock()
		case dcOpHeartbeat:
			if err := beat(); err != nil {
				return healthy, err
			}
		case dcOpReconnect:
			return true, nil
		case dcOpInvalidSession:
			if !ev.Resumable {
				dc.st = dcState{BotUserID: dc.st.BotUserID, LastMessage: dc.st.LastMessage}
			}
			d := s.opts.Discord.ReidentifyDelay
			if d <= 0 {
				d = time.Second + time.Duration(rand.Int64N(int64(4*time.Second)))
			}
			if err := sleepCtx(ctx, d); err != nil {
				return false, err
			}
			return true, nil
		case dcOpDispatch:
			hmu.Lock()
			seq = *ev.Seq
			hmu.Unlock()
			dc.st.Seq = *ev.Seq
			if err := dc.dispatch(ctx, ev); err != nil {
				return false, err
			}
			if ev.Type == "READY" || ev.Type == "RESUMED" {
				healthy = true
				s.setState(b, nil)
			}
		}
	}
}

// closed turns the end of a connection into the error runDiscord acts on:
// the close codes that mean the bot cannot connect as it is are fatal, the
// ones that mean the session is gone start a new one.
func (dc *dcConn) closed(err error) error {
	var ce *ws.CloseError
	if !errors.As(err, &ce) {
		return fmt.Errorf("discord gateway: connection lost: %w", err)
	}
	switch ce.Code {
	case 4004:
		return fmt.Errorf("%w: authentication failed (close 4004): check the bot token", errDiscordFatal)
	case 4010, 4011, 4012, 4013:
		return fmt.Errorf("%w: close %d: %s", errDiscordFatal, ce.Code, ce.Reason)
	case 4014:
		return fmt.Errorf("%w: disallowed intents (close 4014): enable the MESSAGE_CONTENT privileged intent in the Developer Portal (Bot → Privileged Gateway Intents)", errDiscordFatal)
	case 4007, 4009:
		dc.st = dcState{BotUserID: dc.st.BotUserID, LastMessage: dc.st.LastMessage}
	}
	return fmt.Errorf("discord gateway: closed with %d %s", ce.Code, ce.Reason)
}

// dispatch acts on one dispatch. A message is taken (its id saved under
// the lease) and queued for its answer; an error means the lease is lost.
func (dc *dcConn) dispatch(ctx context.Context, ev dcEvent) error {
	s, b := dc.s, dc.b
	switch {
	case ev.Ready != nil:
		dc.st.SessionID, dc.st.ResumeURL, dc.st.BotUserID = ev.Ready.SessionID, ev.Ready.ResumeGatewayURL, ev.Ready.User.ID
		if err := s.saveLeased(ctx, b, DiscordStateNamespace, "the gateway state", dc.st); errors.Is(err, errNotOwner) || errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		s.log.Info("discord gateway ready", "bindingId", b.rec.BindingID, "bot", ev.Ready.User.Username)
	case ev.Message != nil:
		m := *ev.Message
		if m.Author == nil || m.Author.Bot || m.WebhookID != "" || m.Author.ID == dc.st.BotUserID {
			return nil
		}
		if (b.rec.ChannelID != "" && m.ChannelID != b.rec.ChannelID) || (b.rec.UserID != "" && m.Author.ID != b.rec.UserID) {
			return nil
		}
		if strings.TrimSpace(m.Content) == "" {
			s.log.Info("discord message without content skipped (is the MESSAGE_CONTENT intent enabled?)", "bindingId", b.rec.BindingID, "messageId", m.ID)
			return nil
		}
		if !snowflakeAfter(m.ID, dc.st.LastMessage) {
			return nil // taken already (a replay after a resume)
		}
		dc.st.LastMessage = m.ID
		// Saved before the answer, under the lease: a restart or a
		// replay does not answer it again; a deposed daemon stops.
		if err := s.saveLeased(ctx, b, DiscordStateNamespace, "the gateway state", dc.st); err != nil {
			if errors.Is(err, errNotOwner) || errors.Is(err, store.ErrLeaseLost) {
				return err
			}
			s.log.Warn("save the discord gateway state", "bindingId", b.rec.BindingID, "err", err)
		}
		select {
		case dc.work <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	case ev.Interaction != nil:
		in := *ev.Interaction
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			dc.interaction(ctx, in)
		}()
	}
	return nil
}

// answerLoop answers the taken messages in order.
func (dc *dcConn) answerLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-dc.work:
			dc.answerMessage(ctx, m)
		}
	}
}
