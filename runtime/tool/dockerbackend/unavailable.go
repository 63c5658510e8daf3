package dockerbackend

import (
	"context"
	"encoding/json"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/tool"
)

// Unavailable returns the tools of a docker session whose container cannot
// be had (why): a shell listed inactive with the reason, so that its
// commands never run on the daemon's machine instead.
func Unavailable(why error) *tool.Registry {
	r, _ := tool.NewRegistry(unavailable{why: why.Error()})
	return r
}

type unavailable struct{ why string }

func (unavailable) Name() string                 { return "shell" }
func (unavailable) Tag() approval.Tag            { return approval.TagExec }
func (unavailable) Description() string          { return "shell (the docker backend cannot run it now)" }
func (unavailable) InputSchema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (u unavailable) State() tool.State {
	return tool.State{Active: false, Reason: "the session's docker backend cannot run commands: " + u.why}
}
func (u unavailable) Run(context.Context, tool.Call) (tool.Result, error) {
	return tool.Failed("the session's docker backend cannot run commands: %s", u.why), nil
}
