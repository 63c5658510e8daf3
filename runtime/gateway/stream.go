package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// answerOut is how a platform shows a streamed answer: post makes its
// message (and returns the message's id), edit changes it, each under the
// conversation's post guard; shown bounds the text one message holds;
// warn reports a failed post while the turn goes on.
type answerOut struct {
	post  func(ctx context.Context, text string) (string, error)
	edit  func(ctx context.Context, id, text string) error
	shown func(text string) string
	warn  func(err error)
}

// answerStream posts a turn's answer once its first chunk is there and
// edits it as more arrives, at most once per interval; finish makes the
// last edit. One goroutine (run) makes every post (Slack, Telegram).
type answerStream struct {
	out   answerOut
	dirty chan struct{} // the text grew
	done  chan struct{} // finish was called
	ended chan error    // run's last flush's error

	mu   sync.Mutex
	text string // the answer so far
	sent string // the text last posted
	id   string // the posted message ("" before the first post)
}

func newAnswerStream(out answerOut) *answerStream {
	return &answerStream{out: out, dirty: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan error, 1)}
}

func (st *answerStream) delta(chunk string) {
	st.mu.Lock()
	st.text += chunk
	st.mu.Unlock()
	select {
	case st.dirty <- struct{}{}:
	default:
	}
}

func (st *answerStream) current() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.text
}

func (st *answerStream) posted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.id != ""
}

// finish sets the whole answer ("" posts nothing more) and ends run.
func (st *answerStream) finish(text string) {
	st.mu.Lock()
	st.text = text
	st.mu.Unlock()
	close(st.done)
}

// streamTurn follows turn t to its end with its answer streamed (run
// flushes it at most once per interval) and makes the last edit: the
// whole answer; after a failure, what was shown so far and the reason as
// note words it, or the reason alone (never silence); "(no answer)" for an
// empty one. It returns the turn's answer, the text of the last edit, the
// turn's failure and the last post's.
func (st *answerStream) streamTurn(ctx context.Context, t *startedTurn, interval time.Duration, note func(reason string) string) (text, final string, turnErr, postErr error) {
	go st.run(t.ctx, interval)
	text, turnErr = follow(ctx, t.sub, t.turnID, st.delta)
	final = text
	switch {
	case turnErr != nil && st.posted():
		final = st.current() + "\n\n" + note(turnErr.Error())
	case turnErr != nil:
		final = note(turnErr.Error())
	case text == "":
		final = "(no answer)"
	}
	// The streamer makes the last edit, after the one it may be making.
	st.finish(final)
	return text, final, turnErr, <-st.ended
}

// run flushes the answer when it grew, waiting interval after each flush,
// until finish (then it flushes the whole answer) or ctx ends.
func (st *answerStream) run(ctx context.Context, interval time.Duration) {
	var stopped error // a refused post: nothing more is posted
	for {
		select {
		case <-ctx.Done():
			st.ended <- ctx.Err()
			return
		case <-st.done:
			switch {
			case stopped != nil:
				st.ended <- stopped
			case ctx.Err() != nil:
				st.ended <- ctx.Err() // both were ready: the service is closing
			default:
				st.ended <- st.flush(ctx)
			}
			return
		case <-st.dirty:
		}
		if stopped != nil {
			continue
		}
		if err := st.flush(ctx); err != nil {
			if ctx.Err() == nil {
				st.out.warn(err)
			}
			if errors.Is(err, errNotPosted) {
				stopped = err
			}
		}
		t := time.NewTimer(interval) // the platform's rate bound of edits
		select {
		case <-ctx.Done():
			t.Stop()
		case <-st.done:
			t.Stop()
		case <-t.C:
		}
	}
}

// flush posts the text, or edits the posted message to it.
func (st *answerStream) flush(ctx context.Context) error {
	st.mu.Lock()
	text, sent, id := st.text, st.sent, st.id
	st.mu.Unlock()
	text = st.out.shown(text)
	if text == sent || strings.TrimSpace(text) == "" {
		return nil
	}
	var err error
	if id == "" {
		id, err = st.out.post(ctx, text)
	} else {
		err = st.out.edit(ctx, id, text)
	}
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.sent, st.id = text, id
	st.mu.Unlock()
	return nil
}
