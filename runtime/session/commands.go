package session

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Command is a slash command (command.list).
type Command struct {
	Name       string
	Summary    string
	ArgsSchema json.RawMessage
	Source     string // builtin | project | skill
	body       string // project and skill commands: the prompt template
}

var builtins = []Command{
	{Name: "help", Summary: "List the commands of this session", ArgsSchema: json.RawMessage(`{"type":"string","maxLength":0}`), Source: "builtin"},
	{Name: "compact", Summary: "Summarise older history to free context (optional instructions)", ArgsSchema: json.RawMessage(`{"type":"string"}`), Source: "builtin"},
	{Name: "mode", Summary: "Show or set the session's mode: plan, accept or auto", ArgsSchema: json.RawMessage(`{"type":"string","enum":["","plan","accept","auto"]}`), Source: "builtin"},
	{Name: "model", Summary: "Show or set the session's model", ArgsSchema: json.RawMessage(`{"type":"string"}`), Source: "builtin"},
	{Name: "delegate", Summary: "Hand a task to a sub-agent and wait for its summary", ArgsSchema: json.RawMessage(`{"type":"string","minLength":1}`), Source: "builtin"},
	{Name: "clear", Summary: "Forget the conversation so far (events stay in the log)", ArgsSchema: json.RawMessage(`{"type":"string","maxLength":0}`), Source: "builtin"},
}

// Commands lists the built-in commands, for a session its project's
// commands (<workdir>/.trellis/commands/*.md), then the installed skills'
// commands. A name is taken by the first of these that has it.
func (s *Service) Commands(ctx context.Context, id string) ([]Command, error) {
	out := append([]Command(nil), builtins...)
	if id != "" {
		row, err := s.row(ctx, id)
		if err != nil {
			return nil, err
		}
		project, err := projectCommands(row.Workdir)
		if err != nil {
			return nil, err
		}
		out = append(out, project...)
	}
	return append(out, s.skillCommands(out)...), nil
}

// skillCommands lists the skills' commands whose names taken leaves free;
// they run like project commands, the skill's instructions as the body.
func (s *Service) skillCommands(taken []Command) []Command {
	if s.deps.Skills == nil {
		return nil
	}
	names := map[string]bool{}
	for _, c := range taken {
		names[c.Name] = true
	}
	var out []Command
	for _, sc := range s.deps.Skills.SkillCommands() {
		if names[sc.Name] || sc.Name == "" {
			continue
		}
		names[sc.Name] = true
		out = append(out, Command{Name: sc.Name, Summary: sc.Summary, ArgsSchema: json.RawMessage(`{"type":"string"}`), Source: "skill", body: sc.Prompt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func projectCommands(workdir string) ([]Command, error) {
	dir := filepath.Join(workdir, ".trellis", "commands")
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.New(errcode.InvalidParams, "read project commands in %s: %v", dir, err)
	}
	taken := map[string]bool{}
	for _, b := range builtins {
		taken[b.Name] = true
	}
	var out []Command
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || e.IsDir() || taken[name] || name == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		summary, body := parseCommandFile(b)
		out = append(out, Command{Name: name, Summary: summary, ArgsSchema: json.RawMessage(`{"type":"string"}`), Source: "project", body: body})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseCommandFile reads optional front matter (description: …) and the body;
// without a description the summary is the body's first non-empty line.
func parseCommandFile(b []byte) (summary, body string) {
	text := string(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")))
	if rest, ok := strings.CutPrefix(text, "---\n"); ok {
		if fm, after, ok := strings.Cut(rest, "\n---"); ok {
			for _, line := range strings.Split(fm, "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "description" {
					summary = strings.Trim(strings.TrimSpace(v), `"'`)
				}
			}
			text = strings.TrimPrefix(after, "\n")
		}
	}
	body = strings.TrimSpace(text)
	if summary == "" {
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			if l := strings.TrimSpace(strings.TrimLeft(sc.Text(), "# ")); l != "" {
				summary = l
				break
			}
		}
	}
	return summary, body
}

// RunCommand runs a command as a turn (queued like a prompt).
func (s *Service) RunCommand(ctx context.Context, id, name, args, origin string) (string, error) {
	name = strings.TrimPrefix(strings.TrimSpace(name), "/")
	if name == "" {
		return "", errs.New(errcode.InvalidParams, "name is required: the command to run, e.g. help")
	}
	cmds, err := s.Commands(ctx, id)
	if err != nil {
		return "", err
	}
	for _, c := range cmds {
		if c.Name != name {
			continue
		}
		text := "/" + name
		if args != "" {
			text += " " + args
		}
		cmd := c
		return s.enqueue(ctx, id, &pending{turnID: newTurnID(ctx), text: text, command: &cmd, args: args}, origin)
	}
	return "", errs.New(errcode.NotFound, "no command /%s in this session (command.list shows them)", name)
}

// runBuiltin runs a built-in command inside its turn and closes the turn.
func (s *Service) runBuiltin(ctx context.Context, l *live, em emitter, p *pending) {
	bg := context.WithoutCancel(ctx)
	id := em.id
	say := func(text string) {
		_ = em.Emit(bg, eventkind.MessageDelta, events.MessageDeltaEvent{Text: text})
		_ = em.Emit(bg, eventkind.MessageDone, events.MessageDoneEvent{Text: text, Role: "assistant"})
	}
	fail := func(err error) {
		_ = em.Emit(bg, eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: err.Error()})
		s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonError)
	}
	switch p.command.Name {
	case "help":
		cmds, err := s.Commands(bg, id)
		if err != nil {
			fail(err)
			return
		}
		var b strings.Builder
		b.WriteString("Commands:\n")
		for _, c := range cmds {
			fmt.Fprintf(&b, "  /%-10s %s (%s)\n", c.Name, c.Summary, c.Source)
		}
		say(b.String())
	case "compact":
		res, err := s.compact(ctx, id, p.args)
		if err != nil {
			fail(err)
			return
		}
		say(fmt.Sprintf("Compacted the history: about %d tokens before, %d after (summary of %d characters).", res.Before, res.After, res.SummaryChars))
	case "mode":
		if p.args == "" {
			l.mu.Lock()
			mode := l.row.Mode
			l.mu.Unlock()
			say("Mode: " + mode)
			break
		}
		if _, err := s.SetMode(bg, id, p.args); err != nil {
			fail(err)
			return
		}
		say("Mode is now " + p.args + ".")
	case "model":
		if p.args == "" {
			l.mu.Lock()
			model, prov := l.row.Model, l.row.Provider
			l.mu.Unlock()
			say(fmt.Sprintf("Model: %s (provider %s)", model, prov))
			break
		}
		pin, err := s.SetModelPin(bg, id, p.args)
		if err != nil {
			fail(err)
			return
		}
		say(fmt.Sprintf("Model is now %s (provider %s).", pin.Model, pin.Provider))
	case "clear":
		if err := s.deps.Store.ReplaceHistory(bg, s.writer(id), id, nil); err != nil {
			fail(fmt.Errorf("clear history: %w", s.refused(bg, id, err)))
			return
		}
		say("Cleared the conversation; the next prompt starts afresh.")
	case "delegate":
		if s.deps.Subagents == nil {
			fail(errs.New(errcode.ToolInactive, "/delegate needs sub-agents, which this daemon does not run yet"))
			return
		}
		summary, ok, err := s.deps.Subagents.DelegateTask(ctx, id, "", p.args)
		if err != nil && ctx.Err() != nil {
			s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonInterrupted)
			return
		}
		if err != nil {
			fail(err)
			return
		}
		if !ok {
			// A failed sub-agent is an answer, as a failed tool is data.
			summary = "The sub-agent did not finish: " + summary
		}
		say(summary)
	}
	s.closeTurn(bg, em, p.turnID, events.TurnDoneReasonComplete)
}
