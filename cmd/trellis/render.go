package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
)

// Bounds of the collapsed views of tool activity (--full shows everything).
const (
	maxOutputLines = 8  // lines of a tool's output
	maxDiffLines   = 40 // lines of a diff
	maxLineRunes   = 200
)

// denialCodes are the error codes of a tool call that was not allowed.
var denialCodes = map[string]bool{errcode.ModeDenied: true, errcode.ApprovalDenied: true, errcode.ApprovalTimeout: true}

// transcript renders a conversation as the text CLI shows it: the answer
// text on text, and on info what the tools did — each call with its
// command, a bounded view of its output, a coloured diff of every file it
// changed, one line for a denied call — and the token usage at the end of
// a turn. trellis run and chat write info to stderr (stdout keeps only the
// answer); sessions show writes both to stdout.
type transcript struct {
	text, info io.Writer
	color      bool // ANSI colours on info (a terminal, and NO_COLOR unset)
	full       bool // no bounds on output and diffs
	quiet      bool // no usage line
	prompts    bool // print each turn's prompt (sessions show)
	hint       string

	midLine bool                                           // the answer text did not end a line
	args    map[string]json.RawMessage                     // tool call args by call id
	denial  *events.ErrorEvent                             // the error event of the call denied last, until its result
	usage   struct{ in, out, calls, cost, unpriced int64 } // this turn's; cost in micro-dollars
	model   string
	denied  int // denied calls in this turn
}

func newTranscript(text, info io.Writer, color bool) *transcript {
	return &transcript{text: text, info: info, color: color, args: map[string]json.RawMessage{}}
}

// colorOK tells whether colour may go to a stream that is (or not) a
// terminal: never when NO_COLOR is set (https://no-color.org).
func colorOK(tty bool) bool {
	return tty && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// ANSI styles.
const (
	styleBold  = "1"
	styleDim   = "2"
	styleRed   = "31"
	styleGreen = "32"
	styleCyan  = "36"
)

func (t *transcript) paint(style, s string) string {
	if !t.color || s == "" {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}

// endLine ends a line of answer text, if one is open.
func (t *transcript) endLine() error {
	if !t.midLine {
		return nil
	}
	t.midLine = false
	_, err := io.WriteString(t.text, "\n")
	return err
}

// line writes one line of tool activity.
func (t *transcript) line(format string, args ...any) {
	_ = t.endLine()
	fmt.Fprintf(t.info, format+"\n", args...)
}

// event renders one event.
func (t *transcript) event(ev client.Event) error {
	switch ev.Kind {
	case eventkind.TurnStarted:
		t.usage.in, t.usage.out, t.usage.calls, t.denied, t.model = 0, 0, 0, 0, ""
		if t.prompts {
			var s events.TurnStartedEvent
			_ = ev.Decode(&s)
			t.line("%s %s", t.paint(styleBold, ">"), t.paint(styleBold, s.Prompt))
		}
	case eventkind.TurnSteered:
		// Always shown: a steered text may come from another client.
		var s events.TurnSteeredEvent
		_ = ev.Decode(&s)
		t.line("%s %s %s", t.paint(styleBold, ">"), t.paint(styleBold, s.Text), t.paint(styleDim, "(steered into the turn)"))
	case eventkind.TurnRollback:
		var r events.TurnRollbackEvent
		_ = ev.Decode(&r)
		t.line("%s", t.paint(styleDim, fmt.Sprintf("─ turn %s rolled back: the model no longer reads its %d messages", r.TurnID, r.Messages)))
	case eventkind.SessionRewound:
		var r events.SessionRewoundEvent
		_ = ev.Decode(&r)
		t.line("%s", t.paint(styleDim, fmt.Sprintf("─ rewound to event %d: the model no longer reads events %d to %d", r.ToSeq, r.ToSeq+1, r.FromSeq)))
	case eventkind.MessageDelta:
		text := ev.Text()
		if text == "" {
			return nil
		}
		if _, err := io.WriteString(t.text, text); err != nil {
			return err
		}
		t.midLine = !strings.HasSuffix(text, "\n")
	case eventkind.StepDone:
		var d events.StepDoneEvent
		_ = ev.Decode(&d)
		for _, c := range d.ToolCalls {
			t.args[c.ID] = c.Args
		}
		return t.endLine()
	case eventkind.ToolCall:
		var c events.ToolCallEvent
		_ = ev.Decode(&c)
		t.args[c.CallID] = c.Args
		t.line("%s %s", t.paint(styleCyan, "●"), t.paint(styleBold, callSummary(c.Name, c.Args)))
	case eventkind.ToolResult:
		var r events.ToolResultEvent
		_ = ev.Decode(&r)
		t.result(r)
	case eventkind.Diff:
		var d struct {
			Path  string `json:"path"`
			Patch string `json:"patch"`
		}
		_ = ev.Decode(&d)
		t.diff(d.Patch)
	case eventkind.Error:
		var e events.ErrorEvent
		_ = ev.Decode(&e)
		if denialCodes[e.Code] {
			// Said once, with the call, when its tool.result comes.
			t.denial = &e
			return nil
		}
		t.line("%s %s", t.paint(styleRed, "✗ error:"), oneLine(e.Code+": "+e.Message))
	case eventkind.ProviderRetry:
		var r events.ProviderRetryEvent
		_ = ev.Decode(&r)
		t.line("%s", t.paint(styleDim, fmt.Sprintf("↻ %s %s (%s); trying again in %.1f s (attempt %d)",
			strings.Trim(r.Provider+"/"+r.Model, "/"), strings.ReplaceAll(r.Reason, "_", " "), oneLine(r.Message), float64(r.WaitMs)/1000, r.Attempt+1)))
	case eventkind.TurnPaused:
		var p events.TurnPausedEvent
		_ = ev.Decode(&p)
		t.line("%s", t.paint(styleBold, "⏸ "+pausedLine(p)))
	case eventkind.TurnResumed:
		t.line("%s", t.paint(styleDim, "▶ the budget was raised: the turn goes on"))
	case eventkind.Usage:
		var u events.UsageEvent
		_ = ev.Decode(&u)
		t.usage.in += u.InputTokens
		t.usage.out += u.OutputTokens
		t.usage.calls++
		t.usage.cost += u.CostMicroUsd
		if !u.Priced {
			t.usage.unpriced++
		}
		t.model = strings.Trim(u.Provider+"/"+u.Model, "/")
	case eventkind.TurnDone:
		var d events.TurnDoneEvent
		_ = ev.Decode(&d)
		_ = t.endLine()
		if d.Reason != events.TurnDoneReasonComplete && t.prompts { // run and chat say it themselves
			t.line("%s", t.paint(styleRed, "✗ the turn ended: "+d.Reason))
		}
		if !t.quiet && t.usage.calls > 0 {
			calls := "1 model call"
			if t.usage.calls > 1 {
				calls = fmt.Sprintf("%d model calls", t.usage.calls)
			}
			t.line("%s", t.paint(styleDim, fmt.Sprintf("─ %s · %d tokens in, %d out · %s · %s", t.model, t.usage.in, t.usage.out, calls,
				costText(t.usage.cost, t.usage.calls, t.usage.unpriced))))
		}
		if t.prompts {
			t.line("")
		}
	}
	return nil
}

// result renders a tool's result: a denial in one line, else the output
// (bounded) and, on failure, why.
func (t *transcript) result(r events.ToolResultEvent) {
	args := t.args[r.CallID]
	delete(t.args, r.CallID)
	if e := t.denial; e != nil {
		t.denial = nil
		t.denied++
		t.line("%s %s %s", t.paint(styleRed, "✗"), callSummary(r.Name, args), t.paint(styleRed, "— denied: "+oneLine(e.Message)))
		return
	}
	if !r.OK {
		if args == nil { // never ran (interrupted, too many denials)
			t.line("%s %s %s", t.paint(styleRed, "✗"), r.Name, t.paint(styleRed, oneLine(deref(r.Error))))
			return
		}
		t.block(r.Output, maxOutputLines, nil)
		t.line("  %s %s", t.paint(styleRed, "└ failed:"), oneLine(deref(r.Error)))
		return
	}
	switch r.Name {
	case "write_file", "edit_file": // the diff event shows the change
		if first := oneLine(r.Output); first != "" {
			t.line("  %s", t.paint(styleDim, "└ "+first))
		}
		return
	}
	if strings.TrimSpace(r.Output) == "" {
		t.line("  %s", t.paint(styleDim, "└ (no output)"))
		return
	}
	t.block(r.Output, maxOutputLines, nil)
}

// diff renders a unified diff, coloured.
func (t *transcript) diff(patch string) {
	t.block(patch, maxDiffLines, func(l string) string {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			return t.paint(styleBold, l)
		case strings.HasPrefix(l, "+"):
			return t.paint(styleGreen, l)
		case strings.HasPrefix(l, "-"):
			return t.paint(styleRed, l)
		case strings.HasPrefix(l, "@@"):
			return t.paint(styleCyan, l)
		}
		return l
	})
}

// block writes text indented under its call, at most max lines unless
// full, with a line saying how much was left out.
func (t *transcript) block(text string, max int, style func(string) string) {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return
	}
	lines := strings.Split(text, "\n")
	shown := lines
	if !t.full && len(lines) > max {
		shown = lines[:max]
	}
	for _, l := range shown {
		l = clipRunes(strings.TrimRight(l, "\r"), maxLineRunes)
		if style != nil {
			l = style(l)
		}
		t.line("  %s %s", t.paint(styleDim, "│"), l)
	}
	if n := len(lines) - len(shown); n > 0 {
		more := fmt.Sprintf("… %d more lines", n)
		if t.hint != "" {
			more += " (" + t.hint + ")"
		}
		t.line("  %s", t.paint(styleDim, more))
	}
}

// end is called after the last event.
func (t *transcript) end() error { return t.endLine() }

// callSummary renders a tool call in one line: the shell command, or the
// path / pattern / URL a file or web tool works on, else the JSON args.
func callSummary(name string, args json.RawMessage) string {
	var m map[string]any
	_ = json.Unmarshal(args, &m)
	for _, key := range []string{"command", "path", "pattern", "query", "url", "name", "task"} {
		if v, ok := m[key].(string); ok && v != "" {
			if name == "shell" && key == "command" {
				return "shell $ " + clipRunes(oneLine(v), 160)
			}
			return name + " " + clipRunes(oneLine(v), 160)
		}
	}
	return describeCall(name, args)
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if first, rest, ok := strings.Cut(s, "\n"); ok {
		return strings.TrimSpace(first) + fmt.Sprintf(" (+%d lines)", strings.Count(rest, "\n")+1)
	}
	return s
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// costText is the cost of calls model calls, unpriced of which had no
// price: "$0.0123", "$0.0123 + 1 unpriced call", "cost unknown".
func costText(microUSD, calls, unpriced int64) string {
	switch {
	case calls > 0 && unpriced == calls:
		return "cost unknown"
	case unpriced == 1:
		return formatUSD(microUSD) + " + 1 unpriced call"
	case unpriced > 1:
		return fmt.Sprintf("%s + %d unpriced calls", formatUSD(microUSD), unpriced)
	}
	return formatUSD(microUSD)
}

// formatUSD writes micro-dollars as dollars: to the ten-thousandth (half
// up), or to the micro-dollar below that; "$0" for nothing.
func formatUSD(microUSD int64) string {
	switch {
	case microUSD == 0:
		return "$0"
	case microUSD < 0:
		return "-" + formatUSD(-microUSD)
	case microUSD < 100:
		return fmt.Sprintf("$0.%06d", microUSD)
	}
	hundredths := (microUSD + 50) / 100 // of a cent
	return fmt.Sprintf("$%d.%04d", hundredths/10000, hundredths%10000)
}

// pausedLine says why a turn paused and how to go on.
func pausedLine(p events.TurnPausedEvent) string {
	var limits []string
	if b := p.Budget; b != nil {
		if b.MaxCostMicroUsd != nil {
			limits = append(limits, "cost "+microUSD(*b.MaxCostMicroUsd))
		}
		if b.MaxTokens != nil {
			limits = append(limits, fmt.Sprintf("%d tokens", *b.MaxTokens))
		}
	}
	spent := ""
	if s := p.Spent; s != nil {
		spent = fmt.Sprintf(" (spent %s, %d tokens)", microUSD(s.CostMicroUsd), s.Tokens)
	}
	if b := p.Budget; b != nil && b.Source == events.BudgetSourcePrincipal && b.PrincipalID != nil {
		return fmt.Sprintf("paused: the budget of principal %s, for all its sessions, (%s) is reached%s; an admin raises it with trellis principals budget or allows its request (trellis approvals ls), or interrupt",
			*b.PrincipalID, strings.Join(limits, ", "), spent)
	}
	return fmt.Sprintf("paused: the session's budget (%s) is reached%s; raise it with trellis sessions budget or allow its request (trellis approvals ls), or interrupt", strings.Join(limits, ", "), spent)
}
