package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// ChannelExists checks that channel names a binding that Post can reach:
// job.schedule's channel (protocol 1.x) is a binding id.
func (s *Service) ChannelExists(channel string) error {
	_, err := s.postable(channel)
	return err
}

// Post sends text to a binding's channel on behalf of the daemon (a
// scheduled job's answer): a Telegram or Discord binding sends it to its channelId;
// every binding reports it as a gateway.event "reply", which is how a
// webhook binding (it has no address to push to) delivers it. The post is
// recorded first under w (the lease of the job run's session, or
// store.Unfenced alone on the store), and is not made when that record is
// refused.
func (s *Service) Post(ctx context.Context, w store.Writer, channel, text string) error {
	b, err := s.postable(channel)
	if err != nil {
		return err
	}
	var chat int64
	if b.rec.Platform == PlatformTelegram {
		if chat, err = strconv.ParseInt(b.rec.ChannelID, 10, 64); err != nil {
			return errs.New(errcode.InvalidParams, "binding %s has channelId %q, not a Telegram chat id", b.rec.BindingID, b.rec.ChannelID)
		}
	}
	if err := s.recordPost(ctx, w, b, "", postRecord{Kind: "post", ChannelID: b.rec.ChannelID}); err != nil {
		s.emit(b, EventError, map[string]any{"messageId": nil, "message": s.scrub(b, err.Error())})
		return err
	}
	var sendErr error
	switch b.rec.Platform {
	case PlatformTelegram:
		for _, part := range splitTelegram(text) {
			if sendErr = s.telegram(ctx, b, "sendMessage", nil, map[string]any{"chat_id": chat, "text": part}, nil); sendErr != nil {
				break
			}
		}
	case PlatformDiscord:
		sendErr = s.discordPost(ctx, b, text)
	case PlatformSlack:
		if b.slack != nil {
			sendErr = s.slackAPI(ctx, b, b.slack.botToken, "chat.postMessage", map[string]any{"channel": b.rec.ChannelID, "text": clip(text)}, nil)
		}
	}
	if sendErr != nil {
		s.setState(b, sendErr)
		s.emit(b, EventError, map[string]any{"messageId": nil, "message": s.scrub(b, sendErr.Error())})
		return sendErr
	}
	s.emit(b, EventReply, map[string]any{"messageId": nil, "text": text, "posted": true})
	return nil
}

func (s *Service) postable(channel string) (*binding, error) {
	s.mu.Lock()
	b := s.bindings[channel]
	s.mu.Unlock()
	if b == nil {
		return nil, errs.New(errcode.NotFound, "channel %q is not a gateway binding id (gateway.list shows them; gateway.bind makes one)", channel)
	}
	if (b.rec.Platform == PlatformTelegram || b.rec.Platform == PlatformSlack || b.rec.Platform == PlatformDiscord) && b.rec.ChannelID == "" {
		return nil, errs.New(errcode.InvalidParams, "binding %s has no channelId, so there is no chat to post to: bind it with channelId", channel)
	}
	return b, nil
}

// PostsNamespace holds, per binding, the last post its daemon recorded
// before making it (postRecord).
const PostsNamespace = "gateway.posts"

// postRecord is what is stored before a post is made.
type postRecord struct {
	Kind      string    `json:"kind"`                // "reply" (to an inbound message) or "post" (a job's answer)
	ChannelID string    `json:"channelId,omitempty"` // the chat posted to
	ReplyTo   string    `json:"replyTo,omitempty"`   // the message answered
	At        time.Time `json:"at"`
}

// errNotOwner: this daemon no longer holds the lease a post needs.
var errNotOwner = errors.New("this daemon no longer holds the lease")

// recordPost is the guard every outbound post passes, as a tool's tool.call
// event is stored before the tool runs: the post is recorded in the store
// under w and, when lease is not "", under this daemon's lease of that
// name too (a binding's inbound channel, whose replies only its holder
// posts). A daemon that holds the lease no longer (judged on its own
// clock, then by the store in the record's transaction) or cannot store
// the record gets an error and must not post. The lease is judged again
// after the record is stored, right before the post.
func (s *Service) recordPost(ctx context.Context, w store.Writer, b *binding, lease string, rec postRecord) error {
	if lease != "" && s.deps.Leases != nil {
		f, ok := s.deps.Leases.Fence(lease)
		if have, set := w.Fence(lease); !ok || (set && have != f) {
			// None held, or not the one w's fence names (lost and taken
			// again since).
			return s.notOwner(b, lease, rec)
		}
		w = w.With(f)
	}
	rec.At = time.Now().UTC()
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := s.deps.Settings.PutSetting(ctx, w, PostsNamespace, b.rec.BindingID, raw); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return fmt.Errorf("%s not posted: %w", rec.what(b), err)
		}
		return fmt.Errorf("%s not posted: it could not be recorded first: %w", rec.what(b), err)
	}
	if lease != "" && s.deps.Leases != nil {
		if _, ok := s.deps.Leases.Fence(lease); !ok {
			return s.notOwner(b, lease, rec)
		}
	}
	return nil
}

// noLease is the writer a post made under a binding's lease alone starts
// from (recordPost adds the lease): store.Unfenced when this daemon is
// alone on its store, else the writer of no lease yet.
func (s *Service) noLease() store.Writer {
	if s.deps.Leases == nil {
		return store.Unfenced()
	}
	return store.Writer{}
}

func (s *Service) notOwner(b *binding, lease string, rec postRecord) error {
	return fmt.Errorf("%s not posted: %w %s (another daemon answers the channel now)", rec.what(b), errNotOwner, lease)
}

func (r postRecord) what(b *binding) string {
	if r.ReplyTo != "" {
		return fmt.Sprintf("the reply to message %s of binding %s", r.ReplyTo, b.rec.BindingID)
	}
	return "the post to binding " + b.rec.BindingID
}
