package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-run/trellis/runtime/approval"
)

// Tool is one callable tool. Implementations must be safe for concurrent use.
type Tool interface {
	// Name is the tool's unique name, as the model calls it ("read_file").
	Name() string
	// Description tells the model what the tool does and when to use it.
	Description() string
	// Tag is the permission tag the approval policy decides on.
	Tag() approval.Tag
	// InputSchema is the JSON Schema (draft 2020-12) of the arguments object.
	InputSchema() json.RawMessage
	// Run executes one call whose arguments already passed InputSchema.
	// A call that fails for the model's or the world's reasons (file not
	// found, command exited 1, HTTP 404, interrupted) is a Result with OK
	// false; a non-nil error means the runtime itself failed.
	Run(ctx context.Context, call Call) (Result, error)
}

// Stater is implemented by tools that can be unavailable, such as web_search
// before a search provider is configured.
type Stater interface {
	State() State
}

// Originer is implemented by tools that do not come with the daemon
// (MCP servers); the others are listed with source "builtin".
type Originer interface {
	// Origin returns the tool's source ("builtin" or "mcp") and server name.
	Origin() (source, server string)
}

// State says whether a tool can be called now.
type State struct {
	Active bool
	// Reason tells a person why the tool is inactive and how to enable it.
	Reason string
	// Code is the protocol error code a call of an inactive tool fails with;
	// empty means errcode.ToolInactive.
	Code string
}

// ProgressFunc receives a tool's streamed output. stream is "stdout" or
// "stderr"; truncated is true on the last chunk streamed for the call when
// the rest of the output is only kept on disk.
type ProgressFunc func(stream, chunk string, truncated bool)

// Call is one invocation of a tool.
type Call struct {
	// ID is the call id (tool.call's callId); it names kept output files.
	ID string
	// SessionID is the calling session ("" outside a session).
	SessionID string
	// TurnID is the calling turn ("" outside a turn).
	TurnID string
	// Origin is the calling session's current origin (its connection),
	// which a host browser may be lent by.
	Origin string
	// Mode is the calling session's mode (plan, accept, auto; "" outside
	// a session): the shell keeps plan mode's commands off the network.
	Mode string
	// Args is the arguments object; nil or JSON null means {}.
	Args json.RawMessage
	// Workdir is the session's working directory, absolute. File tools
	// never read or write outside it.
	Workdir string
	// OutputDir is where a tool keeps the full output it cut for the model
	// (created on demand). Empty means full outputs are not kept.
	OutputDir string
	// Progress receives streamed output; nil discards it.
	Progress ProgressFunc
	// Guard names what no tool may touch (the daemon's home); the
	// Registry sets it from its own when nil.
	Guard *Guard
}

// Result is what a call produced: the payload of tool.result plus the diffs
// to emit as diff events.
type Result struct {
	OK bool
	// Output is the text the model sees, already capped.
	Output string
	// Error says why the call failed when OK is false.
	Error string
	// Diffs lists the files the call changed, one diff event each.
	Diffs []Diff
	// FullOutput is the file holding the complete output when Output was
	// cut, else "".
	FullOutput string
	// Images are pictures for the model (a browser screenshot), sent with
	// Output as image content; Output says what they show.
	Images []Image
}

// Image is one encoded picture of a Result.
type Image struct {
	// MediaType is image/png, image/jpeg, image/gif or image/webp.
	MediaType string
	Data      []byte
}

// Diff is a unified diff of one file a tool changed.
type Diff struct {
	// Path is relative to the workdir, with / separators.
	Path  string
	Patch string
}

// Failed returns a failed Result whose output and error are the formatted message.
func Failed(format string, args ...any) Result {
	msg := fmt.Sprintf(format, args...)
	return Result{OK: false, Output: msg, Error: msg}
}

// Sentinel errors; the errors that reach clients are *errs.Error values that
// wrap them, so both errors.Is(err, ErrUnknownTool) and errs.CodeOf(err) work.
var (
	// ErrUnknownTool: no tool of that name is registered (invalid_params).
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArgs: the arguments do not match the tool's schema (invalid_params).
	ErrInvalidArgs = errors.New("invalid tool arguments")
	// ErrInactive: the tool is registered but unavailable (tool_inactive or the tool's own code).
	ErrInactive = errors.New("tool inactive")
	// ErrDuplicateTool: Register was given a name already taken.
	ErrDuplicateTool = errors.New("duplicate tool name")
	// ErrOutsideWorkdir: a path resolves outside the session's workdir.
	ErrOutsideWorkdir = errors.New("path is outside the session's workdir")
)

// OutsideWorkdirError is the error for a path that resolves outside the
// workdir. errors.Is(err, ErrOutsideWorkdir) holds for it.
type OutsideWorkdirError struct {
	Path    string // as the caller gave it
	Workdir string
}

func (e *OutsideWorkdirError) Error() string {
	return fmt.Sprintf("path %s is outside the session's workdir %s", e.Path, e.Workdir)
}

// Is makes errors.Is(err, ErrOutsideWorkdir) true.
func (e *OutsideWorkdirError) Is(target error) bool { return target == ErrOutsideWorkdir }
