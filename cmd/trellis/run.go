package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/events"
)

// runOptions are the flags of trellis run.
type runOptions struct {
	output  string // the output format: text, json, wire or events
	session sessionOptions
	approve string
	view    viewOptions
}

// viewOptions are the flags of the text rendering (run, chat, sessions show).
type viewOptions struct {
	quiet bool // no usage line at the end of a turn
	full  bool // tool output and diffs unabridged
}

func (v *viewOptions) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&v.quiet, "quiet", "q", false, "text mode: no token usage line at the end of a turn")
	cmd.Flags().BoolVar(&v.full, "full", false, "text mode: show tool output and diffs in full (default: the first lines)")
}

// newView returns the text rendering of a run or chat: the answer on
// stdout, tool activity on stderr.
func (a *app) newView(v viewOptions, sessionID string) *transcript {
	t := newTranscript(a.stdout, a.stderr, colorOK(a.stderrTTY))
	t.quiet, t.full = v.quiet, v.full
	t.hint = "trellis sessions show " + sessionID + " --full"
	return t
}

func newRunCmd(a *app) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] PROMPT",
		Short: "Run one prompt and print the answer (or its events) on stdout",
		Long: `Run one prompt in a new session (or in --session, or --continue the last one of
the working directory) and print it on stdout:

  --output text    the answer only (default)
  --output json    pi's JSON event lines
  --output wire    pagent's JSON-RPC notification lines
  --output events  the session.event objects, one per line

--format is the same flag as --output; --mode, its old name, still works but is
deprecated. The session's permission mode is --permission-mode plan|accept|auto.

stdout carries nothing else; diagnostics go to stderr. The exit status is 0 when
the turn completed, 3 when it completed but a tool call was denied, 130 when it
was interrupted, 1 otherwise.

In text mode stderr shows what the tools did: each call, the first lines of its
output (--full for all), a coloured diff of every file written or edited (no
colour when stderr is not a terminal or NO_COLOR is set), one line per denied
call, and the token usage at the end (--quiet hides it). PROMPT "-" reads
the prompt from stdin. Ctrl-C interrupts the turn; a second Ctrl-C quits.`,
		Args: argsNamed(1, -1, "a PROMPT", `trellis run "fix the tests"`),
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt := strings.Join(args, " ")
			canAsk := a.stdinTTY
			if prompt == "-" {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("read the prompt from stdin: %w", err)
				}
				prompt, canAsk = strings.TrimSpace(string(b)), false
			}
			return a.run(cmd.Context(), o, prompt, canAsk)
		},
	}
	f := cmd.Flags()
	outputFlags(cmd, &o.output, modeText, "what stdout shows: text, json, wire or events")
	o.session.flags(cmd)
	f.StringVar(&o.approve, "approve", "ask", "tool calls that need approval: ask (on the terminal), allow or deny")
	o.view.flags(cmd)
	return cmd
}

// outputFlags defines --output (with --format as a synonym) and the
// deprecated --mode, all three setting *output. --mode was the output
// format's first name, but the README's modes are the permission modes
// (--permission-mode). The command's PreRun notes the deprecation on
// stderr: cobra's own note (Flag.Deprecated) goes to the command's
// output, which is stdout here.
func outputFlags(cmd *cobra.Command, output *string, def, usage string) {
	f := cmd.Flags()
	f.StringVar(output, "output", def, usage+" (--format is the same flag)")
	f.StringVar(output, "mode", def, usage)
	f.Lookup("mode").Hidden = true
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		if cmd.Flags().Changed("mode") {
			fmt.Fprintln(cmd.ErrOrStderr(), "trellis: --mode is deprecated: use --output, which takes the same values (plan, accept and auto are --permission-mode's)")
		}
	}
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "format" {
			name = "output"
		}
		return pflag.NormalizedName(name)
	})
}

func checkApprove(policy string) error {
	switch policy {
	case "ask", "allow", "deny":
		return nil
	}
	return usageError{fmt.Errorf("--approve %q: want ask, allow or deny", policy)}
}

func (a *app) run(ctx context.Context, o runOptions, prompt string, canAsk bool) error {
	if err := checkApprove(o.approve); err != nil {
		return err
	}
	if err := o.session.check(); err != nil {
		return err
	}
	if _, err := newOutput(o.output, io.Discard, sessionInfo{}); err != nil {
		return err
	}
	if strings.TrimSpace(prompt) == "" {
		return usageError{errors.New("the prompt is empty")}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	status := &statusLine{a: a}
	defer status.hide()
	appr := &approver{a: a, policy: o.approve, canAsk: canAsk, before: status.hide}
	c, err := a.connect(ctx, client.Options{Approve: appr.answer, Ask: appr.question})
	if err != nil {
		return err
	}
	defer c.Close()

	sess, sub, err := a.openSession(ctx, c, o.session)
	if err != nil {
		return err
	}
	var out output
	if o.output == modeText {
		view := a.newView(o.view, sess.ID)
		appr.setBefore(func() { status.hide(); _ = view.endLine() })
		out = view
	} else if out, err = newOutput(o.output, a.stdout, sess); err != nil {
		return err
	}
	quit := a.onInterrupt(ctx, c, sess.ID, cancel)
	defer quit()

	f := &follower{a: a, out: out, status: status, turnEnded: appr.turnEnded}
	appr.setCaughtUp(f.caughtUp)
	defer f.begin(sub)()
	status.show("thinking")
	turnID, err := c.Prompt(ctx, sess.ID, prompt)
	if err != nil {
		return err
	}
	reason, err := f.follow(ctx, sub, turnID)
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: exitInterrupted, msg: "quit before the turn ended"}
		}
		return err
	}
	if err := out.end(); err != nil {
		return err
	}
	return turnExit(reason, f.denied)
}

// turnExit maps a turn.done reason (and the tool calls denied in the turn)
// to the command's result.
func turnExit(reason string, denied int) error {
	switch reason {
	case events.TurnDoneReasonComplete:
		if denied > 0 {
			return &exitError{code: exitDenied, msg: fmt.Sprintf("the turn completed, but %d tool call(s) were denied", denied)}
		}
		return nil
	case events.TurnDoneReasonInterrupted:
		return &exitError{code: exitInterrupted, msg: "the turn was interrupted"}
	case events.TurnDoneReasonDenied:
		return &exitError{code: exitDenied, msg: "the turn ended after too many denied tool calls"}
	}
	return &exitError{code: exitFailed, msg: fmt.Sprintf("the turn did not complete (reason: %s)", reason)}
}

// onInterrupt makes the first Ctrl-C interrupt the session's turn and the
// second one quit (by cancelling). Call the result to stop listening.
func (a *app) onInterrupt(ctx context.Context, c *client.Client, sessionID string, quit context.CancelFunc) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case <-sigs:
			}
			n++
			if n > 1 {
				quit()
				return
			}
			fmt.Fprintln(a.stderr, "\ntrellis: interrupting the turn (Ctrl-C again to quit)")
			go interruptTurn(ctx, a, c, sessionID)
		}
	}()
	return sync.OnceFunc(func() {
		signal.Stop(sigs)
		close(done)
	})
}

// interruptTurn asks the daemon to interrupt the session's turn; a failure
// because the command is ending anyway is not reported.
func interruptTurn(ctx context.Context, a *app, c *client.Client, sessionID string) {
	err := c.Interrupt(ctx, sessionID)
	if err != nil && ctx.Err() == nil && !errors.Is(err, client.ErrClosed) {
		fmt.Fprintln(a.stderr, "trellis: interrupt:", err)
	}
}

// follower renders the events of one turn.
type follower struct {
	a      *app
	out    output
	status *statusLine
	// turnEnded, when set, is told that the turn ended.
	turnEnded func(turnID string)
	denied    int // tool calls denied in the turn followed last

	// What caughtUp waits on, under mu: while printing, taken is the seq
	// of the last event follow took from sub, rendered or skipped.
	mu       sync.Mutex
	sub      *client.Subscription
	printing bool
	taken    int64
	advanced chan struct{} // closed, and replaced, when taken grows or printing ends
}

// begin tells caughtUp that follow prints the events of sub until end is
// called. Call it before the prompt is sent: the approval requests of its
// turn may come before follow starts.
func (f *follower) begin(sub *client.Subscription) (end func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sub, f.printing = sub, true
	if f.advanced == nil {
		f.advanced = make(chan struct{})
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.printing = false
		f.advance()
	}
}

// took records that follow took the event of seq from the subscription.
func (f *follower) took(seq int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = max(f.taken, seq)
	f.advance()
}

// advance wakes caughtUp (under mu).
func (f *follower) advance() {
	if f.advanced != nil {
		close(f.advanced)
	}
	f.advanced = make(chan struct{})
}

// caughtUp waits until follow has taken the events the connection brought
// so far, or no events are printed, or ctx ends. The approver calls it
// before it prints: an approval request (or the agent's question) comes on
// its own goroutine, after the events of its turn, which the subscription
// may still hold (the output of the call before the one that asks).
func (f *follower) caughtUp(ctx context.Context) {
	f.mu.Lock()
	sub := f.sub
	f.mu.Unlock()
	if sub == nil {
		return
	}
	upto := sub.Received()
	for {
		f.mu.Lock()
		done, advanced := !f.printing || f.taken >= upto, f.advanced
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return
		}
	}
}

// follow renders the events of turn turnID until its turn.done and returns
// the reason. Events of other turns (one running before a queued prompt)
// are skipped.
func (f *follower) follow(ctx context.Context, sub *client.Subscription, turnID string) (string, error) {
	inTurn := false
	f.denied = 0
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return "", err
		}
		shown := ofTurn(ev, turnID, &inTurn)
		if shown {
			if ev.Kind == eventkind.TurnDone {
				f.status.hide()
			}
			err = f.render(ev)
		}
		f.took(ev.Seq)
		if err != nil {
			return "", err
		}
		if shown && ev.Kind == eventkind.TurnDone {
			var done events.TurnDoneEvent
			if err := ev.Decode(&done); err != nil {
				return "", err
			}
			if f.turnEnded != nil {
				f.turnEnded(turnID)
			}
			return done.Reason, nil
		}
	}
}

// ofTurn tells whether follow renders ev: the turn.queued, turn.dequeued
// and turn.done of turn turnID, and the events from its turn.started (which
// sets *inTurn) on.
func ofTurn(ev client.Event, turnID string, inTurn *bool) bool {
	mine := ev.TurnID() == turnID
	switch ev.Kind {
	case eventkind.TurnQueued, eventkind.TurnDequeued, eventkind.TurnDone:
		return mine
	case eventkind.TurnStarted:
		if mine {
			*inTurn = true
		}
		return mine
	}
	return *inTurn
}

// render writes one event: the text rendering says what tools did itself;
// the other modes get the errors on stderr.
func (f *follower) render(ev client.Event) error {
	switch ev.Kind {
	case eventkind.MessageDelta, eventkind.ToolCall, eventkind.ToolResult, eventkind.Error, eventkind.Diff, eventkind.StepDone:
		f.status.hide()
	}
	if err := f.out.event(ev); err != nil {
		return err
	}
	_, text := f.out.(*transcript)
	stderr := f.a.stderr
	switch ev.Kind {
	case eventkind.TurnQueued:
		var q events.TurnQueuedEvent
		_ = ev.Decode(&q)
		fmt.Fprintf(stderr, "trellis: queued behind the running turn (position %d)\n", q.Position)
		f.status.show("queued")
	case eventkind.TurnDequeued:
		var d events.TurnDequeuedEvent
		_ = ev.Decode(&d)
		if d.Reason == events.TurnDequeuedReasonDropped {
			f.status.hide()
			fmt.Fprintln(stderr, "trellis: the queued prompt was dropped before it ran (the turn ahead of it was interrupted, or the queue was cleared); send it again to run it")
		}
	case eventkind.TurnStarted:
		f.status.show("thinking")
	case eventkind.Error:
		var e events.ErrorEvent
		_ = ev.Decode(&e)
		if denialCodes[e.Code] {
			f.denied++
		}
		if !text {
			fmt.Fprintf(stderr, "trellis: error: %s: %s\n", e.Code, e.Message)
		}
	case eventkind.ToolCall:
		f.status.show("running " + toolName(ev))
	case eventkind.ToolResult:
		f.status.show("thinking")
	}
	return nil
}

func toolName(ev client.Event) string {
	var c events.ToolCallEvent
	_ = ev.Decode(&c)
	return c.Name
}

// statusLine is the spinner of a command, shown while it waits (only on a
// terminal); safe for concurrent use.
type statusLine struct {
	a    *app
	mu   sync.Mutex
	stop func()
}

func (s *statusLine) show(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
	s.stop = s.a.spin(msg)
}

func (s *statusLine) hide() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}
