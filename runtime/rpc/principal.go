package rpc

import (
	"context"
	"errors"
	"strings"
	"time"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// maxNameLen bounds principal and key names.
const maxNameLen = 200

// PrincipalServer implements trellisv1.PrincipalServiceServer: principals
// and API keys in the store (admins only, by the authorization table).
type PrincipalServer struct {
	trellisv1.UnsafePrincipalServiceServer
	store store.PrincipalStore
	now   func() time.Time
}

// NewPrincipalServer returns the principal service.
func NewPrincipalServer(st store.PrincipalStore) *PrincipalServer {
	return &PrincipalServer{store: st, now: time.Now}
}

func principalToProto(p auth.Principal) *trellisv1.Principal {
	return &trellisv1.Principal{PrincipalId: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, Builtin: p.Builtin}
}

func storedPrincipalToProto(p store.Principal) *trellisv1.Principal {
	created := FormatTime(p.CreatedAt)
	return &trellisv1.Principal{PrincipalId: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, CreatedAt: &created}
}

func keyToProto(k store.APIKey) *trellisv1.ApiKey {
	out := &trellisv1.ApiKey{KeyId: k.ID, PrincipalId: k.PrincipalID, Name: k.Name, Prefix: k.Prefix, CreatedAt: FormatTime(k.CreatedAt)}
	if !k.ExpiresAt.IsZero() {
		s := FormatTime(k.ExpiresAt)
		out.ExpiresAt = &s
	}
	if !k.RevokedAt.IsZero() {
		s := FormatTime(k.RevokedAt)
		out.RevokedAt = &s
	}
	return out
}

func checkRole(role string) error {
	if !store.ValidRole(role) {
		return errs.New(errs.InvalidParams, "unknown role %q: roles are %s", role, strings.Join(store.Roles, ", "))
	}
	return nil
}

func checkName(what, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errs.New(errs.InvalidParams, "%s name must not be empty", what)
	case len(name) > maxNameLen:
		return errs.New(errs.InvalidParams, "%s name is %d bytes, over the limit of %d", what, len(name), maxNameLen)
	}
	return nil
}

// notBuiltin refuses to change the daemon token's principal.
func notBuiltin(id, what string) error {
	if id == auth.BuiltinID {
		return errs.New(errs.InvalidParams, "the built-in admin (the daemon token) cannot be %s; rotate the token file instead, or use a principal of your own", what)
	}
	return nil
}

// principalErr maps the store's principal errors to protocol codes.
func principalErr(err error, id string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.Wrap(errs.NotFound, err, "unknown principal %s", id)
	case errors.Is(err, store.ErrLastAdmin):
		return errs.Wrap(errs.InvalidParams, err, "principal %s is the last admin principal: make another principal admin first", id).
			WithData("reason", "last_admin")
	case errors.Is(err, store.ErrConflict):
		return errs.Wrap(errs.InvalidParams, err, "a principal with that name exists already")
	case errors.Is(err, store.ErrInvalid):
		return errs.Wrap(errs.InvalidParams, err, "%v", err)
	}
	return err
}

// CreatePrincipal stores a new principal.
func (s *PrincipalServer) CreatePrincipal(ctx context.Context, req *trellisv1.CreatePrincipalRequest) (*trellisv1.CreatePrincipalResponse, error) {
	if err := checkName("principal", req.GetName()); err != nil {
		return nil, err
	}
	if err := checkRole(req.GetRole()); err != nil {
		return nil, err
	}
	kind := store.PrincipalHuman
	if req.Kind != nil {
		kind = req.GetKind()
	}
	if kind != store.PrincipalHuman && kind != store.PrincipalService {
		return nil, errs.New(errs.InvalidParams, "unknown kind %q: human or service", kind)
	}
	p := store.Principal{ID: ids.New("p"), Name: strings.TrimSpace(req.GetName()), Kind: kind, Role: req.GetRole(), CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	if err := s.store.CreatePrincipal(ctx, p); err != nil {
		return nil, principalErr(err, p.ID)
	}
	return &trellisv1.CreatePrincipalResponse{Principal: storedPrincipalToProto(p)}, nil
}

// ListPrincipals lists the built-in admin, then every stored principal by name.
func (s *PrincipalServer) ListPrincipals(ctx context.Context, _ *trellisv1.ListPrincipalsRequest) (*trellisv1.ListPrincipalsResponse, error) {
	ps, err := s.store.ListPrincipals(ctx)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListPrincipalsResponse{Principals: []*trellisv1.Principal{principalToProto(auth.Builtin())}}
	for _, p := range ps {
		out.Principals = append(out.Principals, storedPrincipalToProto(p))
	}
	return out, nil
}

// UpdatePrincipal renames a principal or changes its role.
func (s *PrincipalServer) UpdatePrincipal(ctx context.Context, req *trellisv1.UpdatePrincipalRequest) (*trellisv1.UpdatePrincipalResponse, error) {
	id := req.GetPrincipalId()
	if err := notBuiltin(id, "changed"); err != nil {
		return nil, err
	}
	var u store.PrincipalUpdate
	if req.Name != nil {
		if err := checkName("principal", req.GetName()); err != nil {
			return nil, err
		}
		n := strings.TrimSpace(req.GetName())
		u.Name = &n
	}
	if req.Role != nil {
		if err := checkRole(req.GetRole()); err != nil {
			return nil, err
		}
		u.Role = req.Role
	}
	p, err := s.store.UpdatePrincipal(ctx, id, u)
	if err != nil {
		return nil, principalErr(err, id)
	}
	return &trellisv1.UpdatePrincipalResponse{Principal: storedPrincipalToProto(p)}, nil
}

// DeletePrincipal deletes a principal and its keys.
func (s *PrincipalServer) DeletePrincipal(ctx context.Context, req *trellisv1.DeletePrincipalRequest) (*trellisv1.DeletePrincipalResponse, error) {
	id := req.GetPrincipalId()
	if err := notBuiltin(id, "deleted"); err != nil {
		return nil, err
	}
	if err := s.store.DeletePrincipal(ctx, id); err != nil {
		return nil, principalErr(err, id)
	}
	return &trellisv1.DeletePrincipalResponse{Deleted: true}, nil
}

// CreateKey makes a key for a stored principal and answers its secret, once.
func (s *PrincipalServer) CreateKey(ctx context.Context, req *trellisv1.CreateKeyRequest) (*trellisv1.CreateKeyResponse, error) {
	id := req.GetPrincipalId()
	if id == auth.BuiltinID {
		return nil, errs.New(errs.InvalidParams, "the built-in admin has no keys (it is the daemon token); create an admin principal and give it keys")
	}
	if req.Name != nil && len(req.GetName()) > maxNameLen {
		return nil, errs.New(errs.InvalidParams, "key name is %d bytes, over the limit of %d", len(req.GetName()), maxNameLen)
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var expires time.Time
	if req.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, req.GetExpiresAt())
		if err != nil {
			return nil, errs.New(errs.InvalidParams, "expiresAt %q is not an RFC 3339 time (e.g. 2030-01-02T15:04:05Z)", req.GetExpiresAt())
		}
		if !t.After(now) {
			return nil, errs.New(errs.InvalidParams, "expiresAt %s is not in the future", req.GetExpiresAt())
		}
		expires = t.UTC()
	}
	secret, hash, display, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	k := store.APIKey{ID: ids.New("k"), PrincipalID: id, Name: req.GetName(), Hash: hash, Prefix: display, CreatedAt: now, ExpiresAt: expires}
	if err := s.store.CreateKey(ctx, k); err != nil {
		return nil, principalErr(err, id)
	}
	return &trellisv1.CreateKeyResponse{Key: keyToProto(k), Secret: secret}, nil
}

// ListKeys lists keys without their secrets.
func (s *PrincipalServer) ListKeys(ctx context.Context, req *trellisv1.ListKeysRequest) (*trellisv1.ListKeysResponse, error) {
	id := req.GetPrincipalId()
	if req.PrincipalId != nil && id != auth.BuiltinID {
		if _, err := s.store.GetPrincipal(ctx, id); err != nil {
			return nil, principalErr(err, id)
		}
	}
	out := &trellisv1.ListKeysResponse{Keys: []*trellisv1.ApiKey{}}
	if id == auth.BuiltinID {
		return out, nil
	}
	ks, err := s.store.ListKeys(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, k := range ks {
		out.Keys = append(out.Keys, keyToProto(k))
	}
	return out, nil
}

// RevokeKey revokes a key: every later call with it is refused.
func (s *PrincipalServer) RevokeKey(ctx context.Context, req *trellisv1.RevokeKeyRequest) (*trellisv1.RevokeKeyResponse, error) {
	k, err := s.store.RevokeKey(ctx, req.GetKeyId(), s.now().UTC().Truncate(time.Millisecond))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.Wrap(errs.NotFound, err, "unknown key %s", req.GetKeyId())
	}
	if err != nil {
		return nil, err
	}
	return &trellisv1.RevokeKeyResponse{Key: keyToProto(k)}, nil
}
