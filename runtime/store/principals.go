package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Roles, from most to least powerful (docs/security.md has what each may do).
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleMember   = "member"
	RoleApprover = "approver"
	RoleViewer   = "viewer"
)

// Roles lists every role, most powerful first.
var Roles = []string{RoleAdmin, RoleOperator, RoleMember, RoleApprover, RoleViewer}

// Principal kinds.
const (
	PrincipalHuman   = "human"
	PrincipalService = "service"
)

// ErrLastAdmin means a change would leave the store without an admin
// principal; nothing was changed.
var ErrLastAdmin = errors.New("it would leave no admin principal")

// MaxPrincipalLimits bounds each of a principal's Agents and Workdirs.
const MaxPrincipalLimits = 64

// Principal is a caller the daemon knows by name: a person or a service,
// with one role.
type Principal struct {
	ID        string
	Name      string // unique
	Kind      string // PrincipalHuman or PrincipalService
	Role      string // one of Roles
	CreatedAt time.Time
	// Agents, when not empty, are the only agents the principal's
	// sessions may run; Workdirs, when not empty, the only workdirs they
	// may use (each a clean absolute path: itself and what is below it).
	// Only a service principal has them (docs/security.md); nil = no limit.
	Agents   []string
	Workdirs []string
}

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool {
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Validate reports whether p can be stored.
func (p Principal) Validate() error {
	switch {
	case p.ID == "":
		return fmt.Errorf("principal: empty id: %w", ErrInvalid)
	case strings.TrimSpace(p.Name) == "":
		return fmt.Errorf("principal %s: empty name: %w", p.ID, ErrInvalid)
	case p.Kind != PrincipalHuman && p.Kind != PrincipalService:
		return fmt.Errorf("principal %s: unknown kind %q: %w", p.ID, p.Kind, ErrInvalid)
	case !ValidRole(p.Role):
		return fmt.Errorf("principal %s: unknown role %q: %w", p.ID, p.Role, ErrInvalid)
	}
	return p.validLimits()
}

// validLimits reports whether p's Agents and Workdirs can be stored.
func (p Principal) validLimits() error {
	if len(p.Agents) == 0 && len(p.Workdirs) == 0 {
		return nil
	}
	if p.Kind != PrincipalService {
		return fmt.Errorf("principal %s (%s) is a %s: only a service principal is limited to agents and workdirs: %w", p.ID, p.Name, p.Kind, ErrInvalid)
	}
	if len(p.Agents) > MaxPrincipalLimits || len(p.Workdirs) > MaxPrincipalLimits {
		return fmt.Errorf("principal %s: %d agents and %d workdirs, over the limit of %d each: %w", p.ID, len(p.Agents), len(p.Workdirs), MaxPrincipalLimits, ErrInvalid)
	}
	for _, a := range p.Agents {
		if strings.TrimSpace(a) == "" {
			return fmt.Errorf("principal %s: an empty agent name: %w", p.ID, ErrInvalid)
		}
	}
	for _, w := range p.Workdirs {
		if !filepath.IsAbs(w) || filepath.Clean(w) != w {
			return fmt.Errorf("principal %s: workdir %q is not a clean absolute path: %w", p.ID, w, ErrInvalid)
		}
	}
	return nil
}

// PrincipalUpdate lists the fields UpdatePrincipal changes; nil fields are
// left as they are. Agents or Workdirs pointing to an empty list clears
// that limit.
type PrincipalUpdate struct {
	Name     *string
	Role     *string
	Agents   *[]string
	Workdirs *[]string
}

// UpdatedLimits is a limit list after a PrincipalUpdate field: have when
// u is nil, else *u (nil when empty: no limit).
func UpdatedLimits(have []string, u *[]string) []string {
	switch {
	case u == nil:
		return have
	case len(*u) == 0:
		return nil
	}
	return *u
}

// APIKey is one key of a principal. The store keeps only a hash of the
// secret, so a key is shown once, when it is made.
type APIKey struct {
	ID          string
	PrincipalID string
	Name        string // a label of the owner's choosing ("" = none)
	Hash        []byte // of the whole secret (runtime/auth decides how)
	Prefix      string // the secret's first characters, to tell keys apart in lists
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero = never
	RevokedAt   time.Time // zero = not revoked
	// RatePerSecond is the most calls per second the key may make (0 = no limit).
	RatePerSecond int
	// MaxRunningSessions is the most sessions the key's prompts may keep
	// running at once (0 = no limit).
	MaxRunningSessions int
}

// Validate reports whether k can be stored.
func (k APIKey) Validate() error {
	switch {
	case k.ID == "":
		return fmt.Errorf("key: empty id: %w", ErrInvalid)
	case k.PrincipalID == "":
		return fmt.Errorf("key %s: empty principal id: %w", k.ID, ErrInvalid)
	case len(k.Hash) < 16:
		return fmt.Errorf("key %s: hash of %d bytes: %w", k.ID, len(k.Hash), ErrInvalid)
	case k.RatePerSecond < 0:
		return fmt.Errorf("key %s: rate %d: %w", k.ID, k.RatePerSecond, ErrInvalid)
	case k.MaxRunningSessions < 0:
		return fmt.Errorf("key %s: max running sessions %d: %w", k.ID, k.MaxRunningSessions, ErrInvalid)
	}
	return nil
}

// Session grant roles (session.share): what a principal other than the
// owner may do with one session.
const (
	GrantController = "controller"
	GrantApprover   = "approver"
	GrantViewer     = "viewer"
)

// ValidGrant reports whether role is a session grant role.
func ValidGrant(role string) bool {
	return role == GrantController || role == GrantApprover || role == GrantViewer
}

// Grant is one principal's access to one session it does not own.
type Grant struct {
	SessionID   string
	PrincipalID string
	Role        string // GrantController, GrantApprover or GrantViewer
	GrantedAt   time.Time
}

// PrincipalStore keeps principals and their API keys.
type PrincipalStore interface {
	// CreatePrincipal inserts p; an existing id or name is ErrConflict.
	CreatePrincipal(ctx context.Context, p Principal) error
	// GetPrincipal returns the principal or ErrNotFound.
	GetPrincipal(ctx context.Context, id string) (Principal, error)
	// ListPrincipals returns every principal ordered by name.
	ListPrincipals(ctx context.Context) ([]Principal, error)
	// UpdatePrincipal applies u and returns the updated principal, in one
	// transaction: an unknown id is ErrNotFound, a name taken by another
	// principal ErrConflict, an unknown role ErrInvalid, and a role change
	// that would leave no admin principal ErrLastAdmin.
	UpdatePrincipal(ctx context.Context, id string, u PrincipalUpdate) (Principal, error)
	// DeletePrincipal deletes the principal and its keys in one
	// transaction: an unknown id is ErrNotFound, the last admin
	// principal ErrLastAdmin.
	DeletePrincipal(ctx context.Context, id string) error

	// CreateKey inserts k; a principal that does not exist is
	// ErrNotFound, an existing id or hash ErrConflict.
	CreateKey(ctx context.Context, k APIKey) error
	// ListKeys returns the keys of a principal ("" = of every principal),
	// oldest first, revoked ones included.
	ListKeys(ctx context.Context, principalID string) ([]APIKey, error)
	// RevokeKey marks the key revoked at at and returns it; an unknown id
	// is ErrNotFound. A key revoked already keeps its first revocation time.
	RevokeKey(ctx context.Context, id string, at time.Time) (APIKey, error)
	// KeyByHash returns the key with this hash and its principal, or
	// ErrNotFound (revoked and expired keys are returned: the caller says
	// why they are refused).
	KeyByHash(ctx context.Context, hash []byte) (APIKey, Principal, error)

	// ShareSession grants g (inserted, or replacing the principal's grant
	// on the session): an unknown session or principal is ErrNotFound, an
	// unknown role ErrInvalid. Grants are deleted with their session and
	// with their principal.
	ShareSession(ctx context.Context, g Grant) error
	// UnshareSession removes a principal's grant; none is ErrNotFound.
	UnshareSession(ctx context.Context, sessionID, principalID string) error
	// SessionGrant returns the principal's grant on the session, or ErrNotFound.
	SessionGrant(ctx context.Context, sessionID, principalID string) (Grant, error)
	// ListGrants returns the session's grants ordered by principal id.
	ListGrants(ctx context.Context, sessionID string) ([]Grant, error)

	// AppendSecurityEvent stores e (its ID is ignored) and returns the
	// assigned ID, rising. The log is append-only: nothing changes or
	// deletes its rows.
	AppendSecurityEvent(ctx context.Context, e SecurityEvent) (int64, error)
	// ListSecurityEvents returns the matching events, newest (highest ID)
	// first.
	ListSecurityEvents(ctx context.Context, f SecurityEventFilter) ([]SecurityEvent, error)
}

// SecurityEvent is one call of a security-relevant method (principals,
// keys, shares, allowlist, providers, jobs, gateway, shutdown), allowed or
// refused.
type SecurityEvent struct {
	ID            int64
	At            time.Time
	PrincipalID   string
	PrincipalName string
	Method        string          // the JSON-RPC name
	Request       json.RawMessage // the request's scalar fields (no secrets: see runtime/rpc)
	Outcome       string          // "ok", or the error code that answered
}

// SecurityEventFilter selects security events; empty fields match any.
type SecurityEventFilter struct {
	PrincipalID string
	Method      string
	BeforeID    int64 // > 0: only events with a lower ID (the next page)
	Limit       int   // <= 0: all
}
