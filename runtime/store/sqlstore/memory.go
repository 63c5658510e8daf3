package sqlstore

import (
	"context"

	"github.com/trellis-run/trellis/runtime/store"
)

// Writing and searching memory notes is each backend's own (its full-text
// index); listing them is shared.

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
