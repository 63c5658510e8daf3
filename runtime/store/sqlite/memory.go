package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// fts5 keeps memory notes' words in the FTS5 table memories_fts, whose
// rowid is the note's seq, and ranks matches by bm25()
// (sqlstore.MemoryIndex).
type fts5 struct{ s *Store }

// Insert stores the note and its index row in one transaction.
func (x fts5) Insert(ctx context.Context, m store.Memory) error {
	return x.s.writeTx(ctx, func(tx sqlstore.Tx) error {
		var seq int64
		err := tx.QueryRowContext(ctx, `INSERT INTO memories (id, namespace, body, tags, created_at) VALUES (?, ?, ?, ?, ?) RETURNING seq`,
			m.ID, m.Namespace, m.Text, flavor.List(m.StoredTags()), micros(m.CreatedAt)).Scan(&seq)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO memories_fts (rowid, words) VALUES (?, ?)`, seq, store.IndexText(m))
		return err
	})
}

// Search ranks the matching notes by BM25. Each word is an FTS5 string
// (double quotes, inner quotes doubled), so nothing in it is read as
// syntax: AND, NEAR, *, ^ and column filters are plain text.
func (x fts5) Search(ctx context.Context, words []string, limit int, namespace string) ([]store.MemoryHit, error) {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + strings.ReplaceAll(w, `"`, `""`) + `"`
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	// bm25() is lower for better matches; the negation makes higher better.
	return sqlstore.QueryAll(ctx, x.s.r, func(r sqlstore.Scanner) (store.MemoryHit, error) {
		var h store.MemoryHit
		var created int64
		err := r.Scan(&h.ID, &h.Namespace, &h.Text, flavor.ScanList(&h.Tags), &created, &h.Score)
		h.CreatedAt = fromMicros(created)
		return h, err
	}, `SELECT m.id, m.namespace, m.body, m.tags, m.created_at, -bm25(memories_fts) AS score
		FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid
		WHERE memories_fts MATCH ?1 AND (?2 = '' OR m.namespace = ?2)
		ORDER BY score DESC, m.created_at DESC, m.id
		LIMIT ?3`, strings.Join(quoted, " OR "), namespace, limit)
}

// Delete removes the note and its index row in one transaction.
func (x fts5) Delete(ctx context.Context, id string) (bool, error) {
	found := false
	err := x.s.writeTx(ctx, func(tx sqlstore.Tx) error {
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
	return found, err
}
