package approval

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/telemetry"
)

// The agent's questions (the ask_user tool) travel as the broker's
// requests do: to the approver of the session's current origin, or else to
// the unattended queue, across a cluster through the shared queue, with the
// same timeout, interrupt and disconnect endings. What differs is the
// answer: the labels or words of an answer per question instead of a
// decision, and nothing is allowlisted.

// ErrDeclined: nobody answered a question (declined, timed out,
// interrupted, its approver went away).
var ErrDeclined = errors.New("question not answered")

// MaxQuestions bounds the questions of one ask_user call.
const MaxQuestions = 4

// AskUser puts questions to a person for the session of q (its SessionID,
// Origin, Kind, JobID, TurnID and CallID; Tool names the asking tool) and
// waits. It returns an answer per question, in order (each the labels of
// the options chosen, or the person's own words), or an error that says
// why there is none: declined (with the person's reason), nobody answered
// in time, the turn was interrupted, the approver went away.
func (b *Broker) AskUser(ctx context.Context, q Question, questions []UserQuestion) (answers [][]string, err error) {
	ctx, span := telemetry.Start(ctx, "approval.question", trace.WithAttributes(
		attribute.String("trellis.session.id", q.SessionID)))
	defer span.End()
	if err := checkQuestions(questions); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, errs.Wrap(errcode.ApprovalDenied, ErrDeclined, "the turn was interrupted before the question was asked")
	}
	req, timeout := b.newRequest(q, "q")
	req.Risk, req.Questions = RiskLow, questions
	req.Note = "the agent asks; anyone who may approve answers with question.respond"
	o, _, settle := b.put(ctx, q, req, timeout, span)
	if settle {
		_ = b.settle(ctx, req, o)
	}
	if o.err == nil && o.res.Decision == DecisionAllow {
		return o.res.Answers, nil
	}
	if o.res.RequestID == "" {
		return nil, errs.Wrap(errcode.ApprovalDenied, ErrDeclined, "the question was not asked: the daemon is shutting down")
	}
	return nil, declinedError(o.res)
}

// declinedError tells the agent why a question has no answer.
func declinedError(res Resolution) error {
	switch res.By {
	case ByTimeout:
		return errs.Wrap(errcode.ApprovalTimeout, ErrDeclined, "nobody answered the question: %s", res.Reason)
	case ByInterrupt, ByDisconnect, ByShutdown:
		return errs.Wrap(errcode.ApprovalDenied, ErrDeclined, "the question was not answered: %s", res.Reason)
	}
	who := res.By
	if res.PrincipalName != "" {
		who = res.PrincipalName
	}
	msg := "the question was declined by " + who
	if res.Reason != "" {
		msg += ": " + res.Reason
	}
	return errs.Wrap(errcode.ApprovalDenied, ErrDeclined, "%s", msg)
}

// RespondQuestion answers the pending question requestID on behalf of by
// (the caller's origin id), as ctx's principal: answers, one per question
// in order, or declined with reason. The rules of Respond apply (unknown
// or finished: not_found; another origin's: unauthorized; the first answer
// wins); an approval request's id, or answers that do not fit the
// questions, are invalid_params.
func (b *Broker) RespondQuestion(ctx context.Context, by, requestID string, answers [][]string, declined bool, reason string) error {
	r := Reply{Decision: DecisionAllow, Scope: ScopeOnce, Reason: reason, Answers: answers}
	if declined {
		r.Decision, r.Answers = DecisionDeny, nil
	}
	if p, ok := auth.PrincipalFrom(ctx); ok {
		r.principalID, r.principalName = p.ID, p.Name
	}
	return b.respond(by, requestID, true, func(req Request) (outcome, error) {
		if !declined {
			if err := checkAnswers(req, answers); err != nil {
				return outcome{}, err
			}
		}
		return answered(req, by, r, b.opts.Now()), nil
	})
}

// AnswerQuestion answers a question the approver was sent, as
// RespondQuestion does with the approver's origin as the caller.
func (a *Approver) AnswerQuestion(ctx context.Context, requestID string, answers [][]string, declined bool, reason string) error {
	return a.b.RespondQuestion(ctx, a.origin, requestID, answers, declined, reason)
}

// answeredQuestion is the outcome of a checked answer to a question.
func answeredQuestion(res Resolution, r Reply) outcome {
	if r.Decision == DecisionDeny {
		return outcome{res: res, err: declinedError(res)}
	}
	res.Answers = r.Answers
	return outcome{res: res}
}

// answerable says whether req may be answered by the method for its kind.
func answerable(req Request, question bool) error {
	switch {
	case question && !req.IsQuestion():
		return errs.Wrap(errcode.InvalidParams, ErrBadAnswer, "%s is an approval request, not a question: answer it with approval.respond", req.RequestID)
	case !question && req.IsQuestion():
		return errs.Wrap(errcode.InvalidParams, ErrBadAnswer, "%s is a question, not an approval request: answer it with question.respond", req.RequestID)
	}
	return nil
}

// checkQuestions validates what the agent asks.
func checkQuestions(qs []UserQuestion) error {
	if len(qs) == 0 || len(qs) > MaxQuestions {
		return errs.New(errcode.InvalidParams, "ask between 1 and %d questions (got %d)", MaxQuestions, len(qs))
	}
	for i, q := range qs {
		if strings.TrimSpace(q.Question) == "" {
			return errs.New(errcode.InvalidParams, "question %d is empty", i+1)
		}
		seen := map[string]bool{}
		for _, o := range q.Options {
			if strings.TrimSpace(o.Label) == "" {
				return errs.New(errcode.InvalidParams, "question %d has an option without a label", i+1)
			}
			if seen[o.Label] {
				return errs.New(errcode.InvalidParams, "question %d offers %q twice", i+1, o.Label)
			}
			seen[o.Label] = true
		}
	}
	return nil
}

// checkAnswers validates an answer to req's questions: one per question,
// each with at least one value, and one only unless the question is
// multiple. A value need not be an option's label (the person's own words).
func checkAnswers(req Request, answers [][]string) error {
	if len(answers) != len(req.Questions) {
		return errs.Wrap(errcode.InvalidParams, ErrBadAnswer,
			"question %s asks %d question(s): answers must hold one answer per question, in order (got %d), or set declined",
			req.RequestID, len(req.Questions), len(answers))
	}
	for i, a := range answers {
		var values int
		for _, v := range a {
			if strings.TrimSpace(v) != "" {
				values++
			}
		}
		switch {
		case values == 0:
			return errs.Wrap(errcode.InvalidParams, ErrBadAnswer, "answer %d of question %s is empty: give an option's label or your own words", i+1, req.RequestID)
		case values > 1 && !req.Questions[i].Multiple:
			return errs.Wrap(errcode.InvalidParams, ErrBadAnswer, "question %d of %s takes one answer (got %d)", i+1, req.RequestID, values)
		}
	}
	return nil
}
