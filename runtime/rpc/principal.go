package rpc

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// maxNameLen bounds principal and key names.
const maxNameLen = 200

// maxKeyRate bounds a key's calls per second.
const maxKeyRate = 10000

// maxKeyRunningSessions bounds key.create's maxRunningSessions.
const maxKeyRunningSessions = 1000

// PrincipalServer implements trellisv1.PrincipalServiceServer: principals
// and API keys in the store (admins only, by the authorization table).
type PrincipalServer struct {
	trellisv1.UnsafePrincipalServiceServer
	store   PrincipalStore
	budgets PrincipalBudgets
	now     func() time.Time
}

// PrincipalBudgets keeps the principals' budgets and wakes the turns they
// paused (the session service).
type PrincipalBudgets interface {
	SetPrincipalBudget(ctx context.Context, id string, lim session.Limits) (session.PrincipalBudgetInfo, error)
	PrincipalBudgets(ctx context.Context) (map[string]events.Budget, error)
}

// PrincipalStore is what the principal service keeps: principals, keys
// and session grants, and the sessions' owners.
type PrincipalStore interface {
	store.PrincipalStore
	GetSession(ctx context.Context, sessionID string) (store.Session, error)
}

// NewPrincipalServer returns the principal service.
func NewPrincipalServer(st PrincipalStore, budgets PrincipalBudgets) *PrincipalServer {
	return &PrincipalServer{store: st, budgets: budgets, now: time.Now}
}

func principalToProto(p auth.Principal) *trellisv1.Principal {
	return &trellisv1.Principal{PrincipalId: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, Builtin: p.Builtin,
		Agents: p.Agents, Workdirs: p.Workdirs}
}

func storedPrincipalToProto(p store.Principal) *trellisv1.Principal {
	created := FormatTime(p.CreatedAt)
	return &trellisv1.Principal{PrincipalId: p.ID, Name: p.Name, Kind: p.Kind, Role: p.Role, CreatedAt: &created,
		Agents: p.Agents, Workdirs: p.Workdirs}
}

// principalRef names a principal who acted (an owner, who answered or
// added something); nil for none ("").
func principalRef(id, name string) *trellisv1.PrincipalRef {
	if id == "" {
		return nil
	}
	return &trellisv1.PrincipalRef{Id: id, Name: name}
}

// checkAgentLimits answers a principal's agent limits as stored: names of
// agent definitions, without repeats (nil when none).
func checkAgentLimits(names []string) ([]string, error) {
	if len(names) > store.MaxPrincipalLimits {
		return nil, errs.New(errcode.InvalidParams, "%d agents, over the limit of %d", len(names), store.MaxPrincipalLimits)
	}
	var out []string
	for _, n := range names {
		if err := agents.ValidName(n); err != nil {
			return nil, errs.New(errcode.InvalidParams, "agents: %v", err)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// checkWorkdirLimits answers a principal's workdir limits as stored:
// absolute paths, cleaned, without repeats (nil when none). They need not
// exist yet.
func checkWorkdirLimits(dirs []string) ([]string, error) {
	if len(dirs) > store.MaxPrincipalLimits {
		return nil, errs.New(errcode.InvalidParams, "%d workdirs, over the limit of %d", len(dirs), store.MaxPrincipalLimits)
	}
	var out []string
	for _, d := range dirs {
		if len(d) > maxPathBytes {
			return nil, errs.New(errcode.InvalidParams, "workdirs: a path of %d bytes, over the limit of %d", len(d), maxPathBytes)
		}
		if !filepath.IsAbs(d) {
			return nil, errs.New(errcode.InvalidParams, "workdirs: %q is not an absolute path: give the full path from / (e.g. /srv/agents)", d)
		}
		d = filepath.Clean(d)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// limitsFor refuses limits for a principal that is not a service: a
// person is trusted with what their role allows.
func limitsFor(kind, name string, limited bool) error {
	if kind != store.PrincipalService && limited {
		return errs.New(errcode.InvalidParams, "principal %s is a %s: only service principals are limited to agents and workdirs (create a principal of kind service for the program)", strings.TrimSpace(name), kind)
	}
	return nil
}

// maxPathBytes bounds a workdir limit (Linux's PATH_MAX less its NUL).
const maxPathBytes = 4095

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
	if k.RatePerSecond > 0 {
		r := int32(k.RatePerSecond)
		out.RatePerSecond = &r
	}
	if k.MaxRunningSessions > 0 {
		n := int32(k.MaxRunningSessions)
		out.MaxRunningSessions = &n
	}
	return out
}

func checkRole(role string) error {
	if !store.ValidRole(role) {
		return errs.New(errcode.InvalidParams, "unknown role %q: roles are %s", role, strings.Join(store.Roles, ", "))
	}
	return nil
}

func checkName(what, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errs.New(errcode.InvalidParams, "%s name must not be empty", what)
	case len(name) > maxNameLen:
		return errs.New(errcode.InvalidParams, "%s name is %d bytes, over the limit of %d", what, len(name), maxNameLen)
	}
	return nil
}

// notBuiltin refuses to change the daemon token's principal.
func notBuiltin(id, what string) error {
	if id == auth.BuiltinID {
		return errs.New(errcode.InvalidParams, "the built-in admin (the daemon token) cannot be %s; rotate the token file instead, or use a principal of your own", what)
	}
	return nil
}

// principalErr maps the store's principal errors to protocol codes.
func principalErr(err error, id string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.Wrap(errcode.NotFound, err, "unknown principal %s", id)
	case errors.Is(err, store.ErrLastAdmin):
		return errs.Wrap(errcode.InvalidParams, err, "principal %s is the last admin principal: make another principal admin first", id).
			WithData("reason", "last_admin")
	case errors.Is(err, store.ErrConflict):
		return errs.Wrap(errcode.InvalidParams, err, "a principal with that name exists already")
	case errors.Is(err, store.ErrInvalid):
		return errs.Wrap(errcode.InvalidParams, err, "%v", err)
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
		return nil, errs.New(errcode.InvalidParams, "unknown kind %q: human or service", kind)
	}
	limitAgents, err := checkAgentLimits(req.GetAgents())
	if err != nil {
		return nil, err
	}
	limitWorkdirs, err := checkWorkdirLimits(req.GetWorkdirs())
	if err != nil {
		return nil, err
	}
	if err := limitsFor(kind, req.GetName(), len(limitAgents) > 0 || len(limitWorkdirs) > 0); err != nil {
		return nil, err
	}
	p := store.Principal{ID: ids.New("p"), Name: strings.TrimSpace(req.GetName()), Kind: kind, Role: req.GetRole(), CreatedAt: s.now().UTC().Truncate(time.Millisecond),
		Agents: limitAgents, Workdirs: limitWorkdirs}
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
	budgets, err := s.budgets.PrincipalBudgets(ctx)
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListPrincipalsResponse{Principals: []*trellisv1.Principal{principalToProto(auth.Builtin())}}
	for _, p := range ps {
		pp := storedPrincipalToProto(p)
		if b, ok := budgets[p.ID]; ok {
			pp.Budget = budgetToProto(b)
		}
		out.Principals = append(out.Principals, pp)
	}
	return out, nil
}

// SetPrincipalBudget sets the budget every session of a stored principal
// spends together, and reports it with that spending.
func (s *PrincipalServer) SetPrincipalBudget(ctx context.Context, req *trellisv1.SetPrincipalBudgetRequest) (*trellisv1.SetPrincipalBudgetResponse, error) {
	lim := session.Limits{MaxCostMicroUSD: req.MaxCostMicroUsd, MaxTokens: req.MaxTokens}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	id := req.GetPrincipalId()
	if id == auth.BuiltinID {
		return nil, errs.New(errcode.InvalidParams, "the built-in admin (the daemon token) has no budget of its own: its sessions have no principal; set the daemon's default (--budget-default-cost-micro-usd, --budget-default-tokens) or each session's budget")
	}
	if _, err := s.store.GetPrincipal(ctx, id); err != nil {
		return nil, principalErr(err, id)
	}
	info, err := s.budgets.SetPrincipalBudget(ctx, id, lim)
	if err != nil {
		return nil, err
	}
	return &trellisv1.SetPrincipalBudgetResponse{Budget: budgetToProto(info.Budget),
		Spent: &trellisv1.BudgetSpent{CostMicroUsd: info.Spent.CostMicroUsd, Tokens: info.Spent.Tokens}, Reached: info.Reached}, nil
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
	var err error
	if u.Agents, err = limitUpdate("agents", req.GetAgents(), req.GetClearAgents(), checkAgentLimits); err != nil {
		return nil, err
	}
	if u.Workdirs, err = limitUpdate("workdirs", req.GetWorkdirs(), req.GetClearWorkdirs(), checkWorkdirLimits); err != nil {
		return nil, err
	}
	if (u.Agents != nil && len(*u.Agents) > 0) || (u.Workdirs != nil && len(*u.Workdirs) > 0) {
		// A principal's kind never changes, so this read cannot go stale.
		have, err := s.store.GetPrincipal(ctx, id)
		if err != nil {
			return nil, principalErr(err, id)
		}
		if err := limitsFor(have.Kind, have.Name, true); err != nil {
			return nil, err
		}
	}
	p, err := s.store.UpdatePrincipal(ctx, id, u)
	if err != nil {
		return nil, principalErr(err, id)
	}
	return &trellisv1.UpdatePrincipalResponse{Principal: storedPrincipalToProto(p)}, nil
}

// limitUpdate is what principal.update does to one limit list (field):
// nil leaves it, an empty list clears it (clear), a new list replaces it
// once check accepts it; both at once are invalid_params.
func limitUpdate(field string, list []string, clear bool, check func([]string) ([]string, error)) (*[]string, error) {
	switch {
	case clear && len(list) > 0:
		return nil, errs.New(errcode.InvalidParams, "%[1]s and clear%[2]s together: send the new %[1]s, or clear%[2]s to remove the limit",
			field, strings.ToUpper(field[:1])+field[1:])
	case clear:
		return &[]string{}, nil
	case len(list) > 0:
		checked, err := check(list)
		if err != nil {
			return nil, err
		}
		return &checked, nil
	}
	return nil, nil
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
		return nil, errs.New(errcode.InvalidParams, "the built-in admin has no keys (it is the daemon token); create an admin principal and give it keys")
	}
	if req.Name != nil && len(req.GetName()) > maxNameLen {
		return nil, errs.New(errcode.InvalidParams, "key name is %d bytes, over the limit of %d", len(req.GetName()), maxNameLen)
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var expires time.Time
	if req.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, req.GetExpiresAt())
		if err != nil {
			return nil, errs.New(errcode.InvalidParams, "expiresAt %q is not an RFC 3339 time (e.g. 2030-01-02T15:04:05Z)", req.GetExpiresAt())
		}
		if !t.After(now) {
			return nil, errs.New(errcode.InvalidParams, "expiresAt %s is not in the future", req.GetExpiresAt())
		}
		expires = t.UTC()
	}
	rate := 0
	if req.RatePerSecond != nil {
		if req.GetRatePerSecond() < 1 || req.GetRatePerSecond() > maxKeyRate {
			return nil, errs.New(errcode.InvalidParams, "ratePerSecond %d is out of range: it must be between 1 and %d (omit it for no limit)", req.GetRatePerSecond(), maxKeyRate)
		}
		rate = int(req.GetRatePerSecond())
	}
	running := 0
	if req.MaxRunningSessions != nil {
		if req.GetMaxRunningSessions() < 1 || req.GetMaxRunningSessions() > maxKeyRunningSessions {
			return nil, errs.New(errcode.InvalidParams, "maxRunningSessions %d is out of range: it must be between 1 and %d (omit it for no limit)", req.GetMaxRunningSessions(), maxKeyRunningSessions)
		}
		running = int(req.GetMaxRunningSessions())
	}
	secret, hash, display, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	k := store.APIKey{ID: ids.New("k"), PrincipalID: id, Name: req.GetName(), Hash: hash, Prefix: display, CreatedAt: now, ExpiresAt: expires, RatePerSecond: rate, MaxRunningSessions: running}
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
		return nil, errs.Wrap(errcode.NotFound, err, "unknown key %s", req.GetKeyId())
	}
	if err != nil {
		return nil, err
	}
	return &trellisv1.RevokeKeyResponse{Key: keyToProto(k)}, nil
}

func grantsToProto(gs []store.Grant) []*trellisv1.SessionGrant {
	out := make([]*trellisv1.SessionGrant, 0, len(gs))
	for _, g := range gs {
		out = append(out, &trellisv1.SessionGrant{PrincipalId: g.PrincipalID, Role: g.Role, GrantedAt: FormatTime(g.GrantedAt)})
	}
	return out
}

// mayShare answers whether the caller may change the session's grants: its
// owner or an admin (a controller grant does not pass sharing on). The
// authorization check has already refused callers that cannot see it.
func (s *PrincipalServer) mayShare(ctx context.Context, sessionID string) error {
	sess, err := s.store.GetSession(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return errs.Wrap(errcode.NotFound, err, "session %s not found", sessionID)
	}
	if err != nil {
		return err
	}
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || p.Role == store.RoleAdmin || (sess.Owner != "" && sess.Owner == p.ID) {
		return nil
	}
	return errs.New(errcode.Forbidden, "only the owner of session %s or an admin may share it", sessionID).
		WithData("role", p.Role)
}

// ShareSession grants a principal access to a session.
func (s *PrincipalServer) ShareSession(ctx context.Context, req *trellisv1.ShareSessionRequest) (*trellisv1.ShareSessionResponse, error) {
	sid, pid := req.GetSessionId(), req.GetPrincipalId()
	if sid == "" || pid == "" {
		return nil, errs.New(errcode.InvalidParams, "sessionId and principalId are required")
	}
	if !store.ValidGrant(req.GetRole()) {
		return nil, errs.New(errcode.InvalidParams, "unknown role %q: a session is shared as controller, approver or viewer", req.GetRole())
	}
	if pid == auth.BuiltinID {
		return nil, errs.New(errcode.InvalidParams, "the built-in admin sees every session already")
	}
	if me, ok := auth.PrincipalFrom(ctx); ok && me.ID == pid {
		return nil, errs.New(errcode.InvalidParams, "a share to oneself: %s is the caller", pid)
	}
	if err := s.mayShare(ctx, sid); err != nil {
		return nil, err
	}
	target, err := s.store.GetPrincipal(ctx, pid)
	if err != nil {
		return nil, principalErr(err, pid)
	}
	if sess, err := s.store.GetSession(ctx, sid); err == nil && sess.Owner == target.ID {
		return nil, errs.New(errcode.InvalidParams, "%s owns session %s already", target.Name, sid)
	}
	err = s.store.ShareSession(ctx, store.Grant{SessionID: sid, PrincipalID: pid, Role: req.GetRole(), GrantedAt: s.now().UTC().Truncate(time.Millisecond)})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.Wrap(errcode.NotFound, err, "session %s or principal %s not found", sid, pid)
	}
	if err != nil {
		return nil, err
	}
	gs, err := s.store.ListGrants(ctx, sid)
	if err != nil {
		return nil, err
	}
	return &trellisv1.ShareSessionResponse{Grants: grantsToProto(gs)}, nil
}

// UnshareSession removes a principal's grant on a session.
func (s *PrincipalServer) UnshareSession(ctx context.Context, req *trellisv1.UnshareSessionRequest) (*trellisv1.UnshareSessionResponse, error) {
	sid, pid := req.GetSessionId(), req.GetPrincipalId()
	if sid == "" || pid == "" {
		return nil, errs.New(errcode.InvalidParams, "sessionId and principalId are required")
	}
	if err := s.mayShare(ctx, sid); err != nil {
		return nil, err
	}
	err := s.store.UnshareSession(ctx, sid, pid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.Wrap(errcode.NotFound, err, "principal %s has no grant on session %s", pid, sid)
	}
	if err != nil {
		return nil, err
	}
	gs, err := s.store.ListGrants(ctx, sid)
	if err != nil {
		return nil, err
	}
	return &trellisv1.UnshareSessionResponse{Grants: grantsToProto(gs)}, nil
}

// maxAuditPage bounds one audit.list page.
const maxAuditPage = 1000

// ListSecurityEvents pages through the security audit log, newest first.
func (s *PrincipalServer) ListSecurityEvents(ctx context.Context, req *trellisv1.ListSecurityEventsRequest) (*trellisv1.ListSecurityEventsResponse, error) {
	limit := 100
	if req.Limit != nil {
		if req.GetLimit() < 1 || req.GetLimit() > maxAuditPage {
			return nil, errs.New(errcode.InvalidParams, "limit %d is out of range: it must be between 1 and %d", req.GetLimit(), maxAuditPage)
		}
		limit = int(req.GetLimit())
	}
	if req.BeforeId != nil && req.GetBeforeId() < 1 {
		return nil, errs.New(errcode.InvalidParams, "beforeId %d: want an event id (1 or more)", req.GetBeforeId())
	}
	// One more than asked says whether another page follows.
	es, err := s.store.ListSecurityEvents(ctx, store.SecurityEventFilter{
		PrincipalID: req.GetPrincipalId(), Method: req.GetMethod(), BeforeID: req.GetBeforeId(), Limit: limit + 1,
	})
	if err != nil {
		return nil, err
	}
	out := &trellisv1.ListSecurityEventsResponse{Events: []*trellisv1.SecurityEvent{}}
	if len(es) > limit {
		es = es[:limit]
		next := es[limit-1].ID
		out.NextBeforeId = &next
	}
	for _, e := range es {
		fields := &structpb.Struct{}
		if err := protojson.Unmarshal(e.Request, fields); err != nil {
			fields = &structpb.Struct{}
		}
		out.Events = append(out.Events, &trellisv1.SecurityEvent{
			Id: e.ID, At: FormatTime(e.At), PrincipalId: e.PrincipalID, PrincipalName: e.PrincipalName,
			Method: e.Method, Request: fields, Outcome: e.Outcome,
		})
	}
	return out, nil
}
