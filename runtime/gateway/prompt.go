package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// promptPatience bounds how long a message waits for its session while the
// daemon answers overloaded: the session's owner died and its lease has not
// expired yet (any daemon takes it over then), or its queue is full.
const promptPatience = 30 * time.Second

// prompt prompts session sid with text, trying again as the refusal's
// retryAfterMs says while the daemon answers overloaded, for up to
// promptPatience. A binding's lease and its session's move separately when
// their daemon dies: a message that reaches the binding's new owner before
// the session's lease has expired is answered once it has, not dropped.
func (s *Service) prompt(ctx context.Context, sid, text string) (string, error) {
	deadline := time.Now().Add(promptPatience)
	for {
		turnID, err := s.deps.Sessions.Prompt(ctx, sid, text, nil, "")
		if err == nil || errs.CodeOf(err) != errcode.Overloaded || !time.Now().Before(deadline) {
			return turnID, err
		}
		t := time.NewTimer(refusalWait(err))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", context.Cause(ctx)
		case <-t.C:
		}
	}
}

// refusalWait is the wait an overloaded refusal asks for (its retryAfterMs),
// a second when it names none.
func refusalWait(err error) time.Duration {
	var e *errs.Error
	if errors.As(err, &e) {
		switch ms := e.Data["retryAfterMs"].(type) {
		case int:
			return time.Duration(ms) * time.Millisecond
		case int64:
			return time.Duration(ms) * time.Millisecond
		}
	}
	return time.Second
}
