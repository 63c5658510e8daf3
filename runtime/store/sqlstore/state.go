package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
)

// AppendHistory adds msgs at the end of the session's history.
func (s *Store) AppendHistory(ctx context.Context, w store.Writer, sessionID string, msgs []json.RawMessage) error {
	return s.writeHistory(ctx, w, "append history", sessionID, msgs, func(tx Tx) (int64, error) {
		var last int64
		err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(idx), 0) FROM history WHERE session_id = $1`, sessionID).Scan(&last)
		return last, err
	})
}

// LoadHistory returns the session's history in order.
func (s *Store) LoadHistory(ctx context.Context, sessionID string) ([]json.RawMessage, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (json.RawMessage, error) {
		var m []byte
		err := r.Scan(&m)
		return m, err
	}, `SELECT message FROM history WHERE session_id = $1 ORDER BY idx`, sessionID)
	if err != nil {
		return nil, s.f.Fail("load history of "+sessionID, err)
	}
	return out, nil
}

// ReplaceHistory swaps the session's history for msgs in one transaction.
func (s *Store) ReplaceHistory(ctx context.Context, w store.Writer, sessionID string, msgs []json.RawMessage) error {
	return s.writeHistory(ctx, w, "replace history", sessionID, msgs, func(tx Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `DELETE FROM history WHERE session_id = $1`, sessionID)
		return 0, err
	})
}

var errNoSession = errors.New("no such session")

// journalHistory records, in tx, a write of msgs to the session's history
// with the seq of its latest stored event. A session's first journaled
// write records the history it had before as a base row: of seq 0 when
// that history is empty (the session started with none), else of the
// current seq, before which its history is unknown.
func (s *Store) journalHistory(ctx context.Context, tx Tx, sessionID string, replace bool, msgs []json.RawMessage) error {
	var seq, n int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`, sessionID).Scan(&seq); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(n), 0) FROM history_journal WHERE session_id = $1`, sessionID).Scan(&n); err != nil {
		return err
	}
	insert := func(n, seq int64, op string, msgs []json.RawMessage) error {
		if msgs == nil {
			msgs = []json.RawMessage{}
		}
		b, err := json.Marshal(msgs)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO history_journal (session_id, n, seq, op, messages) VALUES ($1, $2, $3, $4, $5)`,
			sessionID, n, seq, op, string(b))
		return err
	}
	if n == 0 {
		before, err := QueryAll(ctx, tx, func(r Scanner) (json.RawMessage, error) {
			var m []byte
			err := r.Scan(&m)
			return m, err
		}, `SELECT message FROM history WHERE session_id = $1 ORDER BY idx`, sessionID)
		if err != nil {
			return err
		}
		baseSeq := seq
		if len(before) == 0 {
			baseSeq = 0
		}
		n++
		if err := insert(n, baseSeq, store.JournalBase, before); err != nil {
			return err
		}
	}
	op := store.JournalAppend
	if replace {
		op = store.JournalReplace
	}
	return insert(n+1, seq, op, msgs)
}

// HistoryAt replays the session's history journal up to seq.
func (s *Store) HistoryAt(ctx context.Context, sessionID string, seq int64) ([]json.RawMessage, error) {
	rows, err := s.HistoryJournal(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		// Never written: a history that is empty now was empty throughout.
		cur, err := s.LoadHistory(ctx, sessionID)
		if err != nil || len(cur) == 0 {
			return nil, err
		}
		return nil, fmt.Errorf("history of %s at seq %d: %w", sessionID, seq, store.ErrHistoryUnknown)
	}
	if rows[0].Seq > seq {
		return nil, fmt.Errorf("history of %s at seq %d (its journal begins at %d): %w", sessionID, seq, rows[0].Seq, store.ErrHistoryUnknown)
	}
	var out []json.RawMessage
	for _, e := range rows {
		if e.Seq > seq {
			break
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(e.Messages, &msgs); err != nil {
			return nil, fmt.Errorf("history journal of %s: %w", sessionID, err)
		}
		if e.Op == store.JournalAppend {
			out = append(out, msgs...)
		} else {
			out = msgs
		}
	}
	return out, nil
}

// HistoryJournal returns the session's journal entries by N.
func (s *Store) HistoryJournal(ctx context.Context, sessionID string) ([]store.JournalEntry, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.JournalEntry, error) {
		var e store.JournalEntry
		var msgs []byte
		err := r.Scan(&e.N, &e.Seq, &e.Op, &msgs)
		e.Messages = msgs
		return e, err
	}, `SELECT n, seq, op, messages FROM history_journal WHERE session_id = $1 ORDER BY n`, sessionID)
	if err != nil {
		return nil, s.f.Fail("read the history journal of "+sessionID, err)
	}
	return out, nil
}

// writeHistory is AppendHistory and ReplaceHistory: in one transaction that
// checked w's fence on the session and locked the session's row, prepare makes room and
// returns the index msgs go after; op names the write in errors.
func (s *Store) writeHistory(ctx context.Context, w store.Writer, op, sessionID string, msgs []json.RawMessage, prepare func(tx Tx) (last int64, err error)) error {
	if err := store.ValidateHistory(sessionID, msgs); err != nil {
		return err
	}
	err := s.fencedTx(ctx, w, []string{sessionID}, func(ctx context.Context, tx Tx) error {
		// The session exists (also when there is nothing to write), and
		// its row stays locked until tx ends: history writers of one
		// session take turns, so two appends never compute the same
		// index, while event appends, which only share-lock the row's
		// key, go on.
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE session_id = $1`+s.f.ForNoKeyUpdate, sessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoSession
		} else if err != nil {
			return err
		}
		replace := op == "replace history"
		if err := s.journalHistory(ctx, tx, sessionID, replace, msgs); err != nil {
			return err
		}
		last, err := prepare(tx)
		if err != nil || len(msgs) == 0 {
			return err
		}
		texts := make([]string, len(msgs))
		for i, m := range msgs {
			texts[i] = string(m)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO history (session_id, idx, message)
			SELECT $1, $2 + m.n, m.v`+s.f.JSONCast+` FROM `+s.f.ListRows("$3"), sessionID, last, s.f.List(texts))
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrLeaseLost):
		return err
	case errors.Is(err, errNoSession) || s.f.isForeignKey(err):
		return fmt.Errorf("session %s: %w", sessionID, store.ErrNotFound)
	}
	return s.f.Fail(op+" of "+sessionID, err)
}

// AddPattern inserts an allowlist pattern unless the same entry exists
// (the unique index allowlist_entry decides, so daemons adding it at once
// store one row) and returns the stored entry's id.
func (s *Store) AddPattern(ctx context.Context, p store.Pattern) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	// The existing entry can be removed between the insert that finds it
	// and the read of its id: then insert again.
	for range 3 {
		var id string
		err := s.write(ctx, func(q Querier) error {
			return q.QueryRowContext(ctx, `INSERT INTO allowlist (pattern_id, pattern, scope, workdir, session_id, created_at, principal_id, principal_name)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (pattern, scope, workdir, session_id) DO NOTHING RETURNING pattern_id`,
				p.PatternID, p.Pattern, p.Scope, p.Workdir, p.SessionID, s.f.Time(p.CreatedAt), p.PrincipalID, p.PrincipalName).Scan(&id)
		})
		switch {
		case err == nil:
			return id, nil
		case s.f.isUnique(err):
			return "", fmt.Errorf("pattern %s: %w", p.PatternID, store.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return "", s.f.Fail("add pattern "+p.PatternID, err)
		}
		err = s.r.QueryRowContext(ctx, `SELECT pattern_id FROM allowlist WHERE pattern = $1 AND scope = $2 AND workdir = $3 AND session_id = $4`,
			p.Pattern, p.Scope, p.Workdir, p.SessionID).Scan(&id)
		switch {
		case err == nil:
			return id, nil
		case !errors.Is(err, sql.ErrNoRows):
			return "", s.f.Fail("add pattern "+p.PatternID, err)
		}
	}
	return "", s.f.Fail("add pattern "+p.PatternID, errors.New("the same entry was added and removed by others three times in a row"))
}

// ListPatterns returns the matching patterns, oldest first.
func (s *Store) ListPatterns(ctx context.Context, f store.PatternFilter) ([]store.Pattern, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"scope", f.Scope}, {"workdir", f.Workdir}, {"session_id", f.SessionID}} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, c.col+" = $"+strconv.Itoa(len(args)))
		}
	}
	q := `SELECT pattern_id, pattern, scope, workdir, session_id, created_at, principal_id, principal_name FROM allowlist`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at, pattern_id`
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.Pattern, error) {
		var p store.Pattern
		err := r.Scan(&p.PatternID, &p.Pattern, &p.Scope, &p.Workdir, &p.SessionID, scanTime(&p.CreatedAt), &p.PrincipalID, &p.PrincipalName)
		return p, err
	}, q, args...)
	if err != nil {
		return nil, s.f.Fail("list patterns", err)
	}
	return out, nil
}

// RemovePattern deletes one allowlist pattern.
func (s *Store) RemovePattern(ctx context.Context, patternID string) error {
	var n int64
	err := s.write(ctx, func(q Querier) error {
		var err error
		n, err = affected(ctx, q, `DELETE FROM allowlist WHERE pattern_id = $1`, patternID)
		return err
	})
	switch {
	case err != nil:
		return s.f.Fail("remove pattern "+patternID, err)
	case n == 0:
		return fmt.Errorf("pattern %s: %w", patternID, store.ErrNotFound)
	}
	return nil
}

// AppendAudit appends one approval resolution and returns its id.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	var id int64
	err := s.write(ctx, func(q Querier) error {
		return q.QueryRowContext(ctx, `INSERT INTO approval_audit (request_id, session_id, tool, args, decision,
		scope, by_whom, reason, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
			e.RequestID, e.SessionID, e.Tool, JSONText(e.Args), e.Decision, e.Scope, e.By, e.Reason, s.f.Time(e.At)).Scan(&id)
	})
	if err != nil {
		return 0, s.f.Fail("append audit entry for "+e.RequestID, err)
	}
	return id, nil
}

// ListAudit returns the session's audit entries ("" = all) in id order.
func (s *Store) ListAudit(ctx context.Context, sessionID string) ([]store.AuditEntry, error) {
	q := `SELECT id, request_id, session_id, tool, args, decision, scope, by_whom, reason, at FROM approval_audit`
	var args []any
	if sessionID != "" {
		// Spelled out rather than "$1 = '' OR ...": a plan made once for
		// every argument could not use the per-session index.
		q, args = q+` WHERE session_id = $1`, []any{sessionID}
	}
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.AuditEntry, error) {
		var e store.AuditEntry
		var argsJSON []byte
		err := r.Scan(&e.ID, &e.RequestID, &e.SessionID, &e.Tool, &argsJSON, &e.Decision,
			&e.Scope, &e.By, &e.Reason, scanTime(&e.At))
		e.Args = argsJSON
		return e, err
	}, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, s.f.Fail("list audit", err)
	}
	return out, nil
}

// PutSetting inserts or replaces a setting.
func (s *Store) PutSetting(ctx context.Context, w store.Writer, namespace, key string, value json.RawMessage) error {
	if err := (store.Setting{Namespace: namespace, Key: key, Value: value}).Validate(); err != nil {
		return err
	}
	err := s.fenced(ctx, w, nil, func(q Querier) error {
		_, err := q.ExecContext(ctx, `INSERT INTO settings (namespace, key, value) VALUES ($1, $2, $3)
			ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value`, namespace, key, JSONText(value))
		return err
	})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return err
	case err != nil:
		return s.f.Fail("put setting "+namespace+"/"+key, err)
	}
	return nil
}

// GetSetting returns one setting's value.
func (s *Store) GetSetting(ctx context.Context, namespace, key string) (json.RawMessage, error) {
	var v []byte
	err := s.r.QueryRowContext(ctx, `SELECT value FROM settings WHERE namespace = $1 AND key = $2`, namespace, key).Scan(&v)
	if err != nil {
		return nil, s.f.RowErr(err, "setting "+namespace+"/"+key, "get setting "+namespace+"/"+key)
	}
	return v, nil
}

// ListSettings returns a namespace's settings ordered by key.
func (s *Store) ListSettings(ctx context.Context, namespace string) ([]store.Setting, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.Setting, error) {
		st := store.Setting{Namespace: namespace}
		var v []byte
		err := r.Scan(&st.Key, &v)
		st.Value = v
		return st, err
	}, `SELECT key, value FROM settings WHERE namespace = $1 ORDER BY key`, namespace)
	if err != nil {
		return nil, s.f.Fail("list settings "+namespace, err)
	}
	return out, nil
}

// DeleteSetting removes one setting.
func (s *Store) DeleteSetting(ctx context.Context, w store.Writer, namespace, key string) error {
	var n int64
	err := s.fenced(ctx, w, nil, func(q Querier) error {
		var err error
		n, err = affected(ctx, q, `DELETE FROM settings WHERE namespace = $1 AND key = $2`, namespace, key)
		return err
	})
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return err
	case err != nil:
		return s.f.Fail("delete setting "+namespace+"/"+key, err)
	case n == 0:
		return fmt.Errorf("setting %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	return nil
}

// UpdateSetting changes a setting in one transaction holding its row.
func (s *Store) UpdateSetting(ctx context.Context, w store.Writer, namespace, key string, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	var fnErr error
	err := s.fencedTx(ctx, w, nil, func(ctx context.Context, tx Tx) error {
		var old []byte
		err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE namespace = $1 AND key = $2`+s.f.ForUpdate, namespace, key).Scan(&old)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("setting %s/%s: %w", namespace, key, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		v, err := fn(old)
		if err == nil {
			err = (store.Setting{Namespace: namespace, Key: key, Value: v}).Validate()
		}
		if err != nil {
			fnErr = err
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE settings SET value = $3 WHERE namespace = $1 AND key = $2`, namespace, key, JSONText(v))
		return err
	})
	switch {
	case fnErr != nil:
		return fnErr
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrLeaseLost):
		return err
	case err != nil:
		return s.f.Fail("update setting "+namespace+"/"+key, err)
	}
	return nil
}
