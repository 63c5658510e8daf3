package gateway

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
)

// refusingSessions answers Prompt with refusals, in order, then a turn id.
type refusingSessions struct {
	Sessions
	refusals []error
	calls    []time.Duration // when each Prompt came, from the start
	start    time.Time
}

func (r *refusingSessions) Prompt(ctx context.Context, id, text string, atts []session.Attachment, origin string) (string, error) {
	r.calls = append(r.calls, time.Since(r.start))
	if len(r.calls) <= len(r.refusals) {
		return "", r.refusals[len(r.calls)-1]
	}
	return "t-1", nil
}

// TestPromptWaitsOutATakeover: a prompt refused with overloaded (the
// session's dead owner still holds its lease) is tried again after the
// refusal's retryAfterMs until the session takes it; any other refusal,
// and an overloaded one past promptPatience, is the answer. The bubble's
// clock moves only by the waits, so their lengths are exact.
func TestPromptWaitsOutATakeover(t *testing.T) {
	overloaded := errs.New(errcode.Overloaded, "session s-1 is owned by daemon d-a, which does not answer; try again").WithData("retryAfterMs", 1000)
	notFound := errs.New(errcode.NotFound, "no session s-1")
	for _, tc := range []struct {
		name     string
		refusals []error
		wantErr  string
		calls    []time.Duration
	}{
		{"taken over after two refusals", []error{overloaded, overloaded}, "", []time.Duration{0, time.Second, 2 * time.Second}},
		{"a refusal without a wait", []error{errs.New(errcode.Overloaded, "queue full")}, "", []time.Duration{0, time.Second}},
		{"another refusal answers at once", []error{notFound}, errcode.NotFound, []time.Duration{0}},
		{"patience runs out", func() []error {
			var rs []error
			for range 40 {
				rs = append(rs, overloaded)
			}
			return rs
		}(), errcode.Overloaded, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ss := &refusingSessions{refusals: tc.refusals, start: time.Now()}
				s := &Service{deps: Deps{Sessions: ss}}
				turn, err := s.prompt(context.Background(), "s-1", "hello")
				if tc.wantErr == "" && (err != nil || turn != "t-1") {
					t.Fatalf("prompt: %q, %v; want t-1", turn, err)
				}
				if tc.wantErr != "" && errs.CodeOf(err) != tc.wantErr {
					t.Fatalf("prompt: %q, %v; want %s", turn, err, tc.wantErr)
				}
				if tc.calls != nil && !slices.Equal(ss.calls, tc.calls) {
					t.Errorf("prompts at %v, want %v", ss.calls, tc.calls)
				}
				if tc.calls == nil && (len(ss.calls) != 31 || ss.calls[30] != promptPatience) {
					t.Errorf("%d prompts, the last at %v; want 31, the last at %v", len(ss.calls), ss.calls[len(ss.calls)-1], promptPatience)
				}
			})
		})
	}
	t.Run("the binding's context ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ss := &refusingSessions{refusals: []error{overloaded, overloaded}, start: time.Now()}
			s := &Service{deps: Deps{Sessions: ss}}
			ctx, cancel := context.WithCancelCause(context.Background())
			lost := errors.New("the binding's lease was lost")
			time.AfterFunc(500*time.Millisecond, func() { cancel(lost) })
			if _, err := s.prompt(ctx, "s-1", "hello"); !errors.Is(err, lost) || len(ss.calls) != 1 {
				t.Fatalf("prompt: %v after %d prompts; want the context's cause after 1", err, len(ss.calls))
			}
		})
	})
}
