package tool

import (
	"context"

	"github.com/trellis-run/trellis/runtime/approval"
)

// Func is a tool written as its arguments' Go type In and one function of
// them, the shape of the MCP go-sdk's AddTool[In, Out]: the schema the
// model sees is inferred from In (see Args), and run gets the call's
// arguments already decoded into an In. A tool that needs more than this
// (a State, settings of its own) is a type of its own that embeds Args.
type Func[In any] struct {
	Args[In]
	name        string
	tag         approval.Tag
	description string
	run         func(ctx context.Context, call Call, args In) (Result, error)
}

// NewFunc returns the tool name, which the approval policy decides on by
// tag and which the model is told about in description; a call runs run.
func NewFunc[In any](name string, tag approval.Tag, description string, run func(ctx context.Context, call Call, args In) (Result, error)) *Func[In] {
	return &Func[In]{name: name, tag: tag, description: description, run: run}
}

// Name implements Tool.
func (f *Func[In]) Name() string { return f.name }

// Tag implements Tool.
func (f *Func[In]) Tag() approval.Tag { return f.tag }

// Description implements Tool.
func (f *Func[In]) Description() string { return f.description }

// Run implements Tool: it decodes the arguments, which already passed the
// schema, and calls run.
func (f *Func[In]) Run(ctx context.Context, call Call) (Result, error) {
	var args In
	if err := decodeArgs(f.name, call, &args); err != nil {
		return Result{}, err
	}
	return f.run(ctx, call, args)
}
