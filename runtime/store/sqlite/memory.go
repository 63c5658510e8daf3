package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// WriteMemory inserts a note and its full-text index row in one transaction.
func (s *Store) WriteMemory(ctx context.Context, m store.Memory) error {
	if err := m.Validate(); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO memories (id, namespace, body, tags, created_at) VALUES (?, ?, ?, ?, ?)`,
			m.ID, m.Namespace, m.Text, flavor.List(m.StoredTags()), micros(m.CreatedAt))
		if err != nil {
			return err
		}
		seq, err := res.LastInsertId()
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO memories_fts (rowid, words) VALUES (?, ?)`, seq, store.IndexText(m))
		return err
	})
	return flavor.InsertErr(err, "memory "+m.ID, "write memory "+m.ID)
}

// SearchMemory ranks the notes holding any word of query by BM25.
func (s *Store) SearchMemory(ctx context.Context, query string, limit int, namespace string) ([]store.MemoryHit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("memory search: blank query: %w", store.ErrInvalid)
	}
	match := ftsMatch(store.QueryWords(query))
	if match == "" {
		return nil, nil
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	// bm25() is lower for better matches; the negation makes higher better.
	out, err := sqlstore.QueryAll(ctx, s.r, func(r sqlstore.Scanner) (store.MemoryHit, error) {
		var h store.MemoryHit
		var tags string
		var created int64
		if err := r.Scan(&h.ID, &h.Namespace, &h.Text, &tags, &created, &h.Score); err != nil {
			return h, err
		}
		if err := json.Unmarshal([]byte(tags), &h.Tags); err != nil {
			return h, fmt.Errorf("tags of %s: %w", h.ID, err)
		}
		h.CreatedAt = fromMicros(created)
		return h, nil
	}, `SELECT m.id, m.namespace, m.body, m.tags, m.created_at, -bm25(memories_fts) AS score
		FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid
		WHERE memories_fts MATCH ?1 AND (?2 = '' OR m.namespace = ?2)
		ORDER BY score DESC, m.created_at DESC, m.id
		LIMIT ?3`, match, namespace, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search memory: %w", err)
	}
	return out, nil
}

// ftsMatch builds an FTS5 query matching any of words. Each word is an
// FTS5 string (double quotes, inner quotes doubled), so nothing in it is
// read as syntax: AND, NEAR, *, ^ and column filters are plain text.
func ftsMatch(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + strings.ReplaceAll(w, `"`, `""`) + `"`
	}
	return strings.Join(quoted, " OR ")
}

// DeleteMemory removes a note and its full-text index row in one
// transaction.
func (s *Store) DeleteMemory(ctx context.Context, id string) error {
	found := false
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var seq int64
		switch err := tx.QueryRowContext(ctx, `SELECT seq FROM memories WHERE id = ?`, id).Scan(&seq); {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		found = true
		if _, err := tx.ExecContext(ctx, `DELETE FROM memories_fts WHERE rowid = ?`, seq); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM memories WHERE seq = ?`, seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete memory %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("memory %s: %w", id, store.ErrNotFound)
	}
	return nil
}
