package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// KeyPrefix starts every API key, so that a key is told from the daemon
// token (and a pasted key from garbage) without a store lookup.
const KeyPrefix = "trk_"

// keyBytes is the randomness in an API key: as much as the token's, so a
// single unsalted SHA-256 of it is as hard to reverse as guessing the key.
const keyBytes = 32

// displayChars is how much of a key key.list shows (prefix included):
// enough to tell keys apart, far too little to guess the rest.
const displayChars = len(KeyPrefix) + 6

// BuiltinID is the principal id of the daemon token: the bootstrap admin.
const BuiltinID = "builtin-admin"

// Principal is the caller of one call.
type Principal struct {
	ID      string
	Name    string
	Kind    string // store.PrincipalHuman or store.PrincipalService
	Role    string // one of store.Roles
	Builtin bool   // the daemon token
	KeyID   string // the API key used ("" for the daemon token)
	// KeyRate is the most calls per second KeyID may make (0 = no limit).
	KeyRate int
	// KeyMaxRunning is the most sessions KeyID's prompts may keep running
	// at once (0 = no limit).
	KeyMaxRunning int
}

// Builtin is the daemon token's principal.
func Builtin() Principal {
	return Principal{ID: BuiltinID, Name: "admin (daemon token)", Kind: store.PrincipalService, Role: store.RoleAdmin, Builtin: true}
}

// NewKey returns a new API key's secret, the hash the store keeps and the
// characters key.list shows.
func NewKey() (secret string, hash []byte, display string, err error) {
	var raw [keyBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, "", fmt.Errorf("generate key: %w", err)
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	return secret, HashKey(secret), secret[:displayChars], nil
}

// HashKey is the stored form of a key's secret.
func HashKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// wellFormed reports whether s has the shape NewKey gives.
func wellFormed(s string) bool {
	rest, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil && len(b) == keyBytes
}

// Authenticator says whose a presented credential is: the daemon token
// (the built-in admin) or an API key of a stored principal.
type Authenticator struct {
	Token string
	Store store.PrincipalStore // nil: only the token is known
	Now   func() time.Time     // nil: time.Now
}

// Authenticate returns the principal of credential, or an unauthorized
// error saying why it is refused (malformed, unknown, revoked, expired).
// A key is looked up on every call, so a revocation holds from the next
// call on, on every daemon sharing the store.
func (a *Authenticator) Authenticate(ctx context.Context, credential string) (Principal, error) {
	credential = strings.TrimSpace(credential)
	if credential != "" && Equal(credential, a.Token) {
		return Builtin(), nil
	}
	if !wellFormed(credential) {
		return Principal{}, errs.New(errcode.Unauthorized,
			"bad token: send the daemon's token (token file or daemon.json) or an API key (%s…, from key.create)", KeyPrefix)
	}
	if a.Store == nil {
		return Principal{}, errs.New(errcode.Unauthorized, "unknown API key")
	}
	k, p, err := a.Store.KeyByHash(ctx, HashKey(credential))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, errs.New(errcode.Unauthorized, "unknown API key: it was never made here or its principal was deleted")
	case err != nil:
		return Principal{}, err
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if !k.RevokedAt.IsZero() {
		return Principal{}, errs.New(errcode.Unauthorized, "API key %s (%s…) was revoked at %s", k.ID, k.Prefix, k.RevokedAt.Format(time.RFC3339))
	}
	if !k.ExpiresAt.IsZero() && !now().Before(k.ExpiresAt) {
		return Principal{}, errs.New(errcode.Unauthorized, "API key %s (%s…) expired at %s", k.ID, k.Prefix, k.ExpiresAt.Format(time.RFC3339))
	}
	return Principal{ID: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, KeyID: k.ID, KeyRate: k.RatePerSecond, KeyMaxRunning: k.MaxRunningSessions}, nil
}

// Principal returns the principal with this id as it is now in the store,
// for a call another daemon of the cluster authenticated and forwarded
// (keyID is the key it used, "" for the daemon token); the built-in admin's
// id gives Builtin. A principal deleted meanwhile is unauthorized.
func (a *Authenticator) Principal(ctx context.Context, id, keyID string) (Principal, error) {
	if id == BuiltinID {
		return Builtin(), nil
	}
	if a.Store == nil {
		return Principal{}, errs.New(errcode.Unauthorized, "unknown principal %s", id)
	}
	p, err := a.Store.GetPrincipal(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, errs.New(errcode.Unauthorized, "principal %s was deleted", id)
	case err != nil:
		return Principal{}, err
	}
	return Principal{ID: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, KeyID: keyID}, nil
}

// OwnerMayAct checks, before a job runs or a gateway binding answers, that
// its owner (what names it: "job j-…") still exists and still has minRole
// or above: a job or a binding acts as its owner only while its owner
// could have made it. "" (the daemon token) always may; otherwise the
// answer is forbidden, naming the owner and what to do.
func (a *Authenticator) OwnerMayAct(ctx context.Context, id, what, minRole string) error {
	if id == "" || id == BuiltinID {
		return nil
	}
	if a.Store == nil {
		return errs.New(errcode.Forbidden, "%s is owned by principal %s, which this daemon does not know", what, id)
	}
	p, err := a.Store.GetPrincipal(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.New(errcode.Forbidden, "%s is owned by principal %s, which was deleted: it acts only as its owner (an operator or admin may remove it)", what, id).
			WithData("minRole", minRole)
	case err != nil:
		return err
	}
	if !Allows(p.Role, minRole) {
		return errs.New(errcode.Forbidden, "%s is owned by %s, whose role is now %s: it acts only while its owner is %s or above (give the role back, or remove it)", what, p.Name, p.Role, minRole).
			WithData("role", p.Role).WithData("minRole", minRole)
	}
	return nil
}

// rank orders the roles: a higher rank may do what a lower one may.
var rank = map[string]int{
	store.RoleViewer:   1,
	store.RoleApprover: 2,
	store.RoleMember:   3,
	store.RoleOperator: 4,
	store.RoleAdmin:    5,
}

// Allows reports whether role may call a method whose least role is
// minRole. An unknown role (or minRole) allows nothing.
func Allows(role, minRole string) bool {
	r, ok := rank[role]
	m, ok2 := rank[minRole]
	return ok && ok2 && r >= m
}

type principalKey struct{}

// WithPrincipal returns ctx carrying the caller's principal.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller's principal, if the call was authenticated.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
