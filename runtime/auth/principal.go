package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
	// Agents and Workdirs are a service principal's limits (store.Principal;
	// empty = no limit): MayRun checks them.
	Agents   []string
	Workdirs []string
}

// DefaultAgent is the agent a session runs when none is named: the
// agents package's DefaultName (which imports this package; a test there
// keeps the two equal).
const DefaultAgent = "default"

// Limited reports whether p has agent or workdir limits.
func (p Principal) Limited() bool {
	return len(p.Agents) > 0 || len(p.Workdirs) > 0
}

// MayRun checks that p may have a session run agent ("" = DefaultAgent)
// in workdir: that the agent is one of p.Agents and the workdir is one of
// p.Workdirs or below one, when p has them. workdir is made absolute and
// clean, and its symbolic links are resolved when it exists, so that a
// link inside an allowed directory does not lead outside it. A refusal is
// forbidden, naming what was asked and what is allowed.
func (p Principal) MayRun(agent, workdir string) error {
	return mayRun("principal "+p.Name, p.Agents, p.Workdirs, agent, workdir)
}

// mayRun is MayRun for the principal who (its name, or what acts as it).
func mayRun(who string, agents, workdirs []string, agent, workdir string) error {
	if agent == "" {
		agent = DefaultAgent
	}
	if len(agents) > 0 && !slices.Contains(agents, agent) {
		return errs.New(errcode.Forbidden, "%s may run only the agents %s, not %q", who, strings.Join(agents, ", "), agent).
			WithData("agent", agent).WithData("allowedAgents", strings.Join(agents, ","))
	}
	if len(workdirs) == 0 {
		return nil
	}
	real, err := RealPath(workdir)
	if err == nil {
		for _, prefix := range workdirs {
			if Within(real, prefix) {
				return nil
			}
			// A prefix given through a link (/tmp on some systems) allows
			// where the link leads, as it is now.
			if realPrefix, err := RealPath(prefix); err == nil && realPrefix != prefix && Within(real, realPrefix) {
				return nil
			}
		}
	} else {
		real = workdir
	}
	return errs.New(errcode.Forbidden, "%s may use only the workdirs %s and what is below them, not %s", who, strings.Join(workdirs, ", "), real).
		WithData("workdir", real).WithData("allowedWorkdirs", strings.Join(workdirs, ","))
}

// RealPath is path made absolute and clean, with its symbolic links
// resolved: those of its longest existing part when it does not exist (as
// a session's workdir is resolved, and so that a missing directory below
// a link does not hide where the link leads).
func RealPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	missing := ""
	for dir := abs; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, missing), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs, nil
		}
		missing = filepath.Join(filepath.Base(dir), missing)
		dir = parent
	}
}

// Within reports whether the clean absolute path is prefix or below it, by
// whole path components: /srv/a is within /srv/a and /srv, not /srv/ab.
func Within(path, prefix string) bool {
	if !filepath.IsAbs(path) || !filepath.IsAbs(prefix) {
		return false
	}
	path, prefix = filepath.Clean(path), filepath.Clean(prefix)
	if path == prefix || prefix == string(filepath.Separator) {
		return true
	}
	rest, ok := strings.CutPrefix(path, prefix)
	return ok && strings.HasPrefix(rest, string(filepath.Separator))
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
	return Principal{ID: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, KeyID: k.ID, KeyRate: k.RatePerSecond, KeyMaxRunning: k.MaxRunningSessions,
		Agents: p.Agents, Workdirs: p.Workdirs}, nil
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
	return Principal{ID: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, KeyID: keyID, Agents: p.Agents, Workdirs: p.Workdirs}, nil
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

// OwnerMayRun checks that the session about to be made for the principal
// id (its owner: the caller of session.create, a job's or a binding's
// owner, a sub-agent's parent's) may run agent in workdir, by the owner's
// limits as they are now in the store (Principal.MayRun): a limit set
// after a job or binding was made holds from its next session. "" and the
// daemon token have no limits; a deleted owner is forbidden.
func (a *Authenticator) OwnerMayRun(ctx context.Context, id, agent, workdir string) error {
	if id == "" || id == BuiltinID {
		return nil
	}
	if a.Store == nil {
		return errs.New(errcode.Forbidden, "principal %s, for whom the session would run, is unknown to this daemon", id)
	}
	p, err := a.Store.GetPrincipal(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.New(errcode.Forbidden, "principal %s, for whom the session would run, was deleted", id)
	case err != nil:
		return err
	}
	return mayRun("principal "+p.Name, p.Agents, p.Workdirs, agent, workdir)
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
