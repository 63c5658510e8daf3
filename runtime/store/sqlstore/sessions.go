package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
)

// sessionColumns is the select list scanSession reads, last_seq included.
const sessionColumns = `session_id, workdir, mode, provider, model, agent, kind, parent_session_id,
	job_id, title, last_prompt, created_at, last_activity_at, closed, backend, owner, archived, workspace,
	COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session_id = s.session_id), 0)`

// CreateSession inserts a session row.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	if err := sess.Validate(); err != nil {
		return err
	}
	err := s.write(ctx, func(q Querier) error { return s.insertSession(ctx, q, sess) })
	return s.f.InsertErr(err, "session "+sess.SessionID, "create session "+sess.SessionID)
}

func (s *Store) insertSession(ctx context.Context, q Querier, sess store.Session) error {
	_, err := q.ExecContext(ctx, `INSERT INTO sessions (session_id, workdir, mode, provider, model, agent,
		kind, parent_session_id, job_id, title, last_prompt, created_at, last_activity_at, closed, backend, owner, archived, workspace)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
		sess.SessionID, sess.Workdir, sess.Mode, sess.Provider, sess.Model, sess.Agent,
		sess.Kind, sess.ParentSessionID, sess.JobID, sess.Title, sess.LastPrompt,
		s.f.Time(sess.CreatedAt), s.f.nullTime(sess.LastActivityAt), sess.Closed, nullJSON(sess.Backend), sess.Owner, sess.Archived, sess.Workspace)
	return err
}

// GetSession returns one session row.
func (s *Store) GetSession(ctx context.Context, sessionID string) (store.Session, error) {
	row := s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE session_id = $1`, sessionID)
	sess, err := scanSession(row)
	if err != nil {
		return store.Session{}, s.f.RowErr(err, "session "+sessionID, "get session "+sessionID)
	}
	return sess, nil
}

// ListSessions returns the matching sessions, newest first.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	var where []string
	var args []any
	if !f.IncludeClosed {
		where = append(where, "NOT closed")
	}
	if f.Archived {
		where = append(where, "archived")
	} else {
		where = append(where, "NOT archived")
	}
	if f.Workdir != "" {
		args = append(args, f.Workdir)
		where = append(where, "workdir = $"+strconv.Itoa(len(args)))
	}
	if f.VisibleTo != "" {
		args = append(args, f.VisibleTo)
		n := strconv.Itoa(len(args))
		where = append(where, "(owner = $"+n+" OR EXISTS (SELECT 1 FROM session_grants g WHERE g.session_id = s.session_id AND g.principal_id = $"+n+"))")
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions s`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, session_id DESC`
	out, err := QueryAll(ctx, s.r, scanSession, q, args...)
	if err != nil {
		return nil, s.f.Fail("list sessions", err)
	}
	return out, nil
}

func scanSession(r Scanner) (store.Session, error) {
	var (
		sess    store.Session
		backend []byte
	)
	err := r.Scan(&sess.SessionID, &sess.Workdir, &sess.Mode, &sess.Provider, &sess.Model, &sess.Agent,
		&sess.Kind, &sess.ParentSessionID, &sess.JobID, &sess.Title, &sess.LastPrompt,
		scanTime(&sess.CreatedAt), scanTime(&sess.LastActivityAt), &sess.Closed, &backend, &sess.Owner, &sess.Archived, &sess.Workspace, &sess.LastSeq)
	if err != nil {
		return store.Session{}, err
	}
	sess.Backend = backend // NULL scans as nil
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
		args = append(args, v)
		set = append(set, col+" = $"+strconv.Itoa(len(args)))
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
		add("last_activity_at", s.f.nullTime(*u.LastActivityAt))
	}
	if u.Closed != nil {
		add("closed", *u.Closed)
	}
	if u.Archived != nil {
		add("archived", *u.Archived)
	}
	if u.Backend != nil {
		add("backend", nullJSON(*u.Backend))
	}
	var found bool
	err := s.fenced(ctx, w, []string{sessionID}, func(q Querier) error {
		if len(set) == 0 {
			return q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = $1)`, sessionID).Scan(&found)
		}
		args = append(args, sessionID)
		n, err := affected(ctx, q, `UPDATE sessions SET `+strings.Join(set, ", ")+
			` WHERE session_id = $`+strconv.Itoa(len(args)), args...)
		found = n > 0
		return err
	})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return err
	case err != nil:
		return s.f.Fail("update session "+sessionID, err)
	case !found:
		return fmt.Errorf("session %s: %w", sessionID, store.ErrNotFound)
	}
	return nil
}

// DeleteSessions deletes rows, events, history and leases of the sessions
// in one transaction.
func (s *Store) DeleteSessions(ctx context.Context, w store.Writer, ids []string) (int, error) {
	if ids == nil {
		ids = []string{} // no session: not a write of every fence of w
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var deleted int64
	list := s.f.List(ids)
	in := `session_id IN (SELECT v FROM ` + s.f.ListRows("$1") + `)`
	if s.files != nil {
		s.files.mu.Lock()
		defer s.files.mu.Unlock()
	}
	// A fenced id whose lease went to another daemon refuses the whole
	// delete.
	err := s.fencedTx(ctx, w, ids, func(ctx context.Context, tx Tx) error {
		// Lock the rows first, in a fixed order: an append racing with the
		// delete then either commits before it (and its rows go too) or
		// waits and fails on the foreign key, never leaving orphans; two
		// overlapping deletes cannot deadlock.
		if s.f.ForUpdate != "" {
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM sessions WHERE `+in+` ORDER BY session_id`+s.f.ForUpdate, list); err != nil {
				return err
			}
		}
		for _, table := range []string{"events", "history", "history_journal", "session_leases"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE `+in, list); err != nil {
				return err
			}
		}
		var err error
		deleted, err = affected(ctx, tx, `DELETE FROM sessions WHERE `+in, list)
		return err
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return 0, err
	}
	if err != nil {
		return 0, s.f.Fail("delete sessions", err)
	}
	if s.files != nil {
		s.files.removeSessions(ids)
	}
	return int(deleted), nil
}
