package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

func nonNil(hashes []string) []string {
	if hashes == nil {
		return []string{}
	}
	return hashes
}

// MissingBlobs returns the hashes the session does not hold.
func (s *Store) MissingBlobs(ctx context.Context, sessionID string, hashes []string) ([]string, error) {
	out, err := queryAll(ctx, s.pool, func(r pgx.Row) (string, error) {
		var h string
		return h, r.Scan(&h)
	}, `SELECT DISTINCT h FROM unnest($1::text[]) AS h WHERE h NOT IN
		(SELECT hash FROM checkpoint_blobs WHERE session_id = $2) ORDER BY h`, nonNil(hashes), sessionID)
	if err != nil {
		return nil, fail("find the blobs of session "+sessionID, err)
	}
	return out, nil
}

// PutBlob stores a blob chunk by chunk in one transaction.
func (s *Store) PutBlob(ctx context.Context, sessionID, hash string, size int64, next func() ([]byte, error)) error {
	if sessionID == "" || hash == "" || size < 0 {
		return fmt.Errorf("blob %q of session %q: empty id or negative size: %w", hash, sessionID, store.ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO checkpoint_blobs (session_id, hash, size) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, sessionID, hash, size)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		var stored int64
		for i := 0; ; i++ {
			chunk, err := next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ($1, $2, $3, $4)`,
				sessionID, hash, i, chunk); err != nil {
				return err
			}
			stored += int64(len(chunk))
		}
		_, err = tx.Exec(ctx, `UPDATE checkpoint_blobs SET stored = $1 WHERE session_id = $2 AND hash = $3`, stored, sessionID, hash)
		return err
	})
	if isForeignKeyViolation(err) {
		return fmt.Errorf("blob %s: session %s: %w", hash, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fail("store blob "+hash+" of session "+sessionID, err)
	}
	return nil
}

// ReadBlob reads a blob's chunks in order.
func (s *Store) ReadBlob(ctx context.Context, sessionID, hash string, fn func([]byte) error) error {
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1 FROM checkpoint_blobs WHERE session_id = $1 AND hash = $2`, sessionID, hash).Scan(&one); err != nil {
		return rowErr(err, "blob "+hash+" of session "+sessionID, "read a blob")
	}
	rows, err := s.pool.Query(ctx, `SELECT data FROM checkpoint_chunks WHERE session_id = $1 AND hash = $2 ORDER BY n`, sessionID, hash)
	if err != nil {
		return fail("read blob "+hash, err)
	}
	defer rows.Close()
	for rows.Next() {
		var chunk []byte
		if err := rows.Scan(&chunk); err != nil {
			return fail("read blob "+hash, err)
		}
		if err := fn(chunk); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fail("read blob "+hash, err)
	}
	return nil
}

// PutCheckpoint stores a checkpoint whose blobs the session holds.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return err
	}
	need := append([]string{c.Manifest}, c.Blobs...)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockCheckpoints(ctx, tx, c.SessionID); err != nil {
			return err
		}
		var held int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM checkpoint_blobs WHERE session_id = $1 AND hash = ANY($2)`,
			c.SessionID, need).Scan(&held); err != nil {
			return err
		}
		if distinct := countDistinct(need); held < distinct {
			return fmt.Errorf("checkpoint %s: %d of its blobs are not stored: %w", c.CheckpointID, distinct-held, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO checkpoints (session_id, checkpoint_id, seq, turn_id, reason, tool, call_id,
				manifest, digest, files, bytes, skipped, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			c.SessionID, c.CheckpointID, c.Seq, c.TurnID, c.Reason, c.Tool, c.CallID, c.Manifest, c.Digest, c.Files, c.Bytes,
			skippedText(c.Skipped), c.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO checkpoint_refs (session_id, checkpoint_id, hash)
			SELECT DISTINCT $1::text, $2::text, h FROM unnest($3::text[]) AS h`, c.SessionID, c.CheckpointID, nonNil(c.Blobs))
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return err
	case isForeignKeyViolation(err):
		return fmt.Errorf("checkpoint %s: session %s: %w", c.CheckpointID, c.SessionID, store.ErrNotFound)
	}
	return insertErr(err, "checkpoint "+c.CheckpointID, "store checkpoint "+c.CheckpointID)
}

// lockCheckpoints serialises, per session, the transactions that store a
// checkpoint and those that delete one and collect its blobs: a collection
// never sees a checkpoint half stored, so it never deletes a blob that a
// checkpoint committing meanwhile names.
func lockCheckpoints(ctx context.Context, tx pgx.Tx, sessionID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('trellis checkpoints ' || $1::text, 0))`, sessionID)
	return err
}

func countDistinct(hashes []string) int {
	seen := map[string]bool{}
	for _, h := range hashes {
		seen[h] = true
	}
	return len(seen)
}

func skippedText(v json.RawMessage) string {
	if v == nil {
		return "[]"
	}
	return string(v)
}

const checkpointColumns = `session_id, checkpoint_id, seq, turn_id, reason, tool, call_id, manifest, digest, files, bytes, skipped::text, created_at`

func scanCheckpoint(r pgx.Row) (store.Checkpoint, error) {
	var c store.Checkpoint
	var skipped string
	err := r.Scan(&c.SessionID, &c.CheckpointID, &c.Seq, &c.TurnID, &c.Reason, &c.Tool, &c.CallID, &c.Manifest, &c.Digest,
		&c.Files, &c.Bytes, &skipped, &c.CreatedAt)
	c.Skipped, c.CreatedAt = json.RawMessage(skipped), c.CreatedAt.UTC()
	return c, err
}

// ListCheckpoints returns the session's checkpoints by seq.
func (s *Store) ListCheckpoints(ctx context.Context, sessionID string) ([]store.Checkpoint, error) {
	out, err := queryAll(ctx, s.pool, scanCheckpoint, `SELECT `+checkpointColumns+` FROM checkpoints WHERE session_id = $1
		ORDER BY seq, created_at, checkpoint_id`, sessionID)
	if err != nil {
		return nil, fail("list the checkpoints of session "+sessionID, err)
	}
	return out, nil
}

// GetCheckpoint returns one checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, sessionID, checkpointID string) (store.Checkpoint, error) {
	c, err := scanCheckpoint(s.pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE session_id = $1 AND checkpoint_id = $2`, sessionID, checkpointID))
	if err != nil {
		return store.Checkpoint{}, rowErr(err, "checkpoint "+checkpointID+" of session "+sessionID, "read a checkpoint")
	}
	return c, nil
}

// DeleteCheckpoint deletes a checkpoint and the blobs nothing names any more.
func (s *Store) DeleteCheckpoint(ctx context.Context, sessionID, checkpointID string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockCheckpoints(ctx, tx, sessionID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM checkpoints WHERE session_id = $1 AND checkpoint_id = $2`, sessionID, checkpointID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("checkpoint %s of session %s: %w", checkpointID, sessionID, store.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `DELETE FROM checkpoint_blobs WHERE session_id = $1
			AND hash NOT IN (SELECT hash FROM checkpoint_refs WHERE session_id = $1)
			AND hash NOT IN (SELECT manifest FROM checkpoints WHERE session_id = $1)`, sessionID)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fail("delete checkpoint "+checkpointID, err)
	}
	return err
}

// CheckpointBytes sums the stored size of the session's blobs.
func (s *Store) CheckpointBytes(ctx context.Context, sessionID string) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(stored), 0)::bigint FROM checkpoint_blobs WHERE session_id = $1`, sessionID).Scan(&n); err != nil {
		return 0, fail("sum the blobs of session "+sessionID, err)
	}
	return n, nil
}
