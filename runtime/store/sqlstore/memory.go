package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/runtime/store"
)

// MemoryIndex is a dialect's full-text index of memory notes: how a note
// is stored with its words, found by them and deleted with them (a
// tsvector column, an FTS5 table). Its errors are the driver's.
type MemoryIndex interface {
	// Insert stores m, valid, with its words (store.IndexText).
	Insert(ctx context.Context, m store.Memory) error
	// Search ranks the notes of namespace ("" = all) holding any of words,
	// at most limit of them (limit <= 0: all).
	Search(ctx context.Context, words []string, limit int, namespace string) ([]store.MemoryHit, error)
	// Delete deletes the note id with its words; found is false when
	// there was none.
	Delete(ctx context.Context, id string) (found bool, err error)
}

// WriteMemory inserts a note with its words.
func (s *Store) WriteMemory(ctx context.Context, m store.Memory) error {
	if err := m.Validate(); err != nil {
		return err
	}
	return s.f.InsertErr(s.memory.Insert(ctx, m), "memory "+m.ID, "write memory "+m.ID)
}

// SearchMemory ranks the notes holding any word of query.
func (s *Store) SearchMemory(ctx context.Context, query string, limit int, namespace string) ([]store.MemoryHit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, fmt.Errorf("memory search: blank query: %w", store.ErrInvalid)
	}
	words := store.QueryWords(query)
	if len(words) == 0 {
		return nil, nil
	}
	out, err := s.memory.Search(ctx, words, limit, namespace)
	if err != nil {
		return nil, s.f.Fail("search memory", err)
	}
	return out, nil
}

// ListMemory returns the notes of namespace, newest first.
func (s *Store) ListMemory(ctx context.Context, namespace string, limit int) ([]store.Memory, error) {
	q, args := `SELECT id, namespace, body, tags, created_at FROM memories
		WHERE $1 = '' OR namespace = $1 ORDER BY created_at DESC, id`, []any{namespace}
	if limit > 0 {
		q, args = q+` LIMIT $2`, append(args, limit)
	}
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.Memory, error) {
		var m store.Memory
		err := r.Scan(&m.ID, &m.Namespace, &m.Text, s.f.ScanList(&m.Tags), scanTime(&m.CreatedAt))
		return m, err
	}, q, args...)
	if err != nil {
		return nil, s.f.Fail("list memory", err)
	}
	return out, nil
}

// DeleteMemory removes a note with its words.
func (s *Store) DeleteMemory(ctx context.Context, id string) error {
	found, err := s.memory.Delete(ctx, id)
	switch {
	case err != nil:
		return s.f.Fail("delete memory "+id, err)
	case !found:
		return fmt.Errorf("memory %s: %w", id, store.ErrNotFound)
	}
	return nil
}
