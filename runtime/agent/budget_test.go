package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
)

// fakeBudget is reached while reached is true; raise clears it and wakes
// the paused turn.
type fakeBudget struct {
	mu      sync.Mutex
	reached bool
	changed chan struct{}
	checks  int
	record  []string // "paused", "resumed"
	detach  bool
	// onPause, when set, runs once the pause is recorded.
	onPause func()
	// raiseOnCheck raises the budget right after a check found it reached:
	// the state returned carries a Changed that is already closed.
	raiseOnCheck bool
}

func (b *fakeBudget) Check(context.Context, string, agent.Estimate) (agent.BudgetState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks++
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	st := agent.BudgetState{Reached: b.reached, Changed: b.changed, Budget: events.Budget{Source: events.BudgetSourceSession}}
	if b.reached && b.raiseOnCheck {
		b.reached = false
		close(b.changed)
		b.changed = nil
	}
	return st, nil
}

func (b *fakeBudget) Paused(context.Context, string, agent.BudgetState) error {
	b.mu.Lock()
	b.record = append(b.record, "paused")
	f := b.onPause
	b.mu.Unlock()
	if f != nil {
		go f()
	}
	return nil
}

func (b *fakeBudget) Resumed(context.Context, string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.record = append(b.record, "resumed")
	return nil
}

func (b *fakeBudget) Detach() bool { return b.detach }

// TestBudgetPauseResume: a reached budget pauses the turn before its model
// call (turn.paused, no step.started) until a raise; the turn then resumes
// (turn.resumed) and completes. A turn that starts paused (Resume) emits no
// second turn.paused.
func TestBudgetPauseResume(t *testing.T) {
	for _, resume := range []bool{false, true} {
		f := newFixture(t, `{"steps":[{"default":true,"text":"Hi there!","usage":{"input":40,"output":5}}]}`, nil, nil)
		b := &fakeBudget{reached: true, raiseOnCheck: true}
		f.loop.Budget = b
		res, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: "hello", Resume: resume})
		if err != nil || res.Reason != events.TurnDoneReasonComplete {
			t.Fatalf("resume %v: %+v %v", resume, res, err)
		}
		if want := []string{"paused", "resumed"}; resume {
			if len(b.record) != 1 || b.record[0] != "resumed" {
				t.Fatalf("resume: the budget heard %v, want [resumed]", b.record)
			}
		} else if len(b.record) != 2 || b.record[0] != want[0] || b.record[1] != want[1] {
			t.Fatalf("the budget heard %v, want %v", b.record, want)
		}
		want := []string{"turn.paused", "turn.resumed", "step.started"}
		if resume {
			want = want[1:]
		}
		got := f.events.kinds()
		for i, k := range want {
			if i >= len(got) || got[i] != k {
				t.Fatalf("resume %v: kinds %v, want them to start with %v", resume, got, want)
			}
		}
	}
}

// TestBudgetInterruptOrDetach: a paused turn whose context ends is
// interrupted (turn.done{interrupted}), or, when the Budget detaches it
// (the daemon is stopping), ends with no turn.done at all.
func TestBudgetInterruptOrDetach(t *testing.T) {
	for _, detach := range []bool{false, true} {
		f := newFixture(t, `{"steps":[{"default":true,"text":"Hi there!"}]}`, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		b := &fakeBudget{reached: true, detach: detach, onPause: cancel}
		f.loop.Budget = b
		res, err := f.loop.Run(ctx, agent.Turn{ID: "t-1", Prompt: "hello"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		kinds := f.events.kinds()
		if detach {
			if res.Reason != agent.ReasonDetached || kinds[len(kinds)-1] != "turn.paused" {
				t.Fatalf("detached: %+v, kinds %v", res, kinds)
			}
			continue
		}
		if res.Reason != events.TurnDoneReasonInterrupted || kinds[len(kinds)-1] != "turn.done" {
			t.Fatalf("interrupted: %+v, kinds %v", res, kinds)
		}
		for _, k := range kinds {
			if k == "step.started" {
				t.Fatalf("a model call started while paused: %v", kinds)
			}
		}
	}
}
