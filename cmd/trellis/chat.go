package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/protocol/events"
)

// chatOptions are the flags of trellis chat.
type chatOptions struct {
	session sessionOptions
	approve string
	replay  bool // print the session's conversation so far first
	view    viewOptions
}

func newChatCmd(a *app) *cobra.Command {
	var o chatOptions
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Talk with an agent: each line is a prompt, the answer streams back",
		Long: `Talk with an agent in a new session (or in --session, or --continue the last one
of the working directory): each line you type is a prompt and the answer streams
to stdout. The session flags (--session, --continue, --workdir, --model, --agent,
--permission-mode) are those of trellis run.

When a tool call needs approval you are asked y (yes), n (no) or a (always).
Ctrl-C interrupts the running turn, a second Ctrl-C quits; Ctrl-D or /quit
leaves. Other lines starting with / run commands.

On a terminal you can type while a turn runs: Enter queues a line as the next
prompt, Ctrl-S steers it into the running turn (its model reads it at its next
call). After /busy steer Enter steers too; /busy queue goes back to queueing.
/steer TEXT always steers.

On a terminal the input is a line editor: Up/Down recall earlier prompts (kept in
HOME/chat_history), Ctrl-R searches them, Tab completes /commands and skills, and
a line ending with \ continues on the next one (a multi-line prompt). /help says
so again.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.chat(cmd.Context(), o)
		},
	}
	o.session.flags(cmd)
	cmd.Flags().StringVar(&o.approve, "approve", "ask", "tool calls that need approval: ask, allow or deny")
	o.view.flags(cmd)
	return cmd
}

// chat runs the conversation loop.
func (a *app) chat(ctx context.Context, o chatOptions) error {
	if err := checkApprove(o.approve); err != nil {
		return err
	}
	if err := o.session.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	status := &statusLine{a: a}
	defer status.hide()
	var out *transcript // set once the session is known
	appr := &approver{a: a, policy: o.approve, canAsk: true, before: func() {
		status.hide()
		if out != nil {
			_ = out.endLine()
		}
	}}
	c, err := a.connect(ctx, client.Options{Approve: appr.answer, Ask: appr.question})
	if err != nil {
		return err
	}
	defer c.Close()
	var sess sessionInfo
	var sub *client.Subscription
	if o.replay {
		sess, sub, err = a.replaySession(ctx, c, o.session.session)
	} else {
		sess, sub, err = a.openSession(ctx, c, o.session)
	}
	if err != nil {
		return err
	}
	// On a terminal: a line editor with history, search and completion.
	if a.stdinTTY {
		names := slashNames(func() ([]string, error) { return listCommands(ctx, c, sess.ID) })
		// The editor draws on the terminal: stdout, or stderr when
		// stdout goes elsewhere (a file keeps the answers only).
		term := a.stdoutFile()
		if !a.stdoutTTY && a.stderrTTY {
			term = a.stderrFile()
		}
		tty, err := newTTYSource(a.home, os.Stdin, term, a.stderrFile(), names)
		if err != nil {
			return fmt.Errorf("the terminal's line editor: %w", err)
		}
		defer tty.Close()
		a.input = tty
		// What the chat writes on the terminal goes above the line being
		// read, which never cleans a line of the answer away.
		if a.stdoutTTY {
			a.stdout = tty.output(a.stdout)
		}
		if a.stderrTTY {
			a.stderr = tty.output(a.stderr)
		}
	}
	out = a.newView(o.view, sess.ID)
	fmt.Fprintf(a.stderr, "trellis: chatting in session %s (workdir %s); Ctrl-C interrupts a turn, Ctrl-D or /quit leaves\n", sess.ID, sess.Workdir)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	f := &follower{a: a, out: out, status: status, turnEnded: appr.turnEnded}
	appr.setCaughtUp(f.caughtUp)
	prompts := &promptReader{ctx: ctx, input: a.input, appr: appr}
	busy := busyQueue
	idleInterrupts := 0
	for {
		var line string
		select {
		case r := <-prompts.next():
			prompts.took()
			if errors.Is(r.err, errPromptInterrupted) {
				idleInterrupts++
				if idleInterrupts > 1 {
					return nil
				}
				fmt.Fprintln(a.stderr, "(Ctrl-C again, Ctrl-D or /quit to leave)")
				continue
			}
			if r.err != nil {
				if a.stdinTTY {
					fmt.Fprintln(a.stderr)
				}
				if errors.Is(r.err, io.EOF) {
					return nil
				}
				return r.err
			}
			line = strings.TrimSpace(r.line)
		case <-sigs:
			idleInterrupts++
			if idleInterrupts > 1 {
				fmt.Fprintln(a.stderr)
				return nil
			}
			fmt.Fprintln(a.stderr, "\n(Ctrl-C again, Ctrl-D or /quit to leave)")
			continue
		case <-c.Done():
			if err := c.Err(); err != nil {
				return err
			}
			return fmt.Errorf("the daemon closed the connection")
		}
		idleInterrupts = 0
		switch line {
		case "":
			continue
		case "/quit", "/exit":
			return nil
		case "/help":
			printChatHelp(a.stderr)
			continue
		}
		if a.setBusy(line, &busy) {
			continue
		}
		a.input.Remember(line)
		t := &chatTurn{a: a, c: c, sub: sub, f: f, sessionID: sess.ID, busy: &busy, prompts: prompts}
		if err := t.run(ctx, line, sigs); errors.Is(err, errLeftChat) {
			return nil
		} else if err != nil {
			return err
		}
		_ = out.end()
		// The turn's output went over the prompt its typeahead is read on.
		a.input.Redraw()
	}
}

// errLeftChat: /quit was typed while a turn ran; the chat ends, the turn
// goes on in the daemon.
var errLeftChat = errors.New("left the chat during a turn")

// What a line typed while a turn runs does (/busy).
const (
	busyQueue = "queue" // the next prompt: queued behind the turn
	busySteer = "steer" // steered into the running turn (session.steer)
)

// setBusy handles "/busy queue|steer" (reporting true); any other line is
// not for it.
func (a *app) setBusy(line string, busy *string) bool {
	name, arg, _ := strings.Cut(line, " ")
	if name != "/busy" {
		return false
	}
	switch arg = strings.TrimSpace(arg); arg {
	case busyQueue, busySteer:
		*busy = arg
		fmt.Fprintf(a.stderr, "trellis: a line typed while a turn runs is now %s\n", map[string]string{busyQueue: "queued as the next prompt", busySteer: "steered into the running turn"}[arg])
	case "":
		fmt.Fprintf(a.stderr, "trellis: a line typed while a turn runs is %sd (/busy queue or /busy steer changes it)\n", *busy)
	default:
		fmt.Fprintf(a.stderr, "trellis: /busy takes queue or steer, not %q\n", arg)
	}
	return true
}

// chatTurn sends one line of the chat and renders the turns it leads to: its
// own, then the prompts typed meanwhile and queued behind it. Ctrl-C
// interrupts (which drops the queued ones), a second Ctrl-C quits.
type chatTurn struct {
	a         *app
	c         *client.Client
	sub       *client.Subscription
	f         *follower
	sessionID string
	busy      *string
	prompts   *promptReader
}

// send sends text: steered into the running turn (session.steer), or as a
// prompt (session.prompt, queued behind a running turn). It returns the turn
// to follow, "" when the text joined the running turn.
func (t *chatTurn) send(ctx context.Context, text string, steer bool) (string, error) {
	if !steer {
		return t.c.Prompt(ctx, t.sessionID, text)
	}
	turnID, started, err := t.c.Steer(ctx, t.sessionID, text)
	if err != nil || started {
		return turnID, err
	}
	return "", nil
}

// steerText is the text of a "/steer TEXT" line.
func steerText(line string) (string, bool) {
	name, text, _ := strings.Cut(line, " ")
	return strings.TrimSpace(text), name == "/steer"
}

func (t *chatTurn) run(ctx context.Context, line string, sigs <-chan os.Signal) error {
	a, f := t.a, t.f
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From before the prompt is sent: its turn's requests wait for the
	// events before them, which f prints.
	defer f.begin(t.sub)()
	f.status.show("thinking")
	text, steer := steerText(line)
	if !steer {
		text = line
	}
	first, err := t.send(ctx, text, steer)
	if err != nil || first == "" {
		f.status.hide()
		switch {
		case err == nil: // a turn this chat does not follow took it
			fmt.Fprintln(a.stderr, "trellis: steered into the running turn")
		case client.CodeOf(err) != "": // the daemon refused this prompt; the chat goes on
			fmt.Fprintln(a.stderr, "trellis:", err)
		default:
			return err
		}
		return nil
	}
	// On a terminal, lines typed during the turns are read as they come; a
	// read still going on when they end is the chat's next prompt.
	var typed <-chan readResult
	if a.stdinTTY {
		typed = t.prompts.next()
	}
	type result struct {
		reason string
		err    error
	}
	interrupts := 0
	interrupt := func() error {
		interrupts++
		if interrupts > 1 {
			return &exitError{code: exitInterrupted, msg: "quit during a turn"}
		}
		f.status.hide()
		fmt.Fprintln(a.stderr, "\ntrellis: interrupting the turn (Ctrl-C again to quit)")
		go interruptTurn(ctx, a, t.c, t.sessionID)
		return nil
	}
	for turns := []string{first}; len(turns) > 0; {
		turnID := turns[0]
		turns = turns[1:]
		done := make(chan result, 1)
		go func() {
			reason, err := f.follow(ctx, t.sub, turnID)
			done <- result{reason, err}
		}()
		quit := func(err error) error {
			cancel()
			<-done
			return err
		}
	follow:
		for {
			select {
			case r := <-done:
				if r.err != nil {
					return r.err
				}
				if r.reason != events.TurnDoneReasonComplete {
					_ = f.out.end()
					fmt.Fprintf(a.stderr, "trellis: the turn ended: %s\n", r.reason)
				}
				break follow
			case <-sigs:
				if err := interrupt(); err != nil {
					return quit(err)
				}
				turns = nil // an interrupt drops the queued prompts
			case r := <-typed:
				t.prompts.took()
				typed = nil
				// The next read starts only once the chat goes on: one
				// started on the way out would draw a prompt after the
				// chat's last line.
				if errors.Is(r.err, errPromptInterrupted) { // Ctrl-C at the terminal's prompt
					if err := interrupt(); err != nil {
						return quit(err)
					}
					typed = t.prompts.next()
					turns = nil
					continue
				}
				if r.err != nil { // Ctrl-D: no more reading during these turns
					continue
				}
				line := strings.TrimSpace(r.line)
				if line == "/quit" || line == "/exit" {
					// The REPL's own command, not the session's: the
					// turn goes on in the daemon.
					fmt.Fprintf(a.stderr, "trellis: left the chat; the running turn goes on in session %s (trellis chat --continue comes back to it)\n", t.sessionID)
					return quit(errLeftChat)
				}
				typed = t.prompts.next()
				next, err := t.typed(ctx, line)
				if err != nil {
					return quit(err)
				}
				if next != "" {
					turns = append(turns, next)
				}
			}
		}
		_ = f.out.end()
	}
	return nil
}

// typed handles a line typed while a turn runs; it returns the turn it
// queued, if any.
func (t *chatTurn) typed(ctx context.Context, line string) (string, error) {
	if line == "" || t.a.setBusy(line, t.busy) {
		return "", nil
	}
	text, steer := steerText(line)
	if !steer {
		text, steer = line, *t.busy == busySteer
	}
	t.a.input.Remember(line)
	next, err := t.send(ctx, text, steer)
	switch {
	case err != nil && client.CodeOf(err) != "":
		fmt.Fprintln(t.a.stderr, "trellis:", err)
		return "", nil
	case err != nil:
		return "", err
	case next == "":
		fmt.Fprintln(t.a.stderr, "trellis: steered into the running turn")
	default:
		fmt.Fprintln(t.a.stderr, "trellis: queued; it runs after this turn")
	}
	return next, nil
}

// promptReader reads the chat's prompts, one read at a time, for the chat
// loop between turns and for chatTurn.run during them (the lines typed
// meanwhile). A read is not tied to either: one going on when a turn ends
// goes on at the prompt, with what was typed so far, and a line read at that
// moment is kept for whoever takes the next one. A question of the approver
// pauses the read: the question reads the terminal, and what was typed so
// far stays on its line. Only the chat's goroutine calls next and took.
type promptReader struct {
	ctx   context.Context
	input lineSource
	appr  *approver
	read  chan readResult // the read going on, if any
	parts []string        // the lines of a multi-line prompt read so far (readPrompt)
}

// next returns the channel the next prompt comes on: that of the read going
// on, or of one it starts.
func (p *promptReader) next() <-chan readResult {
	if p.read == nil {
		p.read = make(chan readResult, 1)
		go p.readOne(p.read)
	}
	return p.read
}

// took tells that the prompt of the read going on was taken: the next call
// to next starts a new read.
func (p *promptReader) took() { p.read = nil }

// readOne reads one prompt into ch, waiting for the questions that pause it.
func (p *promptReader) readOne(ch chan<- readResult) {
	for {
		read, pause := context.WithCancel(p.ctx)
		p.appr.setPause(pause)
		p.appr.idle() // a question open now is answered first
		line, err := readPrompt(read, p.input, &p.parts)
		paused := err != nil && read.Err() != nil && p.ctx.Err() == nil
		pause()
		if !paused {
			ch <- readResult{line, err} // ch has room for it
			return
		}
	}
}

// listCommands returns the names of the daemon's slash commands for a
// session (built-ins, project commands, skills).
func listCommands(ctx context.Context, c *client.Client, sessionID string) ([]string, error) {
	var r struct {
		Commands []struct {
			Name string `json:"name"`
		} `json:"commands"`
	}
	if err := c.Call(ctx, "command.list", map[string]any{"sessionId": sessionID}, &r); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(r.Commands))
	for _, cmd := range r.Commands {
		names = append(names, cmd.Name)
	}
	return names, nil
}

// replaySession prints a session's conversation so far and subscribes to
// what follows.
// ref is an id, a unique id prefix or a name.
func (a *app) replaySession(ctx context.Context, c *client.Client, ref string) (sessionInfo, *client.Subscription, error) {
	summary, err := findSession(ctx, c, ref)
	if err != nil {
		return sessionInfo{}, nil, err
	}
	id := summary.SessionID
	res, sub, err := c.Resume(ctx, id, 0)
	if err != nil {
		return sessionInfo{}, nil, err
	}
	show := newTranscript(a.stdout, a.stdout, colorOK(a.stdoutTTY))
	show.prompts, show.hint = true, "trellis sessions show "+id+" --full"
	for _, ev := range res.Events {
		if err := show.event(ev); err != nil {
			return sessionInfo{}, nil, err
		}
	}
	_ = show.end()
	return sessionInfoOf(summary), sub, nil
}
