package tool

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Questioner puts the agent's questions to a person (runtime/approval's
// Broker): the session's own client when it is connected, else whoever
// answers the unattended queue.
type Questioner interface {
	AskUser(ctx context.Context, q approval.Question, questions []approval.UserQuestion) ([][]string, error)
}

type askUserOption struct {
	Label       string `json:"label" jsonschema:"minLength=1" jsonschema_description:"The answer as it is given back, a few words."`
	Description string `json:"description,omitempty" jsonschema_description:"What choosing it means."`
}

type askUserQuestion struct {
	Question string          `json:"question" jsonschema:"minLength=1" jsonschema_description:"The question, a full sentence."`
	Header   string          `json:"header,omitempty" jsonschema:"maxLength=12" jsonschema_description:"A short label for it, at most 12 characters."`
	Options  []askUserOption `json:"options,omitempty" jsonschema:"maxItems=8" jsonschema_description:"The answers to offer; the person may also answer in their own words."`
	Multiple bool            `json:"multiple,omitempty" jsonschema_description:"Several options may be chosen."`
}

// askUserArgs are the arguments of ask_user.
type askUserArgs struct {
	Questions []askUserQuestion `json:"questions" jsonschema:"minItems=1,maxItems=4" jsonschema_description:"One to four questions, asked together."`
}

// NewAskUser returns the `ask_user` tool, asking through q: the agent asks
// the person structured questions (each with options to choose from) and
// waits for the answers. Its tag is read: asking reads nothing and changes
// nothing, so no mode asks before it.
func NewAskUser(q Questioner) Tool {
	return NewFunc("ask_user", approval.TagRead,
		"Ask the person you work for one to four questions when you need their decision or a fact "+
			"only they know, and wait for the answers. Give each question a few options to choose from "+
			"(they may also answer in their own words); set multiple when several may be chosen. Ask only "+
			"what you cannot find out yourself: nobody may be there to answer, and then you go on without.",
		askUser{q}.run)
}

// askUser runs ask_user.
type askUser struct{ q Questioner }

func (t askUser) run(ctx context.Context, call Call, args askUserArgs) (Result, error) {
	if call.SessionID == "" {
		return Failed("ask_user runs only inside a session"), nil
	}
	qs := make([]approval.UserQuestion, len(args.Questions))
	for i, q := range args.Questions {
		qs[i] = approval.UserQuestion{Question: q.Question, Header: q.Header, Multiple: q.Multiple}
		for _, o := range q.Options {
			qs[i].Options = append(qs[i].Options, approval.AnswerOption{Label: o.Label, Description: o.Description})
		}
	}
	answers, err := t.q.AskUser(ctx, approval.Question{
		SessionID: call.SessionID, Workdir: call.Workdir, Mode: call.Mode, CallID: call.ID,
		Tool: "ask_user", Args: call.Args, Tag: approval.TagRead,
	}, qs)
	switch {
	case err != nil && errs.CodeOf(err) == errcode.Internal:
		return Result{}, err
	case err != nil:
		return Failed("%v; go on with what you know, or ask again later", err), nil
	}
	var b strings.Builder
	for i, q := range qs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Q: %s\nA: %s\n", q.Question, strings.Join(answers[i], ", "))
	}
	return Result{OK: true, Output: b.String()}, nil
}
