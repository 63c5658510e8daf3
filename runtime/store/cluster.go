package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Errors of the cluster tables.
var (
	// ErrLeaseHeld means another daemon holds a live lease on the session.
	ErrLeaseHeld = errors.New("the session is owned by another daemon")
	// ErrLeaseLost means a fenced write came from a daemon whose lease on
	// the session has been taken over (a higher epoch) or released; nothing
	// of the write was kept.
	ErrLeaseLost = errors.New("this daemon no longer holds the session's lease")
)

// Lease is a session's ownership row: only OwnerID runs the session's turns
// and appends its events while ExpiresAt is in the future. Epoch rises at
// every acquisition, so a write fenced with an older epoch is refused.
type Lease struct {
	SessionID string
	OwnerID   string
	Epoch     int64
	ExpiresAt time.Time
	// OwnerAddr is the owner's gRPC address from the daemon registry ("" if
	// the owner is not registered); filled by AcquireLease and GetLease.
	OwnerAddr string
	// OwnerVersion is the owner's trellisd version from the registry (""
	// if unregistered or registered by a build that did not record it).
	OwnerVersion string
}

// Daemon is one row of the daemon registry.
type Daemon struct {
	ID       string
	GRPCAddr string
	// Version is the trellisd version the daemon runs ("" for a build that
	// did not record it): a cluster mid-upgrade mixes versions, and a call
	// one daemon forwards to an older one names both when it is refused.
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time
}

// LeaseHeldError is the error AcquireLease returns when another daemon holds
// the lease; it wraps ErrLeaseHeld and carries the lease.
type LeaseHeldError struct{ Lease Lease }

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("session %s is owned by daemon %s (%s) until %s", e.Lease.SessionID, e.Lease.OwnerID,
		e.Lease.OwnerAddr, e.Lease.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// ClusterStore keeps the tables several daemons sharing a store coordinate
// through: the daemon registry and the session leases. Expiry is judged by
// the store's clock (the database server's on PostgreSQL), so daemons'
// clocks need not agree.
type ClusterStore interface {
	// RegisterDaemon inserts or refreshes d with heartbeat "now" (its
	// HeartbeatAt and StartedAt are ignored on refresh).
	RegisterDaemon(ctx context.Context, d Daemon) error
	// RemoveDaemon deletes the registry row; an unknown id is not an error.
	RemoveDaemon(ctx context.Context, id string) error
	// ListDaemons returns the registry, by id.
	ListDaemons(ctx context.Context) ([]Daemon, error)

	// AcquireLease takes the session's lease for owner for ttl when nobody
	// holds it, when it has expired or when owner already holds it (a
	// restarted daemon); the epoch rises by one each time. A live lease of
	// another daemon is a *LeaseHeldError.
	AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (Lease, error)
	// RenewLeases extends for ttl each of the given leases that still has
	// the same owner and epoch (expired or not: nobody took it) and returns
	// the session ids it extended; the others are lost.
	RenewLeases(ctx context.Context, owner string, leases []Lease, ttl time.Duration) ([]string, error)
	// ReleaseLease ends the lease if it still has its owner and epoch; the
	// row stays (expired), keeping the epoch rising.
	ReleaseLease(ctx context.Context, l Lease) error
	// GetLease returns the session's lease row (expired or not) or ErrNotFound.
	GetLease(ctx context.Context, sessionID string) (Lease, error)
}

// Fence is one lease a write is made under: the lease of Key (a session
// id, or a resource key such as a job's claim or a gateway binding's)
// that OwnerID acquired at Epoch. A fence with no owner matches no lease
// row: a write under it is refused.
type Fence struct {
	Key     string
	OwnerID string
	Epoch   int64
}

// Fence returns the fence of the lease l.
func (l Lease) Fence() Fence {
	return Fence{Key: l.SessionID, OwnerID: l.OwnerID, Epoch: l.Epoch}
}

// Check compares the lease a store read for the fence's key (found false:
// the key has no lease row) with the fence: ErrLeaseLost unless the
// fence's owner still holds the lease at the fence's epoch.
func (f Fence) Check(found bool, owner string, epoch int64) error {
	if !found {
		return fmt.Errorf("%s has no lease: %w", f.Key, ErrLeaseLost)
	}
	if owner != f.OwnerID || epoch != f.Epoch {
		return fmt.Errorf("%s: lease epoch %d of daemon %s, now epoch %d of daemon %s: %w", f.Key, f.Epoch, f.OwnerID, epoch, owner, ErrLeaseLost)
	}
	return nil
}

// Writer is what every write of leased rows is made under, a parameter of
// each such write of a Store: AppendEvents, UpdateSession, AppendHistory,
// ReplaceHistory and DeleteSessions write a session's rows only under a
// fence on that session, checked against its lease row in the write's own
// transaction; PutSetting, DeleteSetting and UpdateSetting (settings are
// not keyed by lease) check every fence of the writer. A refused write
// changes nothing and returns an error wrapping ErrLeaseLost.
//
// A writer is either Under some fences or Unfenced, never by omission: the
// zero Writer holds no lease and every write under it is refused, and so
// is a write of a session the writer has no fence on.
type Writer struct {
	fences   []Fence // by key, one per key
	unfenced bool
}

// Unfenced is the writer of writes no lease guards: those of a daemon
// alone on its store (no cluster, no leases), and those of rows any daemon
// of a cluster may write (shared settings such as a provider's). The
// store checks nothing.
func Unfenced() Writer { return Writer{unfenced: true} }

// Under returns the writer of the given leases (a later fence on the same
// key replaces an earlier one).
func Under(fences ...Fence) Writer { return Writer{}.With(fences...) }

// With returns w with fences added (a fence on a key w has replaces it):
// an Unfenced writer becomes the writer of fences alone.
func (w Writer) With(fences ...Fence) Writer {
	all := append(slices.Clone(w.fences), fences...)
	slices.SortStableFunc(all, func(a, b Fence) int { return strings.Compare(a.Key, b.Key) })
	out := Writer{fences: all[:0]}
	for i, f := range all {
		if i+1 < len(all) && all[i+1].Key == f.Key {
			continue // a later fence on the key replaces it
		}
		out.fences = append(out.fences, f)
	}
	return out
}

// IsUnfenced reports whether w is Unfenced.
func (w Writer) IsUnfenced() bool { return w.unfenced }

// Fence returns w's fence on key.
func (w Writer) Fence(key string) (Fence, bool) {
	i, found := slices.BinarySearchFunc(w.fences, key, func(a Fence, k string) int { return strings.Compare(a.Key, k) })
	if !found {
		return Fence{}, false
	}
	return w.fences[i], true
}

// FencesOf returns the fences a write of the rows of keys (session ids)
// checks, by key and one per key: none when w is Unfenced, else w's fence
// on each key; a key w has no fence on refuses the write (ErrLeaseLost).
func (w Writer) FencesOf(keys []string) ([]Fence, error) {
	if w.unfenced {
		return nil, nil
	}
	out := make([]Fence, 0, len(keys))
	for _, k := range keys {
		f, ok := w.Fence(k)
		if !ok {
			return nil, fmt.Errorf("%s written under no lease on it: %w", k, ErrLeaseLost)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Fence) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b Fence) bool { return a.Key == b.Key }), nil
}

// AllFences returns the fences a write not keyed by lease (a setting)
// checks: every fence of w, by key; none when w is Unfenced. A writer with
// no fence that is not Unfenced refuses the write (ErrLeaseLost).
func (w Writer) AllFences() ([]Fence, error) {
	if w.unfenced {
		return nil, nil
	}
	if len(w.fences) == 0 {
		return nil, fmt.Errorf("a write under no lease: %w", ErrLeaseLost)
	}
	return slices.Clone(w.fences), nil
}

// EventNotifier is implemented by stores several daemons share: ListenEvents
// calls fn(sessionID, seq) for every commit of events by any daemon (seq is
// the highest of the commit), until ctx ends. Notifications can be lost
// (a reconnect): fn is then called with seq 0 for session "" to say "look
// at everything again". It returns only when ctx ends.
type EventNotifier interface {
	ListenEvents(ctx context.Context, fn func(sessionID string, seq int64)) error
}

// SettingUpdater is implemented by stores that change a setting atomically:
// UpdateSetting reads the value, calls fn with it and writes fn's result in
// one transaction holding the row, so that daemons updating the same
// setting at once never lose an update. An absent setting is ErrNotFound;
// an error of fn aborts the update and is returned as it is.
type SettingUpdater interface {
	UpdateSetting(ctx context.Context, w Writer, namespace, key string, fn func(old json.RawMessage) (json.RawMessage, error)) error
}

// ErrResolved means an approval request was already resolved (by another
// answer, a timeout, ...); ResolveApproval returns it with the row.
var ErrResolved = errors.New("the approval request is already resolved")

// ApprovalRow is an approval request in a store several daemons share:
// Request is the request as the broker encodes it, Resolution nil while it
// is pending. OwnerID is the daemon whose turn waits on it.
type ApprovalRow struct {
	RequestID  string
	SessionID  string
	Origin     string // "" = the unattended queue
	OwnerID    string
	Request    json.RawMessage
	Resolution json.RawMessage
	CreatedAt  time.Time
}

// ApprovalNote is one change of the shared approval queue: Kind is
// "pending" or "resolved", By the daemon that made it.
type ApprovalNote struct {
	Kind      string
	RequestID string
	By        string
}

// ApprovalQueue is implemented by stores several daemons share (PostgreSQL):
// pending approval requests and the origins' approvers live in the store so
// that any daemon lists, delivers and answers them; a request is resolved
// exactly once (the first ResolveApproval wins). Every insert and
// resolution is announced to ListenApprovals on every daemon.
type ApprovalQueue interface {
	// InsertApproval stores a new pending request and announces it.
	InsertApproval(ctx context.Context, row ApprovalRow, by string) error
	// ResolveApproval records resolution if the request is still pending
	// and announces it; an unknown request is ErrNotFound, a resolved one
	// ErrResolved, both with the row as it is (the winning resolution).
	ResolveApproval(ctx context.Context, requestID string, resolution json.RawMessage, by string) (ApprovalRow, error)
	// GetApproval returns the request, pending or resolved, or ErrNotFound.
	GetApproval(ctx context.Context, requestID string) (ApprovalRow, error)
	// PendingApprovals returns the pending requests, oldest first;
	// sessionID "" means all.
	PendingApprovals(ctx context.Context, sessionID string) ([]ApprovalRow, error)
	// SetApprover records that origin's approver is attached to daemon.
	SetApprover(ctx context.Context, origin, daemon string) error
	// RemoveApprover forgets origin's approver if it is still daemon's.
	RemoveApprover(ctx context.Context, origin, daemon string) error
	// ApproverOf returns the daemon origin's approver is attached to, ""
	// when none, or when that daemon left the registry or sent no
	// heartbeat within fresh (it died).
	ApproverOf(ctx context.Context, origin string, fresh time.Duration) (string, error)
	// ClearApprovers forgets every approver recorded for daemon (a
	// restarted daemon's approvers of its previous run are gone).
	ClearApprovers(ctx context.Context, daemon string) error
	// ListenApprovals calls fn for every announcement until ctx ends; after
	// a lost connection it calls fn with Kind "" (look again at everything).
	ListenApprovals(ctx context.Context, fn func(ApprovalNote)) error
}
