package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/client"
)

// spin shows a spinner with msg on stderr until the returned function is
// called; it does nothing when stderr is not a terminal.
func (a *app) spin(msg string) (stop func()) {
	if !a.stderrTTY {
		return func() {}
	}
	// It draws over the line the cursor is on, chat's line editor's
	// included: it is not output that the editor's line goes below (screen).
	w := direct(a.stderr)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "\r%c %s\x1b[K", frames[i%len(frames)], msg)
			select {
			case <-done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-finished
	})
}

// lineReader reads stdin one line at a time in one goroutine, so that the
// chat loop and the approval questions can share it.
type lineReader struct {
	r     io.Reader
	once  sync.Once
	lines chan string
	err   error // set before lines is closed
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: r, lines: make(chan string)}
}

// C delivers the lines without their newline; it is closed at the end of
// the input, after which Err tells why.
func (l *lineReader) C() <-chan string {
	l.once.Do(func() { go l.read() })
	return l.lines
}

// Err is io.EOF, or the read error, once C is closed.
func (l *lineReader) Err() error { return l.err }

// ReadLine returns the next line without its newline; io.EOF at the end of
// the input.
func (l *lineReader) ReadLine(ctx context.Context) (string, error) {
	select {
	case line, ok := <-l.C():
		if !ok {
			return "", l.err
		}
		return line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (l *lineReader) read() {
	sc := bufio.NewScanner(l.r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		l.lines <- strings.TrimRight(sc.Text(), "\r")
	}
	l.err = sc.Err()
	if l.err == nil {
		l.err = io.EOF
	}
	close(l.lines)
}

// approver answers approval requests as the --approve flag says: "allow",
// "deny", or "ask" (on the terminal; denied when stdin is not one).
type approver struct {
	a      *app
	policy string
	// canAsk tells whether "ask" may read the answer from stdin: when it
	// is a terminal (run), or always in chat, whose input is stdin anyway.
	canAsk bool
	mu     sync.Mutex // one question at a time
	askMu  sync.Mutex // guards asking
	// before is called before a question is printed (to end a line of
	// streamed output).
	before func()

	asking map[string]context.CancelFunc // open questions by turn id (under mu)
	// pause, when set, stops the chat's read of a prompt (promptReader)
	// before a question reads the terminal (under askMu).
	pause func()
	// caughtUp, when set, waits until the events that came before a
	// request are printed (follower.caughtUp; under askMu).
	caughtUp func(ctx context.Context)
}

// setCaughtUp sets what a request waits for before it prints.
func (p *approver) setCaughtUp(f func(ctx context.Context)) {
	p.askMu.Lock()
	defer p.askMu.Unlock()
	p.caughtUp = f
}

// waitPrinted waits, before a request prints anything, until the events that
// came before it are printed: it comes on its own goroutine, they through the
// subscription, and the question follows what led to it.
func (p *approver) waitPrinted(ctx context.Context) {
	p.askMu.Lock()
	caughtUp := p.caughtUp
	p.askMu.Unlock()
	if caughtUp != nil {
		caughtUp(ctx)
	}
}

// setPause sets what a question calls before it reads the terminal.
func (p *approver) setPause(f func()) {
	p.askMu.Lock()
	defer p.askMu.Unlock()
	p.pause = f
}

// idle waits until no question is open.
func (p *approver) idle() {
	p.mu.Lock()
	defer p.mu.Unlock()
}

// setBefore replaces the before hook.
func (p *approver) setBefore(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before = f
}

// turnEnded drops the open question of a turn that ended (an interrupt
// denied it on the daemon already).
func (p *approver) turnEnded(turnID string) {
	p.askMu.Lock()
	defer p.askMu.Unlock()
	if cancel := p.asking[turnID]; cancel != nil {
		cancel()
	}
}

func (p *approver) answer(ctx context.Context, req client.ApprovalRequest) client.ApprovalAnswer {
	what := describeCall(req.Tool, req.Args)
	// The rendering shows the call (or its denial, in one line).
	switch p.policy {
	case "allow":
		return client.ApprovalAnswer{Decision: "allow"}
	case "deny":
		return client.ApprovalAnswer{Decision: "deny", Reason: "denied by --approve deny"}
	}
	p.waitPrinted(ctx)
	if !p.canAsk {
		return p.refuse(what)
	}
	ctx, release := p.takeTerminal(ctx, req.TurnID)
	defer release()
	fmt.Fprintf(p.a.stderr, "trellis: %s needs approval (%s, risk %s)", what, req.PermissionTag, req.Risk)
	if req.Note != "" {
		fmt.Fprintf(p.a.stderr, ": %s", req.Note)
	}
	fmt.Fprintln(p.a.stderr)
	always := "[a]lways"
	if req.Pattern != "" {
		always = "[a]lways allow " + req.Pattern
	}
	for {
		line, err := p.a.askLine(ctx, fmt.Sprintf("Allow? [y]es / [n]o / %s: ", always))
		if err != nil {
			fmt.Fprintln(p.a.stderr)
			reason := "no answer"
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				reason = "the question timed out"
			case errors.Is(err, context.Canceled):
				reason = "the turn ended"
			}
			fmt.Fprintf(p.a.stderr, "trellis: denied %s (%s)\n", what, reason)
			return client.ApprovalAnswer{Decision: "deny", Reason: reason}
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return client.ApprovalAnswer{Decision: "allow"}
		case "n", "no":
			return client.ApprovalAnswer{Decision: "deny", Reason: "the user said no"}
		case "a", "always":
			return client.ApprovalAnswer{Decision: "allow", Scope: "always"}
		}
		fmt.Fprintln(p.a.stderr, "Please answer y, n or a.")
	}
}

// takeTerminal waits for the terminal (one question at a time), takes it
// over from the chat's reading, and returns a context that ends with the
// turn (turnEnded) and the function that gives the terminal back.
func (p *approver) takeTerminal(ctx context.Context, turnID string) (context.Context, func()) {
	p.mu.Lock()
	ctx, cancel := context.WithCancel(ctx)
	p.askMu.Lock()
	if p.pause != nil {
		p.pause() // the question takes the terminal over
	}
	if p.asking == nil {
		p.asking = map[string]context.CancelFunc{}
	}
	p.asking[turnID] = cancel
	p.askMu.Unlock()
	if p.before != nil {
		p.before()
	}
	return ctx, func() {
		p.askMu.Lock()
		delete(p.asking, turnID)
		p.askMu.Unlock()
		cancel()
		p.mu.Unlock()
	}
}

// askLine asks a question and reads the answer: through the line editor
// when chat runs one, else on stderr and stdin (a pipe's answer is echoed).
func (a *app) askLine(ctx context.Context, prompt string) (string, error) {
	line, err := a.readAnswer(ctx, prompt)
	if errors.Is(err, errPromptInterrupted) {
		return "n", nil // Ctrl-C at the question: no
	}
	return line, err
}

// readAnswer is askLine with Ctrl-C at the question as errPromptInterrupted.
func (a *app) readAnswer(ctx context.Context, prompt string) (string, error) {
	if t, ok := a.input.(*ttySource); ok {
		return t.ReadLine(ctx, prompt)
	}
	fmt.Fprint(a.stderr, prompt)
	line, err := a.lines.ReadLine(ctx)
	if err == nil && !a.stdinTTY {
		fmt.Fprintln(a.stderr, line) // echo what a pipe answered
	}
	return line, err
}

func (p *approver) refuse(what string) client.ApprovalAnswer {
	fmt.Fprintf(p.a.stderr, "trellis: denied %s: it needs approval and stdin is not a terminal to ask on (use --approve allow or --approve deny)\n", what)
	return client.ApprovalAnswer{Decision: "deny", Reason: "nobody could be asked (stdin is not a terminal)"}
}

// describeCall renders a tool call as `name {args}`, shortened.
func describeCall(tool string, args json.RawMessage) string {
	if tool == "budget" {
		// A paused turn's budget (approval.respond allow raises it).
		var b struct {
			RaiseTo struct {
				MaxCostMicroUsd *int64 `json:"maxCostMicroUsd"`
				MaxTokens       *int64 `json:"maxTokens"`
			} `json:"raiseTo"`
		}
		if json.Unmarshal(args, &b) == nil {
			var to []string
			if c := b.RaiseTo.MaxCostMicroUsd; c != nil {
				to = append(to, "cost "+microUSD(*c))
			}
			if n := b.RaiseTo.MaxTokens; n != nil {
				to = append(to, fmt.Sprintf("%d tokens", *n))
			}
			if len(to) > 0 {
				return "budget: raise to " + strings.Join(to, ", ")
			}
		}
	}
	s := strings.TrimSpace(string(args))
	if s == "" || s == "{}" || s == "null" {
		return tool
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return tool + " " + s
}

// question answers the agent's questions (ask_user) on the terminal, one
// line per question: an option's number, numbers separated by commas for
// a question that takes several, or the person's own words; an empty line
// declines. Where nobody can be asked (stdin is not a terminal) they are
// declined. --approve does not apply: it answers approvals, not questions.
func (p *approver) question(ctx context.Context, q client.QuestionRequest) client.QuestionAnswer {
	p.waitPrinted(ctx)
	if !p.canAsk {
		fmt.Fprintf(p.a.stderr, "trellis: the agent asked %d question(s); declined: stdin is not a terminal to ask on\n", len(q.Questions))
		return client.QuestionAnswer{Declined: true, Reason: "nobody could be asked (stdin is not a terminal)"}
	}
	ctx, release := p.takeTerminal(ctx, q.TurnID)
	defer release()
	var out client.QuestionAnswer
	for _, item := range q.Questions {
		fmt.Fprintf(p.a.stderr, "trellis: the agent asks: %s\n", item.Question)
		for i, o := range item.Options {
			fmt.Fprintf(p.a.stderr, "  %d. %s", i+1, o.Label)
			if o.Description != "" {
				fmt.Fprintf(p.a.stderr, " — %s", o.Description)
			}
			fmt.Fprintln(p.a.stderr)
		}
		prompt := "Answer (your own words; empty to decline): "
		switch {
		case len(item.Options) > 0 && item.Multiple:
			prompt = "Answer (numbers separated by commas, or your own words; empty to decline): "
		case len(item.Options) > 0:
			prompt = "Answer (a number, or your own words; empty to decline): "
		}
		line, err := p.a.readAnswer(ctx, prompt)
		line = strings.TrimSpace(line)
		if err != nil || line == "" {
			reason := "the user declined"
			switch {
			case errors.Is(err, errPromptInterrupted):
			case errors.Is(err, context.DeadlineExceeded):
				reason = "the question timed out"
			case errors.Is(err, context.Canceled):
				reason = "the turn ended"
			case err != nil:
				reason = "no answer"
			}
			if err != nil {
				fmt.Fprintln(p.a.stderr)
			}
			fmt.Fprintf(p.a.stderr, "trellis: declined the agent's questions (%s)\n", reason)
			return client.QuestionAnswer{Declined: true, Reason: reason}
		}
		out.Answers = append(out.Answers, client.AnswerValues{Values: chosen(line, item)})
	}
	return out
}

// chosen reads an answer line: option numbers (one, or several separated
// by commas for a multiple question) stand for their labels; anything else
// is the person's own words.
func chosen(line string, q client.Question) []string {
	parts := strings.Split(line, ",")
	if len(parts) > 1 && !q.Multiple {
		return []string{line}
	}
	var labels []string
	for _, part := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > len(q.Options) {
			return []string{line}
		}
		labels = append(labels, q.Options[n-1].Label)
	}
	return labels
}
