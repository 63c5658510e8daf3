package sqlite

import (
	"context"
	"database/sql"
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
	_, err := s.exec(ctx, `INSERT INTO principals (id, name, kind, role, created_at, agents, workdirs) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.Name, p.Kind, p.Role, micros(p.CreatedAt), limitsJSON(p.Agents), limitsJSON(p.Workdirs))
	return insertErr(err, "principal "+p.ID+" ("+p.Name+")", "create principal "+p.ID)
}

const principalCols = `id, name, kind, role, created_at, agents, workdirs`

func scanPrincipal(r scanner) (store.Principal, error) {
	var p store.Principal
	var created int64
	var agents, workdirs string
	err := r.Scan(&p.ID, &p.Name, &p.Kind, &p.Role, &created, &agents, &workdirs)
	if err != nil {
		return p, err
	}
	p.CreatedAt = fromMicros(created)
	if p.Agents, err = limitsFrom(agents); err != nil {
		return p, fmt.Errorf("principal %s: agents: %w", p.ID, err)
	}
	if p.Workdirs, err = limitsFrom(workdirs); err != nil {
		return p, fmt.Errorf("principal %s: workdirs: %w", p.ID, err)
	}
	return p, nil
}

// limitsJSON is the stored form of a principal's agents or workdirs.
func limitsJSON(list []string) string {
	if len(list) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(list) // strings always marshal
	return string(b)
}

// limitsFrom reads limitsJSON's form back; [] is nil (no limit).
func limitsFrom(s string) ([]string, error) {
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// GetPrincipal returns one principal.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return getPrincipal(ctx, s.r, id)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getPrincipal(ctx context.Context, q queryer, id string) (store.Principal, error) {
	p, err := scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalCols+` FROM principals WHERE id = ?`, id))
	if err != nil {
		return p, rowErr(err, "principal "+id, "get principal "+id)
	}
	return p, nil
}

// ListPrincipals returns every principal ordered by name.
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	out, err := queryAll(ctx, s.r, scanPrincipal, `SELECT `+principalCols+` FROM principals ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list principals: %w", err)
	}
	return out, nil
}

// otherAdmins counts the admin principals other than id, inside tx (the
// one write connection: nothing changes between the count and the write).
func otherAdmins(ctx context.Context, tx *sql.Tx, id string) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM principals WHERE role = ? AND id <> ?`, store.RoleAdmin, id).Scan(&n)
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
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		p, err := getPrincipal(ctx, tx, id)
		if err != nil {
			return err
		}
		if u.Role != nil && p.Role == store.RoleAdmin && *u.Role != store.RoleAdmin {
			n, err := otherAdmins(ctx, tx, id)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("principal %s (%s) is the last admin: changing its role %w", id, p.Name, store.ErrLastAdmin)
			}
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
		if _, err := tx.ExecContext(ctx, `UPDATE principals SET name = ?, role = ?, agents = ?, workdirs = ? WHERE id = ?`,
			p.Name, p.Role, limitsJSON(p.Agents), limitsJSON(p.Workdirs), id); err != nil {
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
		return store.Principal{}, fmt.Errorf("sqlite: update principal %s: %w", id, err)
	}
	return out, nil
}

// DeletePrincipal deletes a principal and its keys.
func (s *Store) DeletePrincipal(ctx context.Context, id string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		p, err := getPrincipal(ctx, tx, id)
		if err != nil {
			return err
		}
		if p.Role == store.RoleAdmin {
			n, err := otherAdmins(ctx, tx, id)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("principal %s (%s) is the last admin: deleting it %w", id, p.Name, store.ErrLastAdmin)
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE principal_id = ?`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM principals WHERE id = ?`, id)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLastAdmin):
		return err
	case err != nil:
		return fmt.Errorf("sqlite: delete principal %s: %w", id, err)
	}
	return nil
}

// nullMicros is the stored form of an optional time: zero becomes NULL.
func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// CreateKey inserts an API key of an existing principal.
func (s *Store) CreateKey(ctx context.Context, k store.APIKey) error {
	if err := k.Validate(); err != nil {
		return err
	}
	_, err := s.exec(ctx, `INSERT INTO api_keys (id, principal_id, name, key_hash, prefix, created_at, expires_at, revoked_at, rate_per_second, max_running_sessions)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.PrincipalID, k.Name, k.Hash, k.Prefix, micros(k.CreatedAt), nullMicros(k.ExpiresAt), nullMicros(k.RevokedAt), k.RatePerSecond, k.MaxRunningSessions)
	switch {
	case isForeignKeyViolation(err):
		return fmt.Errorf("key %s: principal %s: %w", k.ID, k.PrincipalID, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("key %s: %w", k.ID, store.ErrConflict)
	case err != nil:
		return fmt.Errorf("sqlite: create key %s: %w", k.ID, err)
	}
	return nil
}

const keyCols = `k.id, k.principal_id, k.name, k.key_hash, k.prefix, k.created_at, k.expires_at, k.revoked_at, k.rate_per_second, k.max_running_sessions`

func scanKey(r scanner, extra ...any) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	var expires, revoked sql.NullInt64
	err := r.Scan(append([]any{&k.ID, &k.PrincipalID, &k.Name, &k.Hash, &k.Prefix, &created, &expires, &revoked, &k.RatePerSecond, &k.MaxRunningSessions}, extra...)...)
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = fromMicros(created), fromNullMicros(expires), fromNullMicros(revoked)
	return k, err
}

// ListKeys returns the keys of one principal or of all, oldest first.
func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.APIKey, error) {
	out, err := queryAll(ctx, s.r, func(r scanner) (store.APIKey, error) { return scanKey(r) },
		`SELECT `+keyCols+` FROM api_keys k
		WHERE ?1 = '' OR k.principal_id = ?1 ORDER BY k.created_at, k.id`, principalID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list keys: %w", err)
	}
	return out, nil
}

// RevokeKey marks a key revoked (once: a second revocation keeps the first time).
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	var out store.APIKey
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, micros(at), id); err != nil {
			return err
		}
		k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys k WHERE k.id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("key %s: %w", id, store.ErrNotFound)
		}
		out = k
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, err
	case err != nil:
		return store.APIKey{}, fmt.Errorf("sqlite: revoke key %s: %w", id, err)
	}
	return out, nil
}

// KeyByHash finds a key and its principal by the hash of its secret.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Principal, error) {
	var p store.Principal
	var created int64
	var agents, workdirs string
	k, err := scanKey(s.r.QueryRowContext(ctx, `SELECT `+keyCols+`, p.id, p.name, p.kind, p.role, p.created_at, p.agents, p.workdirs
		FROM api_keys k JOIN principals p ON p.id = k.principal_id WHERE k.key_hash = ?`, hash),
		&p.ID, &p.Name, &p.Kind, &p.Role, &created, &agents, &workdirs)
	p.CreatedAt = fromMicros(created)
	if err == nil {
		if p.Agents, err = limitsFrom(agents); err == nil {
			p.Workdirs, err = limitsFrom(workdirs)
		}
	}
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
	_, err := s.exec(ctx, `INSERT INTO session_grants (session_id, principal_id, role, granted_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (session_id, principal_id) DO UPDATE SET role = excluded.role, granted_at = excluded.granted_at`,
		g.SessionID, g.PrincipalID, g.Role, micros(g.GrantedAt))
	switch {
	case isForeignKeyViolation(err):
		return fmt.Errorf("grant on %s to %s: the session or the principal: %w", g.SessionID, g.PrincipalID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("sqlite: share session %s: %w", g.SessionID, err)
	}
	return nil
}

// UnshareSession removes a principal's grant on a session.
func (s *Store) UnshareSession(ctx context.Context, sessionID, principalID string) error {
	res, err := s.exec(ctx, `DELETE FROM session_grants WHERE session_id = ? AND principal_id = ?`, sessionID, principalID)
	if err != nil {
		return fmt.Errorf("sqlite: unshare session %s: %w", sessionID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: unshare session %s: %w", sessionID, err)
	} else if n == 0 {
		return fmt.Errorf("grant on %s to %s: %w", sessionID, principalID, store.ErrNotFound)
	}
	return nil
}

func scanGrant(r scanner) (store.Grant, error) {
	var g store.Grant
	var at int64
	err := r.Scan(&g.SessionID, &g.PrincipalID, &g.Role, &at)
	g.GrantedAt = fromMicros(at)
	return g, err
}

// SessionGrant returns one principal's grant on a session.
func (s *Store) SessionGrant(ctx context.Context, sessionID, principalID string) (store.Grant, error) {
	g, err := scanGrant(s.r.QueryRowContext(ctx, `SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = ? AND principal_id = ?`, sessionID, principalID))
	if err != nil {
		return store.Grant{}, rowErr(err, "grant on "+sessionID+" to "+principalID, "session grant")
	}
	return g, nil
}

// ListGrants returns a session's grants.
func (s *Store) ListGrants(ctx context.Context, sessionID string) ([]store.Grant, error) {
	out, err := queryAll(ctx, s.r, scanGrant, `SELECT session_id, principal_id, role, granted_at FROM session_grants
		WHERE session_id = ? ORDER BY principal_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list grants: %w", err)
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
	res, err := s.exec(ctx, `INSERT INTO security_events (at, principal_id, principal_name, method, request, outcome) VALUES (?, ?, ?, ?, ?, ?)`,
		micros(e.At), e.PrincipalID, e.PrincipalName, e.Method, string(e.Request), e.Outcome)
	if err != nil {
		return 0, fmt.Errorf("sqlite: append security event: %w", err)
	}
	return res.LastInsertId()
}

// ListSecurityEvents returns the matching events, newest first.
func (s *Store) ListSecurityEvents(ctx context.Context, f store.SecurityEventFilter) ([]store.SecurityEvent, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	out, err := queryAll(ctx, s.r, func(r scanner) (store.SecurityEvent, error) {
		var e store.SecurityEvent
		var at int64
		var req string
		err := r.Scan(&e.ID, &at, &e.PrincipalID, &e.PrincipalName, &e.Method, &req, &e.Outcome)
		e.At, e.Request = fromMicros(at), json.RawMessage(req)
		return e, err
	}, `SELECT id, at, principal_id, principal_name, method, request, outcome FROM security_events
		WHERE (?1 = '' OR principal_id = ?1) AND (?2 = '' OR method = ?2) AND (?3 <= 0 OR id < ?3)
		ORDER BY id DESC LIMIT ?4`, f.PrincipalID, f.Method, f.BeforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list security events: %w", err)
	}
	return out, nil
}
