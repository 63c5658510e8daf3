package gateway

import (
	"context"
	"strconv"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// ChannelExists checks that channel names a binding that Post can reach:
// job.schedule's channel (protocol 1.x) is a binding id.
func (s *Service) ChannelExists(channel string) error {
	_, err := s.postable(channel)
	return err
}

// Post sends text to a binding's channel on behalf of the daemon (a
// scheduled job's answer): a Telegram binding sends it to its channelId;
// every binding reports it as a gateway.event "reply", which is how a
// webhook binding (it has no address to push to) delivers it.
func (s *Service) Post(ctx context.Context, channel, text string) error {
	b, err := s.postable(channel)
	if err != nil {
		return err
	}
	s.emit(b, EventReply, map[string]any{"messageId": nil, "text": text, "posted": true})
	if b.rec.Platform != PlatformTelegram {
		return nil
	}
	chat, err := strconv.ParseInt(b.rec.ChannelID, 10, 64)
	if err != nil {
		return errs.New(errcode.InvalidParams, "binding %s has channelId %q, not a Telegram chat id", b.rec.BindingID, b.rec.ChannelID)
	}
	if err := s.telegram(ctx, b, "sendMessage", nil, map[string]any{"chat_id": chat, "text": text}, nil); err != nil {
		s.setState(b, err)
		s.emit(b, EventError, map[string]any{"messageId": nil, "message": s.scrub(b, err.Error())})
		return err
	}
	return nil
}

func (s *Service) postable(channel string) (*binding, error) {
	s.mu.Lock()
	b := s.bindings[channel]
	s.mu.Unlock()
	if b == nil {
		return nil, errs.New(errcode.NotFound, "channel %q is not a gateway binding id (gateway.list shows them; gateway.bind makes one)", channel)
	}
	if b.rec.Platform == PlatformTelegram && b.rec.ChannelID == "" {
		return nil, errs.New(errcode.InvalidParams, "binding %s has no channelId, so there is no chat to post to: bind it with channelId", channel)
	}
	return b, nil
}
