// Package approval owns the approval policy (which mode allows which permission
// tag, and the allowlist patterns that pre-approve calls) and the broker that
// routes the calls the policy sends to a person: to the approver attached for
// the session's origin (an ApproverGroup lets the many origins of one
// multiplexed Attach stream share one mailbox), else the unattended queue.
package approval
