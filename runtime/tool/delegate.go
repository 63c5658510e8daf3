package tool

import (
	"context"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Delegator runs sub-agents for delegate_task (runtime/agents' Service).
type Delegator interface {
	// DelegateTask runs a sub-agent of agent name ("" = the default one)
	// on task for parentID and waits for its end: ok reports whether it
	// completed, summary is its answer (or why it failed). err means the
	// sub-agent could not be started, or ctx ended first.
	DelegateTask(ctx context.Context, parentID, name, task string) (summary string, ok bool, err error)
}

// delegateTaskArgs are the arguments of delegate_task.
type delegateTaskArgs struct {
	Task  string `json:"task" jsonschema:"minLength=1" jsonschema_description:"What the sub-agent should do, self-contained."`
	Agent string `json:"agent,omitempty" jsonschema_description:"Agent definition to run (default: the default agent)."`
}

// NewDelegateTask returns the `delegate_task` tool, running sub-agents
// through d: a sub-agent works for the calling session, and the tool
// returns its summary.
func NewDelegateTask(d Delegator) Tool {
	return NewFunc("delegate_task", approval.TagDelegate,
		"Hand a self-contained task to a sub-agent working in the same directory and wait for "+
			"its summary. Give the task all the context it needs: the sub-agent does not see this "+
			"conversation. Optionally name an agent definition (agent.list) to run.",
		delegateTask{d}.run)
}

// delegateTask runs delegate_task.
type delegateTask struct{ d Delegator }

func (t delegateTask) run(ctx context.Context, call Call, args delegateTaskArgs) (Result, error) {
	if call.SessionID == "" {
		return Failed("delegate_task runs only inside a session"), nil
	}
	if strings.TrimSpace(args.Task) == "" {
		return Failed("task is empty: say what the sub-agent should do"), nil
	}
	summary, ok, err := t.d.DelegateTask(ctx, call.SessionID, args.Agent, args.Task)
	switch {
	case err != nil && ctx.Err() != nil:
		return Failed("interrupted: the sub-agent was stopped with the turn"), nil
	case err != nil && errs.CodeOf(err) == errcode.Internal:
		return Result{}, err
	case err != nil:
		return Failed("the sub-agent could not start: %v", err), nil
	case !ok:
		return Failed("the sub-agent did not finish: %s", summary), nil
	}
	return Result{OK: true, Output: summary}, nil
}
