package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
)

// AppendHistory adds msgs at the end of the session's history.
func (s *Store) AppendHistory(ctx context.Context, w store.Writer, sessionID string, msgs []json.RawMessage) error {
	return s.writeHistory(ctx, w, "append history", sessionID, msgs, func(tx *sql.Tx) (int64, error) {
		var last int64
		err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(idx), 0) FROM history WHERE session_id = ?`, sessionID).Scan(&last)
		return last, err
	})
}

// LoadHistory returns the session's history in order.
func (s *Store) LoadHistory(ctx context.Context, sessionID string) ([]json.RawMessage, error) {
	out, err := queryAll(ctx, s.r, func(r scanner) (json.RawMessage, error) {
		var m []byte
		err := r.Scan(&m)
		return m, err
	}, `SELECT message FROM history WHERE session_id = ? ORDER BY idx`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: load history of %s: %w", sessionID, err)
	}
	return out, nil
}

// ReplaceHistory swaps the session's history for msgs in one transaction.
func (s *Store) ReplaceHistory(ctx context.Context, w store.Writer, sessionID string, msgs []json.RawMessage) error {
	return s.writeHistory(ctx, w, "replace history", sessionID, msgs, func(tx *sql.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `DELETE FROM history WHERE session_id = ?`, sessionID)
		return 0, err
	})
}

// writeHistory is AppendHistory and ReplaceHistory: in one write
// transaction that checked w's fence on the session, prepare makes room and returns the
// index msgs go after; op names the write in errors.
func (s *Store) writeHistory(ctx context.Context, w store.Writer, op, sessionID string, msgs []json.RawMessage, prepare func(tx *sql.Tx) (last int64, err error)) error {
	if err := store.ValidateHistory(sessionID, msgs); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := checkFenced(ctx, tx, w, []string{sessionID}); err != nil {
			return err
		}
		last, err := prepare(tx)
		if err != nil {
			return err
		}
		return insertHistory(ctx, tx, sessionID, last, msgs)
	})
	return historyErr(op, sessionID, err)
}

var errNoSession = errors.New("no such session")

// insertHistory checks that the session exists (also when msgs is empty)
// and inserts msgs with indexes after last.
func insertHistory(ctx context.Context, tx *sql.Tx, sessionID string, last int64, msgs []json.RawMessage) error {
	ok, err := sessionExists(ctx, tx, sessionID)
	if err != nil {
		return err
	}
	if !ok {
		return errNoSession
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO history (session_id, idx, message) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, m := range msgs {
		if _, err := stmt.ExecContext(ctx, sessionID, last+int64(i)+1, string(m)); err != nil {
			return err
		}
	}
	return nil
}

func historyErr(op, sessionID string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoSession) || isForeignKeyViolation(err):
		return fmt.Errorf("session %s: %w", sessionID, store.ErrNotFound)
	}
	return fmt.Errorf("sqlite: %s of %s: %w", op, sessionID, err)
}

// AddPattern inserts an allowlist pattern unless the same entry exists
// (the unique index allowlist_entry decides) and returns the stored entry's
// id. Both statements run on the one write connection, so nothing comes
// between them.
func (s *Store) AddPattern(ctx context.Context, p store.Pattern) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	var id string
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO allowlist (pattern_id, pattern, scope, workdir, session_id, created_at, principal_id, principal_name)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pattern, scope, workdir, session_id) DO NOTHING`,
			p.PatternID, p.Pattern, p.Scope, p.Workdir, p.SessionID, micros(p.CreatedAt), p.PrincipalID, p.PrincipalName)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			id = p.PatternID
			return nil
		}
		return tx.QueryRowContext(ctx, `SELECT pattern_id FROM allowlist WHERE pattern = ? AND scope = ? AND workdir = ? AND session_id = ?`,
			p.Pattern, p.Scope, p.Workdir, p.SessionID).Scan(&id)
	})
	switch {
	case isUniqueViolation(err):
		return "", fmt.Errorf("pattern %s: %w", p.PatternID, store.ErrConflict)
	case err != nil:
		return "", fmt.Errorf("sqlite: add pattern %s: %w", p.PatternID, err)
	}
	return id, nil
}

// ListPatterns returns the matching patterns, oldest first.
func (s *Store) ListPatterns(ctx context.Context, f store.PatternFilter) ([]store.Pattern, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"scope", f.Scope}, {"workdir", f.Workdir}, {"session_id", f.SessionID}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	q := `SELECT pattern_id, pattern, scope, workdir, session_id, created_at, principal_id, principal_name FROM allowlist`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at, pattern_id`
	out, err := queryAll(ctx, s.r, func(r scanner) (store.Pattern, error) {
		var p store.Pattern
		var created int64
		err := r.Scan(&p.PatternID, &p.Pattern, &p.Scope, &p.Workdir, &p.SessionID, &created, &p.PrincipalID, &p.PrincipalName)
		p.CreatedAt = fromMicros(created)
		return p, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list patterns: %w", err)
	}
	return out, nil
}

// RemovePattern deletes one allowlist pattern.
func (s *Store) RemovePattern(ctx context.Context, patternID string) error {
	res, err := s.exec(ctx, `DELETE FROM allowlist WHERE pattern_id = ?`, patternID)
	if err != nil {
		return fmt.Errorf("sqlite: remove pattern %s: %w", patternID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: remove pattern %s: %w", patternID, err)
	} else if n == 0 {
		return fmt.Errorf("pattern %s: %w", patternID, store.ErrNotFound)
	}
	return nil
}

// AppendAudit appends one approval resolution and returns its id.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	res, err := s.exec(ctx, `INSERT INTO approval_audit (request_id, session_id, tool, args, decision,
		scope, by_whom, reason, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.RequestID, e.SessionID, e.Tool, jsonText(e.Args), e.Decision, e.Scope, e.By, e.Reason, micros(e.At))
	if err != nil {
		return 0, fmt.Errorf("sqlite: append audit entry for %s: %w", e.RequestID, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("sqlite: append audit entry for %s: %w", e.RequestID, err)
	}
	return id, nil
}

// ListAudit returns the session's audit entries ("" = all) in id order.
func (s *Store) ListAudit(ctx context.Context, sessionID string) ([]store.AuditEntry, error) {
	q := `SELECT id, request_id, session_id, tool, args, decision, scope, by_whom, reason, at FROM approval_audit`
	var args []any
	if sessionID != "" {
		q += ` WHERE session_id = ?`
		args = append(args, sessionID)
	}
	out, err := queryAll(ctx, s.r, func(r scanner) (store.AuditEntry, error) {
		var e store.AuditEntry
		var argsJSON []byte
		var at int64
		err := r.Scan(&e.ID, &e.RequestID, &e.SessionID, &e.Tool, &argsJSON, &e.Decision,
			&e.Scope, &e.By, &e.Reason, &at)
		e.Args = argsJSON
		e.At = fromMicros(at)
		return e, err
	}, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list audit: %w", err)
	}
	return out, nil
}

// PutSetting inserts or replaces a setting.
func (s *Store) PutSetting(ctx context.Context, w store.Writer, namespace, key string, value json.RawMessage) error {
	if err := (store.Setting{Namespace: namespace, Key: key, Value: value}).Validate(); err != nil {
		return err
	}
	const put = `INSERT INTO settings (namespace, key, value) VALUES (?, ?, ?)
		ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value`
	var err error
	if w.IsUnfenced() {
		_, err = s.exec(ctx, put, namespace, key, jsonText(value))
	} else {
		err = s.writeTx(ctx, func(tx *sql.Tx) error {
			if err := checkAllFences(ctx, tx, w); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, put, namespace, key, jsonText(value))
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("sqlite: put setting %s/%s: %w", namespace, key, err)
	}
	return nil
}

// GetSetting returns one setting's value.
func (s *Store) GetSetting(ctx context.Context, namespace, key string) (json.RawMessage, error) {
	var v []byte
	err := s.r.QueryRowContext(ctx, `SELECT value FROM settings WHERE namespace = ? AND key = ?`, namespace, key).Scan(&v)
	if err != nil {
		return nil, rowErr(err, "setting "+namespace+"/"+key, "get setting "+namespace+"/"+key)
	}
	return v, nil
}

// ListSettings returns a namespace's settings ordered by key.
func (s *Store) ListSettings(ctx context.Context, namespace string) ([]store.Setting, error) {
	out, err := queryAll(ctx, s.r, func(r scanner) (store.Setting, error) {
		st := store.Setting{Namespace: namespace}
		var v []byte
		err := r.Scan(&st.Key, &v)
		st.Value = v
		return st, err
	}, `SELECT key, value FROM settings WHERE namespace = ? ORDER BY key`, namespace)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list settings %s: %w", namespace, err)
	}
	return out, nil
}

// DeleteSetting removes one setting.
func (s *Store) DeleteSetting(ctx context.Context, w store.Writer, namespace, key string) error {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := checkAllFences(ctx, tx, w); err != nil {
			return err
		}
		var err error
		n, err = execAffected(ctx, tx, `DELETE FROM settings WHERE namespace = ? AND key = ?`, namespace, key)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete setting %s/%s: %w", namespace, key, err)
	}
	if n == 0 {
		return fmt.Errorf("setting %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	return nil
}
