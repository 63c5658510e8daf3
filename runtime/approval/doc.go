// Package approval owns the approval policy (which mode allows which permission
// tag, and the allowlist patterns that pre-approve calls) and the broker that
// routes the calls the policy sends to a person.
package approval
