package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Receipt states.
const (
	// ReceiptStarted: the call began acting; its outcome is not stored yet.
	ReceiptStarted = "started"
	// ReceiptDone: the call answered; Outcome (and ErrorCode) hold its answer.
	ReceiptDone = "done"
)

// Receipt is the record of one call made with an operation id
// (docs/protocol.md, "Operation ids"), keyed by (PrincipalID, OperationID).
type Receipt struct {
	PrincipalID string
	OperationID string
	Method      string // the full gRPC method
	ParamsHash  []byte // a hash of the request
	SessionID   string // the session the request names ("" if none)
	// TurnID is the id the call gives the turn it starts, if it starts
	// one (session.prompt, session.steer, command.run), chosen before it
	// acts: a repeat that finds the outcome unknown names it, and the
	// session's events tell whether the turn began.
	TurnID string
	// Runner is the daemon process that acts on the call (its run id, new
	// at every start): a started receipt whose runner stopped has an
	// unknown outcome.
	Runner string
	State  string // ReceiptStarted or ReceiptDone
	// ErrorCode is "" when the call answered a result (Outcome is the
	// result's bytes), else the protocol error code (Outcome is the
	// error's bytes).
	ErrorCode string
	Outcome   []byte
	StartedAt time.Time
	// TouchedAt is when the runner last said it still acts (StartedAt at
	// first; FinishReceipt sets it too).
	TouchedAt time.Time
	ExpiresAt time.Time // StartedAt plus the dedupe window
	// Idle is how long ago TouchedAt was and Expired whether ExpiresAt
	// has passed, by the store's clock (the database server's on
	// PostgreSQL, so that daemons' clocks need not agree); filled by reads.
	Idle    time.Duration
	Expired bool
}

// ReceiptStore keeps the receipts of calls made with an operation id.
// Expiry is judged by the store's clock.
type ReceiptStore interface {
	// BeginReceipt stores r as started, with StartedAt and TouchedAt now
	// and ExpiresAt now plus window (r's times, State, ErrorCode and
	// Outcome are ignored), and returns it with true. When a receipt with
	// r's key exists and has not expired it is left alone and returned
	// with false; an expired one is replaced.
	BeginReceipt(ctx context.Context, r Receipt, window time.Duration) (Receipt, bool, error)
	// TouchReceipt sets TouchedAt to now on the started receipt of runner;
	// ErrNotFound when there is none (finished, expired and replaced, or
	// another runner's).
	TouchReceipt(ctx context.Context, principalID, operationID, runner string) error
	// FinishReceipt stores the outcome of runner's started receipt and
	// marks it done; ErrNotFound when there is no started receipt of
	// runner with the key.
	FinishReceipt(ctx context.Context, principalID, operationID, runner, errorCode string, outcome []byte) error
	// ReleaseReceipt deletes runner's started receipt (its call did
	// nothing and said to retry: a repeat acts); ErrNotFound when there is
	// no started receipt of runner with the key.
	ReleaseReceipt(ctx context.Context, principalID, operationID, runner string) error
	// GetReceipt returns the receipt with the key, expired or not (see
	// Expired), or ErrNotFound.
	GetReceipt(ctx context.Context, principalID, operationID string) (Receipt, error)
	// DeleteExpiredReceipts deletes the receipts whose ExpiresAt has
	// passed and returns how many.
	DeleteExpiredReceipts(ctx context.Context) (int64, error)
}

// MaxOperationIDLen is the longest operation id a call may carry.
const MaxOperationIDLen = 128

// CheckReceipt reports what makes r unfit for BeginReceipt (a wrapped
// ErrInvalid), or nil.
func CheckReceipt(r Receipt, window time.Duration) error {
	switch {
	case r.PrincipalID == "" || r.OperationID == "" || r.Method == "" || r.Runner == "":
		return fmt.Errorf("receipt %q of %q: needs a principal, an operation id, a method and a runner: %w", r.OperationID, r.PrincipalID, ErrInvalid)
	case window <= 0:
		return fmt.Errorf("receipt %q: the window must be positive, not %s: %w", r.OperationID, window, ErrInvalid)
	}
	return CheckOperationID(r.OperationID)
}

// CheckOperationID reports what makes id unfit as an operation id (a
// wrapped ErrInvalid): it must be 1 to MaxOperationIDLen printable ASCII
// characters.
func CheckOperationID(id string) error {
	if id == "" || len(id) > MaxOperationIDLen {
		return fmt.Errorf("an operation id has 1 to %d characters, this one %d: %w", MaxOperationIDLen, len(id), ErrInvalid)
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }); i >= 0 {
		return fmt.Errorf("an operation id is printable ASCII without spaces; this one has %q at byte %d: %w", id[i:i+1], i, ErrInvalid)
	}
	return nil
}
