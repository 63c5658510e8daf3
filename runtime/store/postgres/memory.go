package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-run/trellis/runtime/store"
)

// tsvector keeps memory notes' words in the GIN-indexed column words of
// their row, under the 'simple' configuration, and ranks matches by
// ts_rank (sqlstore.MemoryIndex).
type tsvector struct{ pool *pgxpool.Pool }

// Insert stores the note with its words.
func (x tsvector) Insert(ctx context.Context, m store.Memory) error {
	_, err := x.pool.Exec(ctx, `INSERT INTO memories (id, namespace, body, tags, created_at, words)
		VALUES ($1, $2, $3, $4, $5, to_tsvector('simple', $6))`,
		m.ID, m.Namespace, m.Text, m.StoredTags(), m.CreatedAt, store.IndexText(m))
	return err
}

// Search ranks the matching notes by ts_rank. Each word becomes a quoted
// lexeme (quote_literal), joined with the OR operator: nothing the user
// typed is read as tsquery syntax.
func (x tsvector) Search(ctx context.Context, words []string, limit int, namespace string) ([]store.MemoryHit, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	return queryAll(ctx, x.pool, func(row pgx.Row) (store.MemoryHit, error) {
		var h store.MemoryHit
		err := row.Scan(&h.ID, &h.Namespace, &h.Text, &h.Tags, &h.CreatedAt, &h.Score)
		h.CreatedAt = h.CreatedAt.UTC()
		return h, err
	}, `SELECT id, namespace, body, tags, created_at, ts_rank(words, q)::float8 AS score
		FROM memories, (SELECT to_tsquery('simple', string_agg(quote_literal(w), ' | ')) AS q FROM unnest($1::text[]) AS w) AS query
		WHERE words @@ q AND ($2 = '' OR namespace = $2)
		ORDER BY score DESC, created_at DESC, id
		LIMIT $3`, words, namespace, lim)
}

// Delete removes the note (its words are in the same row).
func (x tsvector) Delete(ctx context.Context, id string) (bool, error) {
	tag, err := x.pool.Exec(ctx, `DELETE FROM memories WHERE id = $1`, id)
	return tag.RowsAffected() > 0, err
}
