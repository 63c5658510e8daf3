package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
)

// CreatePrincipal inserts a principal.
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if err := p.Validate(); err != nil {
		return err
	}
	err := s.write(ctx, func(q Querier) error {
		_, err := q.ExecContext(ctx, `INSERT INTO principals (id, name, kind, role, created_at, agents, workdirs) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			p.ID, p.Name, p.Kind, p.Role, s.f.Time(p.CreatedAt), s.limits(p.Agents), s.limits(p.Workdirs))
		return err
	})
	return s.f.InsertErr(err, "principal "+p.ID+" ("+p.Name+")", "create principal "+p.ID)
}

const principalCols = `id, name, kind, role, created_at, agents, workdirs`

// principalDest is the Scan destination of principalCols into p.
func (s *Store) principalDest(p *store.Principal) []any {
	return []any{&p.ID, &p.Name, &p.Kind, &p.Role, scanTime(&p.CreatedAt), s.f.ScanList(&p.Agents), s.f.ScanList(&p.Workdirs)}
}

// noLimit reads a principal's stored lists back: empty is nil (no limit).
func noLimit(p *store.Principal) {
	if len(p.Agents) == 0 {
		p.Agents = nil
	}
	if len(p.Workdirs) == 0 {
		p.Workdirs = nil
	}
}

func (s *Store) scanPrincipal(r Scanner) (store.Principal, error) {
	var p store.Principal
	err := r.Scan(s.principalDest(&p)...)
	noLimit(&p)
	return p, err
}

// limits is the stored form of a principal's agents or workdirs: the
// columns are NOT NULL, so none is an empty list.
func (s *Store) limits(list []string) any {
	if list == nil {
		list = []string{}
	}
	return s.f.List(list)
}

func (s *Store) getPrincipal(ctx context.Context, q Querier, id string, lock string) (store.Principal, error) {
	p, err := s.scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalCols+` FROM principals WHERE id = $1`+lock, id))
	if err != nil {
		return p, s.f.RowErr(err, "principal "+id, "get principal "+id)
	}
	return p, nil
}

// GetPrincipal returns one principal.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return s.getPrincipal(ctx, s.r, id, "")
}

// ListPrincipals returns every principal ordered by name.
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	out, err := QueryAll(ctx, s.r, s.scanPrincipal, `SELECT `+principalCols+` FROM principals ORDER BY name`)
	if err != nil {
		return nil, s.f.Fail("list principals", err)
	}
	return out, nil
}

// otherAdmins counts the admin principals other than id, locking every
// admin row first: two transactions removing the last two admins at once
// are serialised, and the second sees the first's change.
func (s *Store) otherAdmins(ctx context.Context, tx Tx, id string) (int, error) {
	ids, err := QueryAll(ctx, tx, func(r Scanner) (string, error) {
		var a string
		return a, r.Scan(&a)
	}, `SELECT id FROM principals WHERE role = $1`+s.f.ForUpdate, store.RoleAdmin)
	n := 0
	for _, a := range ids {
		if a != id {
			n++
		}
	}
	return n, err
}

// UpdatePrincipal renames a principal or changes its role.
func (s *Store) UpdatePrincipal(ctx context.Context, id string, u store.PrincipalUpdate) (store.Principal, error) {
	if u.Role != nil && !store.ValidRole(*u.Role) {
		return store.Principal{}, fmt.Errorf("principal %s: unknown role %q: %w", id, *u.Role, store.ErrInvalid)
	}
	if u.Name != nil && *u.Name == "" {
		return store.Principal{}, fmt.Errorf("principal %s: empty name: %w", id, store.ErrInvalid)
	}
	var out store.Principal
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		// Admin rows are locked before the principal's, as in
		// DeletePrincipal, so that the two cannot deadlock.
		others := -1
		if u.Role != nil && *u.Role != store.RoleAdmin {
			n, err := s.otherAdmins(ctx, tx, id)
			if err != nil {
				return err
			}
			others = n
		}
		p, err := s.getPrincipal(ctx, tx, id, s.f.ForUpdate)
		if err != nil {
			return err
		}
		if others == 0 && p.Role == store.RoleAdmin {
			return fmt.Errorf("principal %s (%s) is the last admin: changing its role %w", id, p.Name, store.ErrLastAdmin)
		}
		if u.Name != nil {
			p.Name = *u.Name
		}
		if u.Role != nil {
			p.Role = *u.Role
		}
		p.Agents, p.Workdirs = store.UpdatedLimits(p.Agents, u.Agents), store.UpdatedLimits(p.Workdirs, u.Workdirs)
		if err := p.Validate(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE principals SET name = $2, role = $3, agents = $4, workdirs = $5 WHERE id = $1`,
			id, p.Name, p.Role, s.limits(p.Agents), s.limits(p.Workdirs)); err != nil {
			return err
		}
		out = p
		return nil
	})
	switch {
	case s.f.isUnique(err):
		return store.Principal{}, fmt.Errorf("principal %s: name %q: %w", id, *u.Name, store.ErrConflict)
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLastAdmin) || errors.Is(err, store.ErrInvalid):
		return store.Principal{}, err
	case err != nil:
		return store.Principal{}, s.f.Fail("update principal "+id, err)
	}
	return out, nil
}

// DeletePrincipal deletes a principal and its keys.
func (s *Store) DeletePrincipal(ctx context.Context, id string) error {
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		n, err := s.otherAdmins(ctx, tx, id)
		if err != nil {
			return err
		}
		p, err := s.getPrincipal(ctx, tx, id, s.f.ForUpdate)
		if err != nil {
			return err
		}
		if p.Role == store.RoleAdmin && n == 0 {
			return fmt.Errorf("principal %s (%s) is the last admin: deleting it %w", id, p.Name, store.ErrLastAdmin)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE principal_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM principals WHERE id = $1`, id)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLastAdmin):
		return err
	case err != nil:
		return s.f.Fail("delete principal "+id, err)
	}
	return nil
}

// CreateKey inserts an API key of an existing principal.
func (s *Store) CreateKey(ctx context.Context, k store.APIKey) error {
	if err := k.Validate(); err != nil {
		return err
	}
	err := s.write(ctx, func(q Querier) error {
		_, err := q.ExecContext(ctx, `INSERT INTO api_keys (id, principal_id, name, key_hash, prefix, created_at, expires_at, revoked_at, rate_per_second, max_running_sessions)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			k.ID, k.PrincipalID, k.Name, k.Hash, k.Prefix, s.f.Time(k.CreatedAt), s.f.nullTime(k.ExpiresAt), s.f.nullTime(k.RevokedAt), k.RatePerSecond, k.MaxRunningSessions)
		return err
	})
	switch {
	case s.f.isForeignKey(err):
		return fmt.Errorf("key %s: principal %s: %w", k.ID, k.PrincipalID, store.ErrNotFound)
	case s.f.isUnique(err):
		return fmt.Errorf("key %s: %w", k.ID, store.ErrConflict)
	case err != nil:
		return s.f.Fail("create key "+k.ID, err)
	}
	return nil
}

// keyCols is the select list scanKey reads, each column after prefix.
func keyCols(prefix string) string {
	out := ""
	for i, c := range []string{"id", "principal_id", "name", "key_hash", "prefix", "created_at", "expires_at", "revoked_at", "rate_per_second", "max_running_sessions"} {
		if i > 0 {
			out += ", "
		}
		out += prefix + c
	}
	return out
}

func scanKey(r Scanner, extra ...any) (store.APIKey, error) {
	var k store.APIKey
	err := r.Scan(append([]any{&k.ID, &k.PrincipalID, &k.Name, &k.Hash, &k.Prefix, scanTime(&k.CreatedAt),
		scanTime(&k.ExpiresAt), scanTime(&k.RevokedAt), &k.RatePerSecond, &k.MaxRunningSessions}, extra...)...)
	return k, err
}

// ListKeys returns the keys of one principal or of all, oldest first.
func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.APIKey, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.APIKey, error) { return scanKey(r) },
		`SELECT `+keyCols("")+` FROM api_keys WHERE $1 = '' OR principal_id = $1 ORDER BY created_at, id`, principalID)
	if err != nil {
		return nil, s.f.Fail("list keys", err)
	}
	return out, nil
}

// RevokeKey marks a key revoked (once: a second revocation keeps the first time).
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	var k store.APIKey
	err := s.write(ctx, func(q Querier) error {
		var err error
		k, err = scanKey(q.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2)
			WHERE id = $1 RETURNING `+keyCols(""), id, s.f.Time(at)))
		return err
	})
	if err != nil {
		return store.APIKey{}, s.f.RowErr(err, "key "+id, "revoke key "+id)
	}
	return k, nil
}

// KeyByHash finds a key and its principal by the hash of its secret.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Principal, error) {
	var p store.Principal
	k, err := scanKey(s.r.QueryRowContext(ctx, `SELECT `+keyCols("k.")+`, p.id, p.name, p.kind, p.role, p.created_at, p.agents, p.workdirs
		FROM api_keys k JOIN principals p ON p.id = k.principal_id WHERE k.key_hash = $1`, hash),
		s.principalDest(&p)...)
	if err != nil {
		return store.APIKey{}, store.Principal{}, s.f.RowErr(err, "key", "find key")
	}
	noLimit(&p)
	return k, p, nil
}

// ShareSession inserts or replaces a principal's grant on a session.
func (s *Store) ShareSession(ctx context.Context, g store.Grant) error {
	if !store.ValidGrant(g.Role) {
		return fmt.Errorf("grant on %s: unknown role %q: %w", g.SessionID, g.Role, store.ErrInvalid)
	}
	err := s.write(ctx, func(q Querier) error {
		_, err := q.ExecContext(ctx, `INSERT INTO session_grants (session_id, principal_id, role, granted_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_id, principal_id) DO UPDATE SET role = excluded.role, granted_at = excluded.granted_at`,
			g.SessionID, g.PrincipalID, g.Role, s.f.Time(g.GrantedAt))
		return err
	})
	switch {
	case s.f.isForeignKey(err):
		return fmt.Errorf("grant on %s to %s: the session or the principal: %w", g.SessionID, g.PrincipalID, store.ErrNotFound)
	case err != nil:
		return s.f.Fail("share session "+g.SessionID, err)
	}
	return nil
}

// UnshareSession removes a principal's grant on a session.
func (s *Store) UnshareSession(ctx context.Context, sessionID, principalID string) error {
	var n int64
	err := s.write(ctx, func(q Querier) error {
		var err error
		n, err = affected(ctx, q, `DELETE FROM session_grants WHERE session_id = $1 AND principal_id = $2`, sessionID, principalID)
		return err
	})
	switch {
	case err != nil:
		return s.f.Fail("unshare session "+sessionID, err)
	case n == 0:
		return fmt.Errorf("grant on %s to %s: %w", sessionID, principalID, store.ErrNotFound)
	}
	return nil
}

func scanGrant(r Scanner) (store.Grant, error) {
	var g store.Grant
	err := r.Scan(&g.SessionID, &g.PrincipalID, &g.Role, scanTime(&g.GrantedAt))
	return g, err
}

// SessionGrant returns one principal's grant on a session.
func (s *Store) SessionGrant(ctx context.Context, sessionID, principalID string) (store.Grant, error) {
	g, err := scanGrant(s.r.QueryRowContext(ctx, `SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = $1 AND principal_id = $2`, sessionID, principalID))
	if err != nil {
		return store.Grant{}, s.f.RowErr(err, "grant on "+sessionID+" to "+principalID, "session grant")
	}
	return g, nil
}

// ListGrants returns a session's grants.
func (s *Store) ListGrants(ctx context.Context, sessionID string) ([]store.Grant, error) {
	out, err := QueryAll(ctx, s.r, scanGrant, `SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = $1 ORDER BY principal_id`, sessionID)
	if err != nil {
		return nil, s.f.Fail("list grants", err)
	}
	return out, nil
}

// AppendSecurityEvent appends one event to the security audit log.
func (s *Store) AppendSecurityEvent(ctx context.Context, e store.SecurityEvent) (int64, error) {
	if e.Request == nil {
		e.Request = json.RawMessage("{}")
	}
	if !json.Valid(e.Request) {
		return 0, fmt.Errorf("security event: request is not valid JSON: %w", store.ErrInvalid)
	}
	var id int64
	err := s.write(ctx, func(q Querier) error {
		return q.QueryRowContext(ctx, `INSERT INTO security_events (at, principal_id, principal_name, method, request, outcome)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			s.f.Time(e.At), e.PrincipalID, e.PrincipalName, e.Method, string(e.Request), e.Outcome).Scan(&id)
	})
	if err != nil {
		return 0, s.f.Fail("append security event", err)
	}
	return id, nil
}

// ListSecurityEvents returns the matching events, newest first.
func (s *Store) ListSecurityEvents(ctx context.Context, f store.SecurityEventFilter) ([]store.SecurityEvent, error) {
	q, args := `SELECT id, at, principal_id, principal_name, method, request, outcome FROM security_events
		WHERE ($1 = '' OR principal_id = $1) AND ($2 = '' OR method = $2) AND ($3 <= 0 OR id < $3)
		ORDER BY id DESC`, []any{f.PrincipalID, f.Method, f.BeforeID}
	if f.Limit > 0 {
		q, args = q+` LIMIT $4`, append(args, f.Limit)
	}
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.SecurityEvent, error) {
		var e store.SecurityEvent
		var req []byte
		err := r.Scan(&e.ID, scanTime(&e.At), &e.PrincipalID, &e.PrincipalName, &e.Method, &req, &e.Outcome)
		e.Request = req
		return e, err
	}, q, args...)
	if err != nil {
		return nil, s.f.Fail("list security events", err)
	}
	return out, nil
}
