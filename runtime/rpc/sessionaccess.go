package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/store"
)

// SessionAccess is what the authorization check reads of a session: its
// owner, and the grants of principals it was shared with.
type SessionAccess interface {
	GetSession(ctx context.Context, sessionID string) (store.Session, error)
	SessionGrant(ctx context.Context, sessionID, principalID string) (store.Grant, error)
}

// ownerOf is the owner a session created by the caller records: its
// principal, or "" for the daemon token (and calls with no principal).
func ownerOf(ctx context.Context) string {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || p.Builtin {
		return ""
	}
	return p.ID
}

// callerMayRun is the caller's agent and workdir limits as a check
// (auth.Principal.MayRun), or nil when the caller has none.
func callerMayRun(ctx context.Context) func(agent, workdir string) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || !p.Limited() {
		return nil
	}
	return p.MayRun
}

// visibleTo is the principal whose sessions a listing keeps: roles below
// operator see only what they own or were granted ("" = every session).
func visibleTo(ctx context.Context) string {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || auth.Allows(p.Role, store.RoleOperator) {
		return ""
	}
	return p.ID
}

// grantRank orders session grants as roles are ordered: a grant allows the
// session-scoped methods whose least role it reaches.
var grantRank = map[string]int{store.GrantViewer: 1, store.GrantApprover: 2, store.GrantController: 3}

// grantNeeded is the grant a session-scoped method needs of a principal
// that does not own the session.
func grantNeeded(minRole string) string {
	switch minRole {
	case store.RoleViewer:
		return store.GrantViewer
	case store.RoleApprover:
		return store.GrantApprover
	}
	return store.GrantController
}

// checkSession decides a session-scoped call (its row says session) by a
// principal whose role allows the method: admins act on every session;
// the owner on its own; operators read every session; anyone else needs a
// grant (session.share) reaching the method. A session the principal may
// not see answers not_found, as an unknown one does (no existence leak);
// one it may see but not act on, forbidden.
func (i interceptors) checkSession(ctx context.Context, p auth.Principal, fullMethod string, row methodAccess, sessionID string) error {
	if !row.session {
		return nil
	}
	return sessionAllowed(ctx, i.access, i.log, p, fullMethod, row.minRole, sessionID)
}

// sessionAllowed is checkSession for a method whose least role is minRole
// acting on sessionID (also used by handlers that find the session
// themselves, such as approval.respond's request).
func sessionAllowed(ctx context.Context, access SessionAccess, log *slog.Logger, p auth.Principal, fullMethod, minRole, sessionID string) error {
	if p.Role == store.RoleAdmin || sessionID == "" || access == nil {
		return nil
	}
	row := methodAccess{minRole: minRole, session: true}
	sess, err := access.GetSession(ctx, sessionID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // the method answers not_found itself
	case err != nil:
		return toStatus(ctx, log, fullMethod, err)
	}
	if sess.Owner != "" && sess.Owner == p.ID {
		return nil
	}
	need := grantNeeded(row.minRole)
	operatorReads := p.Role == store.RoleOperator
	if operatorReads && need == store.GrantViewer {
		return nil
	}
	g, err := access.SessionGrant(ctx, sessionID, p.ID)
	switch {
	case errors.Is(err, store.ErrNotFound) && !operatorReads:
		return statusWithInfo(codes.NotFound, errcode.NotFound, fmt.Sprintf("session %s not found", sessionID), nil)
	case errors.Is(err, store.ErrNotFound):
		return statusWithInfo(codes.PermissionDenied, errcode.Forbidden,
			fmt.Sprintf("%s on session %s needs its owner, an admin or a %s grant (session.share); operators read every session but act only on their own", methodName(fullMethod), sessionID, need),
			map[string]any{"role": p.Role, "minRole": row.minRole})
	case err != nil:
		return toStatus(ctx, log, fullMethod, err)
	}
	if grantRank[g.Role] >= grantRank[need] {
		return nil
	}
	return statusWithInfo(codes.PermissionDenied, errcode.Forbidden,
		fmt.Sprintf("%s on session %s needs a %s grant; %s has %s", methodName(fullMethod), sessionID, need, p.Name, g.Role),
		map[string]any{"role": p.Role, "minRole": row.minRole, "grant": g.Role})
}
