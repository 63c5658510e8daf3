package approval

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/telemetry"
)

// BudgetTool is the Tool of the request that asks a person to raise the
// budget a paused turn waits on (session.setBudget's turn.paused): its
// Args are BudgetArgs, an allow raises the budget to RaiseTo, a deny ends
// the turn. It is never allowlisted (its tag is config).
const BudgetTool = "budget"

// BudgetArgs are the Args of a BudgetTool request: the budget the turn
// reached and what was spent (as turn.paused shows them), and the limits an
// allow raises it to.
type BudgetArgs struct {
	Reason  string          `json:"reason"` // "budget_reached"
	Budget  json.RawMessage `json:"budget"`
	Spent   json.RawMessage `json:"spent"`
	RaiseTo BudgetLimits    `json:"raiseTo"`
}

// BudgetLimits are the limits an allow sets; nil is unchanged (absent).
type BudgetLimits struct {
	MaxCostMicroUSD *int64 `json:"maxCostMicroUsd,omitempty"`
	MaxTokens       *int64 `json:"maxTokens,omitempty"`
}

// AskBudget puts a paused turn's budget to a person through the
// unattended queue (whatever the session's origin: raising a budget needs
// the answering caller's role, which approval.respond checks) and waits,
// as Ask does, for an answer, the timeout or ctx ending. It returns the
// resolution: Decision allow (raise to args.RaiseTo) or deny, By naming who
// or what ended it (ByTimeout, ByInterrupt when ctx ended, ByShutdown).
func (b *Broker) AskBudget(ctx context.Context, q Question, args BudgetArgs) (Resolution, error) {
	ctx, span := telemetry.Start(ctx, "approval.budget", trace.WithAttributes(
		attribute.String("trellis.session.id", q.SessionID)))
	defer span.End()
	raw, err := json.Marshal(args)
	if err != nil {
		return Resolution{}, fmt.Errorf("budget request: %w", err)
	}
	q.Tool, q.Tag, q.Args, q.Queued = BudgetTool, TagConfig, raw, true
	if ctx.Err() != nil {
		return Resolution{By: ByInterrupt}, errs.New(errcode.ApprovalDenied, "the turn ended before its budget was asked about")
	}
	req, timeout := b.newRequest(q, "ap")
	req.Risk = RiskMedium
	req.Note = budgetNote(q, args)
	o, _, settle := b.put(ctx, q, req, timeout, span)
	if settle {
		_ = b.settle(ctx, req, o)
	}
	if o.res.RequestID == "" {
		return Resolution{By: ByShutdown}, o.err
	}
	return o.res, nil
}

// budgetNote says what answering a budget request does.
func budgetNote(q Question, args BudgetArgs) string {
	var raise []string
	if l := args.RaiseTo.MaxCostMicroUSD; l != nil {
		raise = append(raise, fmt.Sprintf("maxCostMicroUsd %d", *l))
	}
	if l := args.RaiseTo.MaxTokens; l != nil {
		raise = append(raise, fmt.Sprintf("maxTokens %d", *l))
	}
	to := "the limits in raiseTo"
	if len(raise) > 0 {
		to = raise[0]
		if len(raise) > 1 {
			to += " and " + raise[1]
		}
	}
	s := fmt.Sprintf("session %s paused at its budget: allow raises it to %s and resumes the turn, deny ends the turn; "+
		"answer with approval.respond (a session's budget needs the member role, a principal's admin), or set another budget with session.setBudget", q.SessionID, to)
	if q.JobID != "" {
		s += "; scheduled job " + q.JobID + " waits on it"
	}
	return s
}
