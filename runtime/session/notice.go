package session

import (
	"context"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// maxNoticeBytes bounds one notice; maxNotices bounds the lines a session
// holds for its next model call.
const (
	maxNoticeBytes = 64 << 10
	maxNotices     = 100
)

// Notice queues text for the model: right before its next call (of the
// running turn, else of the next turn) it reads "[system] " + text. It
// starts no turn, and is kept in memory only.
func (s *Service) Notice(ctx context.Context, id, text string) error {
	if strings.TrimSpace(text) == "" {
		return errs.New(errcode.InvalidParams, "text is empty: say what happened")
	}
	if len(text) > maxNoticeBytes {
		return errs.New(errcode.InvalidParams, "text is %d bytes long; a notice is at most %d", len(text), maxNoticeBytes)
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.notices) >= maxNotices {
		return errs.New(errcode.SessionBusy, "session %s already holds %d notices for its next model call; send more once it ran", id, maxNotices)
	}
	l.notices = append(l.notices, text)
	return nil
}

// takeNotices hands over the queued notices, oldest first.
func (l *live) takeNotices() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.notices
	l.notices = nil
	return out
}
