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
	session string
	workdir string
	approve string
	replay  bool // print the session's conversation so far first
	view    viewOptions
}

func newChatCmd(a *app) *cobra.Command {
	var o chatOptions
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Talk with an agent: each line is a prompt, the answer streams back",
		Long: `Talk with an agent in a new session (or in --session ID): each line you type is a
prompt and the answer streams to stdout. When a tool call needs approval you are
asked y (yes), n (no) or a (always). Ctrl-C interrupts the running turn, a second
Ctrl-C quits; Ctrl-D or /quit leaves. Other lines starting with / run commands.

On a terminal the input is a line editor: Up/Down recall earlier prompts (kept in
HOME/chat_history), Ctrl-R searches them, Tab completes /commands and skills, and
a line ending with \ continues on the next one (a multi-line prompt). /help says
so again.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.chat(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.session, "session", "", "continue this session (default: a new one)")
	f.StringVar(&o.workdir, "workdir", ".", "working directory of a new session")
	f.StringVar(&o.approve, "approve", "ask", "tool calls that need approval: ask, allow or deny")
	o.view.flags(cmd)
	return cmd
}

// chat runs the conversation loop.
func (a *app) chat(ctx context.Context, o chatOptions) error {
	if err := checkApprove(o.approve); err != nil {
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
	c, err := a.connect(ctx, client.Options{Approve: appr.answer})
	if err != nil {
		return err
	}
	defer c.Close()
	var sess sessionInfo
	var sub *client.Subscription
	if o.replay {
		sess, sub, err = a.replaySession(ctx, c, o.session)
	} else {
		sess, sub, err = a.openSession(ctx, c, o.session, o.workdir)
	}
	if err != nil {
		return err
	}
	out = a.newView(o.view, sess.ID)
	fmt.Fprintf(a.stderr, "trellis: chatting in session %s (workdir %s); Ctrl-C interrupts a turn, Ctrl-D or /quit leaves\n", sess.ID, sess.Workdir)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	// On a terminal: a line editor with history, search and completion.
	if a.stdinTTY {
		names := slashNames(func() ([]string, error) { return listCommands(ctx, c, sess.ID) })
		tty, err := newTTYSource(a.home, os.Stdin, a.stdoutFile(), a.stderrFile(), names)
		if err != nil {
			return fmt.Errorf("the terminal's line editor: %w", err)
		}
		defer tty.Close()
		a.input = tty
	}
	f := &follower{a: a, out: out, status: status, turnEnded: appr.turnEnded}
	idleInterrupts := 0
	var reading chan readResult // the prompt being read, if any
	for {
		if reading == nil {
			reading = make(chan readResult, 1)
			go func(ch chan readResult) {
				line, err := readPrompt(ctx, a.input)
				ch <- readResult{line, err}
			}(reading)
		}
		var line string
		select {
		case r := <-reading:
			reading = nil
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
		a.input.Remember(line)
		if err := a.chatTurn(ctx, c, sub, f, sess.ID, line, sigs); err != nil {
			return err
		}
		_ = out.end()
	}
}

// chatTurn sends one prompt and renders its turn; Ctrl-C interrupts it, a
// second Ctrl-C quits.
func (a *app) chatTurn(ctx context.Context, c *client.Client, sub *client.Subscription, f *follower, sessionID, prompt string, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.status.show("thinking")
	turnID, err := c.Prompt(ctx, sessionID, prompt)
	if err != nil {
		f.status.hide()
		if client.CodeOf(err) != "" { // the daemon refused this prompt; the chat goes on
			fmt.Fprintln(a.stderr, "trellis:", err)
			return nil
		}
		return err
	}
	type result struct {
		reason string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		reason, err := f.follow(ctx, sub, turnID)
		done <- result{reason, err}
	}()
	interrupts := 0
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
			return nil
		case <-sigs:
			interrupts++
			if interrupts > 1 {
				cancel()
				<-done
				return &exitError{code: exitInterrupted, msg: "quit during a turn"}
			}
			f.status.hide()
			fmt.Fprintln(a.stderr, "\ntrellis: interrupting the turn (Ctrl-C again to quit)")
			go interruptTurn(ctx, a, c, sessionID)
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
func (a *app) replaySession(ctx context.Context, c *client.Client, id string) (sessionInfo, *client.Subscription, error) {
	summary, err := c.Session(ctx, id)
	if err != nil {
		return sessionInfo{}, nil, err
	}
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
