package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/events"
)

// acpTranslator turns one session's events into ACP session updates. It
// remembers the tool calls it announced, so that later events update them
// instead of announcing them again.
type acpTranslator struct {
	workdir string
	calls   map[string]*acpToolCall // by call id
	last    string                  // the call whose tool.result came last: a diff event belongs to it
}

// acpToolCall is what the editor was told of one tool call's content (an
// update's content replaces it whole).
type acpToolCall struct {
	content []acp.ToolCallContent
}

func newACPTranslator(workdir string) *acpTranslator {
	return &acpTranslator{workdir: workdir, calls: map[string]*acpToolCall{}}
}

// acpMaxToolOutput bounds the tool output one update carries; the session
// log keeps it whole (trellis sessions show --full).
const acpMaxToolOutput = 64 << 10

// updates returns the session updates of one event (none for the kinds an
// editor has no place for: usage, steps, queue).
func (t *acpTranslator) updates(ev client.Event) []acp.SessionUpdate {
	switch ev.Kind {
	case eventkind.MessageUser:
		if text := ev.Text(); text != "" {
			return []acp.SessionUpdate{acp.UpdateUserMessageText(text)}
		}
	case eventkind.MessageDelta:
		if text := ev.Text(); text != "" {
			return []acp.SessionUpdate{acp.UpdateAgentMessageText(text)}
		}
	case eventkind.MessageReasoning:
		if text := ev.Text(); text != "" {
			return []acp.SessionUpdate{acp.UpdateAgentThoughtText(text)}
		}
	case eventkind.ToolCall:
		var c events.ToolCallEvent
		if ev.Decode(&c) != nil {
			return nil
		}
		if _, ok := t.calls[c.CallID]; ok { // announced by its approval request
			return []acp.SessionUpdate{acp.UpdateToolCall(acp.ToolCallId(c.CallID), acp.WithUpdateStatus(acp.ToolCallStatusInProgress))}
		}
		t.calls[c.CallID] = &acpToolCall{}
		return []acp.SessionUpdate{acp.StartToolCall(acp.ToolCallId(c.CallID), toolTitle(c.Name, c.Args),
			acp.WithStartKind(toolKind(c.Name)), acp.WithStartStatus(acp.ToolCallStatusInProgress),
			acp.WithStartRawInput(rawJSON(c.Args)), acp.WithStartLocations(t.locations(c.Args)))}
	case eventkind.ToolResult:
		var r events.ToolResultEvent
		if ev.Decode(&r) != nil {
			return nil
		}
		return []acp.SessionUpdate{t.result(r)}
	case eventkind.Diff:
		var d events.DiffEvent
		call, ok := t.calls[t.last]
		if ev.Decode(&d) != nil || !ok {
			return nil
		}
		diff, ok := diffContent(t.abs(d.Path), d.Patch)
		if !ok {
			return nil
		}
		call.content = append(call.content, diff)
		return []acp.SessionUpdate{acp.UpdateToolCall(acp.ToolCallId(t.last), acp.WithUpdateContent(call.content))}
	case eventkind.ModeChanged:
		var m events.ModeChangedEvent
		if ev.Decode(&m) != nil {
			return nil
		}
		return []acp.SessionUpdate{{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: acp.SessionModeId(m.Mode)}}}
	case eventkind.Error:
		var e events.ErrorEvent
		if ev.Decode(&e) != nil || denialCodes[e.Code] {
			return nil // a denied call is shown failed, with its result
		}
		// ACP has no error update: the person reads why a turn failed
		// in the conversation.
		return []acp.SessionUpdate{acp.UpdateAgentMessageText("\n\nTrellis: " + e.Message + " (" + e.Code + ")\n")}
	}
	return nil
}

// result is the update of a tool.result: the call completed or failed,
// with its output. A call denied before it ran was never announced when
// replayed: it is announced here.
func (t *acpTranslator) result(r events.ToolResultEvent) acp.SessionUpdate {
	id := acp.ToolCallId(r.CallID)
	t.last = r.CallID
	status := acp.ToolCallStatusCompleted
	text := r.Output
	if !r.OK {
		status = acp.ToolCallStatusFailed
		if text == "" && r.Error != nil {
			text = *r.Error
		}
	}
	if len(text) > acpMaxToolOutput {
		cut := acpMaxToolOutput
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "\n… (cut: trellis sessions show has the whole output)"
	}
	var content []acp.ToolCallContent
	if text != "" {
		content = []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(text))}
	}
	call, known := t.calls[r.CallID]
	if !known {
		t.calls[r.CallID] = &acpToolCall{content: content}
		return acp.StartToolCall(id, r.Name, acp.WithStartKind(toolKind(r.Name)), acp.WithStartStatus(status), acp.WithStartContent(content))
	}
	call.content = content
	return acp.UpdateToolCall(id, acp.WithUpdateStatus(status), acp.WithUpdateContent(content))
}

// pending announces the tool call an approval request is about (once), and
// returns the call as the permission request names it.
func (t *acpTranslator) pending(req client.ApprovalRequest) ([]acp.SessionUpdate, acp.ToolCallUpdate) {
	id := acp.ToolCallId(req.CallID)
	title, kind, locations := toolTitle(req.Tool, req.Args), toolKind(req.Tool), t.locations(req.Args)
	call := acp.ToolCallUpdate{ToolCallId: id, Title: &title, Kind: &kind, Status: acp.Ptr(acp.ToolCallStatusPending),
		RawInput: rawJSON(req.Args), Locations: locations}
	if _, ok := t.calls[req.CallID]; ok {
		return nil, call
	}
	t.calls[req.CallID] = &acpToolCall{}
	return []acp.SessionUpdate{acp.StartToolCall(id, title, acp.WithStartKind(kind), acp.WithStartStatus(acp.ToolCallStatusPending),
		acp.WithStartRawInput(rawJSON(req.Args)), acp.WithStartLocations(locations))}, call
}

// locations are the files a call's arguments name, as absolute paths.
func (t *acpTranslator) locations(args json.RawMessage) []acp.ToolCallLocation {
	var a struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(args, &a) != nil || a.Path == "" {
		return nil
	}
	return []acp.ToolCallLocation{{Path: t.abs(a.Path)}}
}

// abs resolves a path the way the session's tools do: relative to its
// working directory.
func (t *acpTranslator) abs(path string) string {
	if filepath.IsAbs(path) || t.workdir == "" {
		return path
	}
	return filepath.Join(t.workdir, path)
}

// rawJSON is a call's arguments as the update's rawInput (nil when they
// are not JSON, which would fail the whole notification).
func rawJSON(args json.RawMessage) any {
	if len(args) == 0 || !json.Valid(args) {
		return nil
	}
	return args
}

// toolKind is the ACP kind of a built-in tool (other for the rest: MCP
// tools, sub-agents).
func toolKind(name string) acp.ToolKind {
	switch name {
	case "read_file", "list_dir":
		return acp.ToolKindRead
	case "write_file", "edit_file":
		return acp.ToolKindEdit
	case "grep", "glob", "web_search", "memory_search":
		return acp.ToolKindSearch
	case "shell":
		return acp.ToolKindExecute
	case "web_fetch":
		return acp.ToolKindFetch
	}
	return acp.ToolKindOther
}

// toolTitle is a call as the editor lists it: the tool and what it acts
// on (its path, command, URL or pattern).
func toolTitle(name string, args json.RawMessage) string {
	var a map[string]any
	_ = json.Unmarshal(args, &a)
	for _, key := range []string{"path", "command", "url", "pattern", "query"} {
		if s, ok := a[key].(string); ok && s != "" {
			s = oneLine(s)
			if utf8.RuneCountInString(s) > 100 {
				s = string([]rune(s)[:100]) + "…"
			}
			return name + " " + s
		}
	}
	return name
}

// diffContent is a diff event as ACP diff content: the old and new text
// of the patch's hunks (the changed lines with their context; a created
// file has no old text). An empty patch (a file too large to diff) has
// none.
func diffContent(path, patch string) (acp.ToolCallContent, bool) {
	var oldText, newText []byte
	created, inHunk, hunks := false, false, 0
	toOld, toNew := false, false // where the line before went
	for _, line := range strings.SplitAfter(patch, "\n") {
		switch {
		case line == "":
		case !inHunk && strings.HasPrefix(line, "--- "):
			created = strings.TrimSpace(line[len("--- "):]) == "/dev/null"
		case strings.HasPrefix(line, "@@"):
			inHunk = true
			hunks++
		case !inHunk:
		case line[0] == '\\': // "\ No newline at end of file": the line before has none
			if toOld {
				oldText = trimNewline(oldText)
			}
			if toNew {
				newText = trimNewline(newText)
			}
		case line[0] == '-':
			oldText, toOld, toNew = append(oldText, line[1:]...), true, false
		case line[0] == '+':
			newText, toOld, toNew = append(newText, line[1:]...), false, true
		default: // context
			oldText, newText, toOld, toNew = append(oldText, line[1:]...), append(newText, line[1:]...), true, true
		}
	}
	if hunks == 0 {
		return acp.ToolCallContent{}, false
	}
	if created {
		return acp.ToolDiffContent(path, string(newText)), true
	}
	return acp.ToolDiffContent(path, string(newText), string(oldText)), true
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}
