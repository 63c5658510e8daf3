package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
)

// sessionColumns is the select list scanSession reads, last_seq included.
const sessionColumns = `session_id, workdir, mode, provider, model, agent, kind, parent_session_id,
	job_id, title, last_prompt, created_at, last_activity_at, closed, backend, owner,
	COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session_id = s.session_id), 0)`

// CreateSession inserts a session row.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	if err := sess.Validate(); err != nil {
		return err
	}
	var lastActivity sql.NullInt64
	if !sess.LastActivityAt.IsZero() {
		lastActivity = sql.NullInt64{Int64: micros(sess.LastActivityAt), Valid: true}
	}
	var backend sql.NullString
	if sess.Backend != nil {
		backend = sql.NullString{String: string(sess.Backend), Valid: true}
	}
	_, err := s.exec(ctx, `INSERT INTO sessions (session_id, workdir, mode, provider, model, agent,
		kind, parent_session_id, job_id, title, last_prompt, created_at, last_activity_at, closed, backend, owner)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sess.SessionID, sess.Workdir, sess.Mode, sess.Provider, sess.Model, sess.Agent,
		sess.Kind, sess.ParentSessionID, sess.JobID, sess.Title, sess.LastPrompt,
		micros(sess.CreatedAt), lastActivity, sess.Closed, backend, sess.Owner)
	return insertErr(err, "session "+sess.SessionID, "create session "+sess.SessionID)
}

// GetSession returns one session row.
func (s *Store) GetSession(ctx context.Context, sessionID string) (store.Session, error) {
	row := s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE session_id = ?`, sessionID)
	sess, err := scanSession(row)
	if err != nil {
		return store.Session{}, rowErr(err, "session "+sessionID, "get session "+sessionID)
	}
	return sess, nil
}

// ListSessions returns the matching sessions, newest first.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	var where []string
	var args []any
	if !f.IncludeClosed {
		where = append(where, "closed = 0")
	}
	if f.Workdir != "" {
		where = append(where, "workdir = ?")
		args = append(args, f.Workdir)
	}
	if f.VisibleTo != "" {
		where = append(where, "(owner = ? OR EXISTS (SELECT 1 FROM session_grants g WHERE g.session_id = s.session_id AND g.principal_id = ?))")
		args = append(args, f.VisibleTo, f.VisibleTo)
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions s`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, session_id DESC`
	out, err := queryAll(ctx, s.r, scanSession, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	return out, nil
}

func scanSession(sc scanner) (store.Session, error) {
	var (
		sess         store.Session
		created      int64
		lastActivity sql.NullInt64
		backend      sql.NullString
	)
	err := sc.Scan(&sess.SessionID, &sess.Workdir, &sess.Mode, &sess.Provider, &sess.Model, &sess.Agent,
		&sess.Kind, &sess.ParentSessionID, &sess.JobID, &sess.Title, &sess.LastPrompt,
		&created, &lastActivity, &sess.Closed, &backend, &sess.Owner, &sess.LastSeq)
	if err != nil {
		return store.Session{}, err
	}
	sess.CreatedAt = fromMicros(created)
	if lastActivity.Valid {
		sess.LastActivityAt = fromMicros(lastActivity.Int64)
	}
	if backend.Valid {
		sess.Backend = json.RawMessage(backend.String)
	}
	return sess, nil
}

// UpdateSession changes the fields set in u.
func (s *Store) UpdateSession(ctx context.Context, w store.Writer, sessionID string, u store.SessionUpdate) error {
	if err := u.Validate(); err != nil {
		return err
	}
	var set []string
	var args []any
	add := func(col string, v any) {
		set = append(set, col+" = ?")
		args = append(args, v)
	}
	if u.Mode != nil {
		add("mode", *u.Mode)
	}
	if u.Provider != nil {
		add("provider", *u.Provider)
	}
	if u.Model != nil {
		add("model", *u.Model)
	}
	if u.Title != nil {
		add("title", *u.Title)
	}
	if u.LastPrompt != nil {
		add("last_prompt", *u.LastPrompt)
	}
	if u.LastActivityAt != nil {
		var v sql.NullInt64
		if !u.LastActivityAt.IsZero() {
			v = sql.NullInt64{Int64: micros(*u.LastActivityAt), Valid: true}
		}
		add("last_activity_at", v)
	}
	if u.Closed != nil {
		add("closed", *u.Closed)
	}
	if u.Backend != nil {
		var v sql.NullString
		if *u.Backend != nil {
			v = sql.NullString{String: string(*u.Backend), Valid: true}
		}
		add("backend", v)
	}
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := checkFenced(ctx, tx, w, []string{sessionID}); err != nil {
			return err
		}
		if len(set) == 0 {
			ok, err := sessionExists(ctx, tx, sessionID)
			if ok {
				n = 1
			}
			return err
		}
		var err error
		n, err = execAffected(ctx, tx, `UPDATE sessions SET `+strings.Join(set, ", ")+` WHERE session_id = ?`,
			append(args, sessionID)...)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlite: update session %s: %w", sessionID, err)
	case n == 0:
		return fmt.Errorf("session %s: %w", sessionID, store.ErrNotFound)
	}
	return nil
}

// DeleteSessions deletes rows, events and history of the sessions in one
// transaction.
func (s *Store) DeleteSessions(ctx context.Context, w store.Writer, ids []string) (int, error) {
	deleted := 0
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		deleted = 0
		if err := checkFenced(ctx, tx, w, ids); err != nil {
			return err
		}
		seen := make(map[string]bool, len(ids))
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE session_id = ?`, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM history WHERE session_id = ?`, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM session_leases WHERE session_id = ?`, id); err != nil {
				return err
			}
			n, err := execAffected(ctx, tx, `DELETE FROM sessions WHERE session_id = ?`, id)
			if err != nil {
				return err
			}
			deleted += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete sessions: %w", err)
	}
	return deleted, nil
}
