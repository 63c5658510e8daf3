package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chzyer/readline"
)

// errPromptInterrupted is what a terminal's line read returns for Ctrl-C.
var errPromptInterrupted = errors.New("interrupted at the prompt")

// lineSource reads the lines a person types: chat prompts and answers to
// approval questions.
type lineSource interface {
	// ReadLine shows prompt (on a terminal) and returns the next line
	// without its newline: io.EOF at the end of the input,
	// errPromptInterrupted for Ctrl-C at a terminal prompt.
	ReadLine(ctx context.Context, prompt string) (string, error)
	// Remember adds a chat prompt to the history.
	Remember(line string)
	// Redraw shows the prompt being read, and what is typed on it, again
	// below what was written since (a turn's output).
	Redraw()
}

// pipeSource reads lines from a pipe or file; prompts are not shown (they
// would only clutter a script's stderr).
type pipeSource struct{ r *lineReader }

func (p pipeSource) ReadLine(ctx context.Context, _ string) (string, error) {
	return p.r.ReadLine(ctx)
}

func (pipeSource) Remember(string) {}

func (pipeSource) Redraw() {}

// ttySource is a terminal line editor (github.com/chzyer/readline): line
// editing, history kept in HOME/chat_history across runs (Up/Down, Ctrl-R
// to search it), Tab completion of slash commands. The terminal is in raw
// mode while a line is read, which the chat does during its turns too
// (promptReader): Ctrl-C then ends the read (errPromptInterrupted) and the
// chat interrupts the turn. The editor draws through a screen it shares
// with the chat's output (output), so that it never cleans away a line the
// answer is still writing.
//
// Ctrl-S (steerKey) ends a chat prompt like Enter, but steers it into the
// running turn instead of queueing it: the line comes back as "/steer TEXT".
type ttySource struct {
	rl     *readline.Instance
	screen *screen // the terminal, shared with the chat's output (output)
	// stdin is what the editor reads: a read of it returns io.EOF once it
	// is closed, so that Close does not wait for a key while a read goes
	// on (the chat leaving during a turn, or on an error).
	stdin *readline.CancelableStdin

	mu      sync.Mutex // one read at a time
	pending chan readResult

	prompt     string      // the prompt shown (under mu)
	chatPrompt atomic.Bool // the line being read is a chat prompt (not an approval answer)
	steered    atomic.Bool // it ended with steerKey
}

// steerKey ends a chat prompt and steers it (readline's forward search key,
// which the chat gives up: Ctrl-R still searches the history).
const steerKey = readline.CharFwdSearch

type readResult struct {
	line string
	err  error
}

// historyFile is where trellis chat keeps its history.
func historyFile(home string) string { return filepath.Join(home, "chat_history") }

func newTTYSource(home string, stdin io.ReadCloser, stdout, stderr io.Writer, complete func() []string) (*ttySource, error) {
	path := historyFile(home)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	// The history holds what was typed: keep it private (0600).
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		f.Close()
	}
	t := &ttySource{stdin: readline.NewCancelableStdin(stdin), screen: &screen{term: stdout}}
	rl, err := readline.NewEx(&readline.Config{
		Prompt:                 promptFirst,
		HistoryFile:            path,
		HistoryLimit:           1000,
		DisableAutoSaveHistory: true, // chat prompts only, not approval answers
		HistorySearchFold:      true,
		AutoComplete:           slashCompleter{names: complete},
		InterruptPrompt:        "^C",
		EOFPrompt:              "",
		Stdin:                  t.stdin,
		Stdout:                 editorWriter{t.screen},
		Stderr:                 stderr,
		FuncFilterInputRune:    t.filterKey,
	})
	if err != nil {
		return nil, err
	}
	t.rl, t.screen.rl = rl, rl
	return t, nil
}

// output returns w, a stream on the editor's terminal, written through it:
// what the chat writes there goes above the line being read (screen).
func (t *ttySource) output(w io.Writer) io.Writer { return screenOutput{t.screen, w} }

// filterKey turns steerKey at a chat prompt into Enter, noting that the
// line is to be steered.
func (t *ttySource) filterKey(r rune) (rune, bool) {
	if r == steerKey && t.chatPrompt.Load() {
		t.steered.Store(true)
		return readline.CharEnter, true
	}
	return r, true
}

func (t *ttySource) ReadLine(ctx context.Context, prompt string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.chatPrompt.Store(prompt == promptFirst || prompt == promptMore)
	if t.pending == nil {
		// A read left by a caller that gave up (a question whose turn
		// ended) is finished by the next caller instead of starting
		// another one on the same terminal.
		t.rl.SetPrompt(prompt)
		ch := make(chan readResult, 1)
		go func() {
			line, err := t.rl.Readline()
			ch <- readResult{line, err}
		}()
		t.pending = ch
	} else if prompt != t.prompt {
		// The same prompt is left as it is: a redraw would also end what
		// the line shows meanwhile (a Ctrl-R search).
		t.rl.SetPrompt(prompt)
		t.rl.Refresh()
	}
	t.prompt = prompt
	select {
	case r := <-t.pending:
		t.pending = nil
		if errors.Is(r.err, readline.ErrInterrupt) {
			return "", errPromptInterrupted
		}
		if t.chatPrompt.Load() {
			r.line = strings.ReplaceAll(r.line, historyNewline, "\n") // a recalled multi-line prompt
		}
		if t.steered.Swap(false) && r.err == nil && strings.TrimSpace(r.line) != "" {
			return "/steer " + r.line, nil
		}
		return r.line, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// historyNewline stands for a line break in a history entry: the history
// file holds one entry a line, and a multi-line prompt stays one entry,
// recalled whole (shown with this mark, sent with its line breaks).
const historyNewline = "␤"

func (t *ttySource) Remember(line string) {
	if strings.TrimSpace(line) != "" {
		_ = t.rl.SaveHistory(strings.ReplaceAll(line, "\n", historyNewline))
	}
}

// Redraw draws the line being read again (a Ctrl-R search or a completion
// menu included); it does nothing when no line is being read.
func (t *ttySource) Redraw() { t.screen.Redraw() }

func (t *ttySource) Close() error {
	_ = t.stdin.Close()
	return t.rl.Close()
}

// slashCompleter completes a first word that starts with "/" from the
// names (built-in chat commands, the daemon's commands and skills).
type slashCompleter struct{ names func() []string }

func (s slashCompleter) Do(line []rune, pos int) ([][]rune, int) {
	word := string(line[:pos])
	if !strings.HasPrefix(word, "/") || strings.ContainsAny(word, " \t") {
		return nil, 0
	}
	var out [][]rune
	for _, n := range s.names() {
		if strings.HasPrefix(n, word) {
			out = append(out, []rune(n[len(word):]+" "))
		}
	}
	return out, len([]rune(word))
}

// chatCommands are the commands the chat loop handles itself.
var chatCommands = []string{"/quit", "/exit", "/help", "/steer", "/busy"}

// slashNames lists the completions: the chat's own commands and the
// daemon's (command.list: built-ins, project commands, skills).
func slashNames(list func() ([]string, error)) func() []string {
	var once sync.Once
	var names []string
	return func() []string {
		once.Do(func() {
			names = append(names, chatCommands...)
			if more, err := list(); err == nil {
				for _, n := range more {
					names = append(names, "/"+strings.TrimPrefix(n, "/"))
				}
			}
			sort.Strings(names)
		})
		return names
	}
}

// The chat's prompts: the first line of a prompt, and the next ones.
const (
	promptFirst = "> "
	promptMore  = "… "
)

// readPrompt reads one chat prompt: a line ending with a backslash goes on
// on the next line (prompt "… "), so a prompt can span lines. A last line
// ended with the steer key steers the whole prompt ("/steer " first). parts
// holds the lines of the prompt read so far: a read cut short (ctx) leaves
// them there, and the next read goes on from them; Ctrl-C drops them.
func readPrompt(ctx context.Context, src lineSource, parts *[]string) (string, error) {
	for {
		prompt := promptFirst
		if len(*parts) > 0 {
			prompt = promptMore
		}
		line, err := src.ReadLine(ctx, prompt)
		if err != nil {
			if ctx.Err() != nil {
				return "", err
			}
			if lines := take(parts); len(lines) > 0 && errors.Is(err, io.EOF) {
				return strings.Join(lines, "\n"), nil
			}
			return "", err
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			*parts = append(*parts, more)
			continue
		}
		if text, steer := steerText(line); steer && len(*parts) > 0 {
			return "/steer " + strings.Join(append(take(parts), text), "\n"), nil
		}
		return strings.Join(append(take(parts), line), "\n"), nil
	}
}

// take returns the lines in parts and empties it.
func take(parts *[]string) []string {
	p := *parts
	*parts = nil
	return p
}

const chatHelp = `Type a prompt and press Enter; end a line with \ to go on on the next line.
Up/Down walk the history (a multi-line prompt is one entry, its line breaks shown as ␤),
Ctrl-R searches it, Tab completes /commands.
Ctrl-C interrupts a running turn (twice quits); at the prompt it clears the line.
While a turn runs you can type: Enter queues the line as the next prompt, Ctrl-S
steers it into the running turn (its model reads it at its next call). After
/busy steer Enter steers too; /busy queue goes back. /steer TEXT always steers.
/quit or Ctrl-D leaves. Other lines starting with / run the daemon's commands and skills.`

func printChatHelp(w io.Writer) { fmt.Fprintln(w, chatHelp) }
