package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// WriteMemory inserts a note with its tsvector.
func (s *Store) WriteMemory(ctx context.Context, m store.Memory) error {
	if err := m.Validate(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO memories (id, namespace, body, tags, created_at, words)
		VALUES ($1, $2, $3, $4, $5, to_tsvector('simple', $6))`,
		m.ID, m.Namespace, m.Text, m.StoredTags(), m.CreatedAt, store.IndexText(m))
	return flavor.InsertErr(err, "memory "+m.ID, "write memory "+m.ID)
}

// SearchMemory ranks the notes holding any word of query by ts_rank.
func (s *Store) SearchMemory(ctx context.Context, query string, limit int, namespace string) ([]store.MemoryHit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("memory search: blank query: %w", store.ErrInvalid)
	}
	words := store.QueryWords(query)
	if len(words) == 0 {
		return nil, nil
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	// Each word becomes a quoted lexeme (quote_literal), joined with the
	// OR operator: nothing the user typed is read as tsquery syntax.
	out, err := queryAll(ctx, s.pool, func(row pgx.Row) (store.MemoryHit, error) {
		var h store.MemoryHit
		err := row.Scan(&h.ID, &h.Namespace, &h.Text, &h.Tags, &h.CreatedAt, &h.Score)
		h.CreatedAt = h.CreatedAt.UTC()
		return h, err
	}, `SELECT id, namespace, body, tags, created_at, ts_rank(words, q)::float8 AS score
		FROM memories, (SELECT to_tsquery('simple', string_agg(quote_literal(w), ' | ')) AS q FROM unnest($1::text[]) AS w) AS query
		WHERE words @@ q AND ($2 = '' OR namespace = $2)
		ORDER BY score DESC, created_at DESC, id
		LIMIT $3`, words, namespace, lim)
	if err != nil {
		return nil, flavor.Fail("search memory", err)
	}
	return out, nil
}

// DeleteMemory removes a note (its tsvector is in the same row).
func (s *Store) DeleteMemory(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM memories WHERE id = $1`, id)
	if err != nil {
		return flavor.Fail("delete memory "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("memory %s: %w", id, store.ErrNotFound)
	}
	return nil
}
