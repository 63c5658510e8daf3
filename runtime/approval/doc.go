// Package approval owns the approval policy (which mode allows which permission
// tag, and the allowlist patterns that pre-approve calls) and the broker that
// routes the calls the policy sends to a person: to the approver attached for
// the session's origin (an ApproverGroup lets the many origins of one
// multiplexed Attach stream share one queue), else the unattended queue.
//
// An answer takes effect once the store recorded it (a failed write makes an
// allow a deny). Answers and timeouts are recorded with the broker's lock
// released, and an interrupted turn's request is denied at once with its
// records written after, so a daemon cut off from its database stops its
// turns without waiting for it (an approver's detach and shutdown still
// record under the lock). Allowlist entries record the principal who added them.
// List is what a caller may answer (the unattended queue and its own
// origin's requests); ListAll adds the requests put to other origins, for an
// operator's view (approval.list includeInteractive).
//
// The agent's questions (the ask_user tool, AskUser) are requests of the
// same broker: routed, shared across a cluster, timed out and ended as
// approval requests are, answered with the labels or words of an answer
// per question instead of a decision (RespondQuestion), and never
// allowlisted. Each kind's answer method refuses the other kind's ids.
//
// A turn paused at its budget asks for a raise the same way (AskBudget):
// an approval request of tool BudgetTool, always in the unattended queue,
// never allowlisted; the session service carries out the answer (allow
// raises the budget, deny ends the turn), and approval.respond checks that
// the caller may set that budget.
package approval
