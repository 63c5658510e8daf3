package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// CreatePrincipal inserts a principal.
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if err := p.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO principals (id, name, kind, role, created_at, agents, workdirs) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		p.ID, p.Name, p.Kind, p.Role, p.CreatedAt, limitsArray(p.Agents), limitsArray(p.Workdirs))
	return insertErr(err, "principal "+p.ID+" ("+p.Name+")", "create principal "+p.ID)
}

const principalCols = `id, name, kind, role, created_at, agents, workdirs`

func scanPrincipal(r pgx.Row) (store.Principal, error) {
	var p store.Principal
	err := r.Scan(&p.ID, &p.Name, &p.Kind, &p.Role, &p.CreatedAt, &p.Agents, &p.Workdirs)
	p.CreatedAt = p.CreatedAt.UTC()
	p.Agents, p.Workdirs = noLimit(p.Agents), noLimit(p.Workdirs)
	return p, err
}

// limitsArray is the stored form of a principal's agents or workdirs: the
// columns are NOT NULL, so none is an empty array.
func limitsArray(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// noLimit reads an empty array back as nil (no limit).
func noLimit(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	return list
}

type rowQueryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getPrincipal(ctx context.Context, q rowQueryer, id string, lock bool) (store.Principal, error) {
	query := `SELECT ` + principalCols + ` FROM principals WHERE id = $1`
	if lock {
		query += ` FOR UPDATE`
	}
	p, err := scanPrincipal(q.QueryRow(ctx, query, id))
	if err != nil {
		return p, rowErr(err, "principal "+id, "get principal "+id)
	}
	return p, nil
}

// GetPrincipal returns one principal.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return getPrincipal(ctx, s.pool, id, false)
}

// ListPrincipals returns every principal ordered by name.
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	out, err := queryAll(ctx, s.pool, scanPrincipal, `SELECT `+principalCols+` FROM principals ORDER BY name`)
	if err != nil {
		return nil, fail("list principals", err)
	}
	return out, nil
}

// otherAdmins counts the admin principals other than id, locking every
// admin row first: two transactions removing the last two admins at once
// are serialised, and the second sees the first's change.
func otherAdmins(ctx context.Context, tx pgx.Tx, id string) (int, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM principals WHERE role = $1 FOR UPDATE`, store.RoleAdmin)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range ids {
		if a != id {
			n++
		}
	}
	return n, nil
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Admin rows are locked before the principal's, as in
		// DeletePrincipal, so that the two cannot deadlock.
		others := -1
		if u.Role != nil && *u.Role != store.RoleAdmin {
			n, err := otherAdmins(ctx, tx, id)
			if err != nil {
				return err
			}
			others = n
		}
		p, err := getPrincipal(ctx, tx, id, true)
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
		if _, err := tx.Exec(ctx, `UPDATE principals SET name = $2, role = $3, agents = $4, workdirs = $5 WHERE id = $1`,
			id, p.Name, p.Role, limitsArray(p.Agents), limitsArray(p.Workdirs)); err != nil {
			return err
		}
		out = p
		return nil
	})
	switch {
	case isUniqueViolation(err):
		return store.Principal{}, fmt.Errorf("principal %s: name %q: %w", id, *u.Name, store.ErrConflict)
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLastAdmin) || errors.Is(err, store.ErrInvalid):
		return store.Principal{}, err
	case err != nil:
		return store.Principal{}, fail("update principal "+id, err)
	}
	return out, nil
}

// DeletePrincipal deletes a principal and its keys.
func (s *Store) DeletePrincipal(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		n, err := otherAdmins(ctx, tx, id)
		if err != nil {
			return err
		}
		p, err := getPrincipal(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if p.Role == store.RoleAdmin && n == 0 {
			return fmt.Errorf("principal %s (%s) is the last admin: deleting it %w", id, p.Name, store.ErrLastAdmin)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM api_keys WHERE principal_id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM principals WHERE id = $1`, id)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLastAdmin):
		return err
	case err != nil:
		return fail("delete principal "+id, err)
	}
	return nil
}

// CreateKey inserts an API key of an existing principal.
func (s *Store) CreateKey(ctx context.Context, k store.APIKey) error {
	if err := k.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (id, principal_id, name, key_hash, prefix, created_at, expires_at, revoked_at, rate_per_second, max_running_sessions)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		k.ID, k.PrincipalID, k.Name, k.Hash, k.Prefix, k.CreatedAt, nullTime(k.ExpiresAt), nullTime(k.RevokedAt), k.RatePerSecond, k.MaxRunningSessions)
	switch {
	case isForeignKeyViolation(err):
		return fmt.Errorf("key %s: principal %s: %w", k.ID, k.PrincipalID, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("key %s: %w", k.ID, store.ErrConflict)
	case err != nil:
		return fail("create key "+k.ID, err)
	}
	return nil
}

const keyCols = `k.id, k.principal_id, k.name, k.key_hash, k.prefix, k.created_at, k.expires_at, k.revoked_at, k.rate_per_second, k.max_running_sessions`

func scanKey(r pgx.Row, extra ...any) (store.APIKey, error) {
	var k store.APIKey
	var expires, revoked *time.Time
	err := r.Scan(append([]any{&k.ID, &k.PrincipalID, &k.Name, &k.Hash, &k.Prefix, &k.CreatedAt, &expires, &revoked, &k.RatePerSecond, &k.MaxRunningSessions}, extra...)...)
	k.CreatedAt = k.CreatedAt.UTC()
	if expires != nil {
		k.ExpiresAt = expires.UTC()
	}
	if revoked != nil {
		k.RevokedAt = revoked.UTC()
	}
	return k, err
}

// ListKeys returns the keys of one principal or of all, oldest first.
func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.APIKey, error) {
	out, err := queryAll(ctx, s.pool, func(row pgx.Row) (store.APIKey, error) { return scanKey(row) },
		`SELECT `+keyCols+` FROM api_keys k
		WHERE $1 = '' OR k.principal_id = $1 ORDER BY k.created_at, k.id`, principalID)
	if err != nil {
		return nil, fail("list keys", err)
	}
	return out, nil
}

// RevokeKey marks a key revoked (once: a second revocation keeps the first time).
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `UPDATE api_keys k SET revoked_at = COALESCE(k.revoked_at, $2)
		WHERE k.id = $1 RETURNING `+keyCols, id, at))
	if err != nil {
		return store.APIKey{}, rowErr(err, "key "+id, "revoke key "+id)
	}
	return k, nil
}

// KeyByHash finds a key and its principal by the hash of its secret.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Principal, error) {
	var p store.Principal
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+`, p.id, p.name, p.kind, p.role, p.created_at, p.agents, p.workdirs
		FROM api_keys k JOIN principals p ON p.id = k.principal_id WHERE k.key_hash = $1`, hash),
		&p.ID, &p.Name, &p.Kind, &p.Role, &p.CreatedAt, &p.Agents, &p.Workdirs)
	p.CreatedAt = p.CreatedAt.UTC()
	p.Agents, p.Workdirs = noLimit(p.Agents), noLimit(p.Workdirs)
	if err != nil {
		return store.APIKey{}, store.Principal{}, rowErr(err, "key", "find key")
	}
	return k, p, nil
}

// ShareSession inserts or replaces a principal's grant on a session.
func (s *Store) ShareSession(ctx context.Context, g store.Grant) error {
	if !store.ValidGrant(g.Role) {
		return fmt.Errorf("grant on %s: unknown role %q: %w", g.SessionID, g.Role, store.ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO session_grants (session_id, principal_id, role, granted_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_id, principal_id) DO UPDATE SET role = excluded.role, granted_at = excluded.granted_at`,
		g.SessionID, g.PrincipalID, g.Role, g.GrantedAt)
	switch {
	case isForeignKeyViolation(err):
		return fmt.Errorf("grant on %s to %s: the session or the principal: %w", g.SessionID, g.PrincipalID, store.ErrNotFound)
	case err != nil:
		return fail("share session "+g.SessionID, err)
	}
	return nil
}

// UnshareSession removes a principal's grant on a session.
func (s *Store) UnshareSession(ctx context.Context, sessionID, principalID string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM session_grants WHERE session_id = $1 AND principal_id = $2`, sessionID, principalID)
	if err != nil {
		return fail("unshare session "+sessionID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("grant on %s to %s: %w", sessionID, principalID, store.ErrNotFound)
	}
	return nil
}

func scanGrant(r pgx.Row) (store.Grant, error) {
	var g store.Grant
	err := r.Scan(&g.SessionID, &g.PrincipalID, &g.Role, &g.GrantedAt)
	g.GrantedAt = g.GrantedAt.UTC()
	return g, err
}

// SessionGrant returns one principal's grant on a session.
func (s *Store) SessionGrant(ctx context.Context, sessionID, principalID string) (store.Grant, error) {
	g, err := scanGrant(s.pool.QueryRow(ctx, `SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = $1 AND principal_id = $2`, sessionID, principalID))
	if err != nil {
		return store.Grant{}, rowErr(err, "grant on "+sessionID+" to "+principalID, "session grant")
	}
	return g, nil
}

// ListGrants returns a session's grants.
func (s *Store) ListGrants(ctx context.Context, sessionID string) ([]store.Grant, error) {
	out, err := queryAll(ctx, s.pool, scanGrant,
		`SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = $1 ORDER BY principal_id`, sessionID)
	if err != nil {
		return nil, fail("list grants", err)
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
	err := s.pool.QueryRow(ctx, `INSERT INTO security_events (at, principal_id, principal_name, method, request, outcome)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		e.At, e.PrincipalID, e.PrincipalName, e.Method, string(e.Request), e.Outcome).Scan(&id)
	if err != nil {
		return 0, fail("append security event", err)
	}
	return id, nil
}

// ListSecurityEvents returns the matching events, newest first.
func (s *Store) ListSecurityEvents(ctx context.Context, f store.SecurityEventFilter) ([]store.SecurityEvent, error) {
	var lim *int
	if f.Limit > 0 {
		lim = &f.Limit
	}
	out, err := queryAll(ctx, s.pool, func(row pgx.Row) (store.SecurityEvent, error) {
		var e store.SecurityEvent
		var req string
		err := row.Scan(&e.ID, &e.At, &e.PrincipalID, &e.PrincipalName, &e.Method, &req, &e.Outcome)
		e.At, e.Request = e.At.UTC(), json.RawMessage(req)
		return e, err
	}, `SELECT id, at, principal_id, principal_name, method, request::text, outcome FROM security_events
		WHERE ($1 = '' OR principal_id = $1) AND ($2 = '' OR method = $2) AND ($3 <= 0 OR id < $3)
		ORDER BY id DESC LIMIT $4`, f.PrincipalID, f.Method, f.BeforeID, lim)
	if err != nil {
		return nil, fail("list security events", err)
	}
	return out, nil
}
