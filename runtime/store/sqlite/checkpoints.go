package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/trellis-run/trellis/runtime/store"
)

// hashList is a list of hashes as the JSON array json_each reads.
func hashList(hashes []string) string {
	if hashes == nil {
		hashes = []string{}
	}
	b, _ := json.Marshal(hashes)
	return string(b)
}

// MissingBlobs returns the hashes the session does not hold.
func (s *Store) MissingBlobs(ctx context.Context, sessionID string, hashes []string) ([]string, error) {
	out, err := queryAll(ctx, s.r, func(r scanner) (string, error) {
		var h string
		return h, r.Scan(&h)
	}, `SELECT DISTINCT value FROM json_each(?) WHERE value NOT IN
		(SELECT hash FROM checkpoint_blobs WHERE session_id = ?) ORDER BY value`, hashList(hashes), sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: find the blobs of session %s: %w", sessionID, err)
	}
	return out, nil
}

// PutBlob stores a blob chunk by chunk in one transaction.
func (s *Store) PutBlob(ctx context.Context, sessionID, hash string, size int64, next func() ([]byte, error)) error {
	if sessionID == "" || hash == "" || size < 0 {
		return fmt.Errorf("blob %q of session %q: empty id or negative size: %w", hash, sessionID, store.ErrInvalid)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		n, err := execAffected(ctx, tx, `INSERT INTO checkpoint_blobs (session_id, hash, size) VALUES (?, ?, ?)
			ON CONFLICT DO NOTHING`, sessionID, hash, size)
		if err != nil || n == 0 {
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
			if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES (?, ?, ?, ?)`,
				sessionID, hash, i, chunk); err != nil {
				return err
			}
			stored += int64(len(chunk))
		}
		_, err = tx.ExecContext(ctx, `UPDATE checkpoint_blobs SET stored = ? WHERE session_id = ? AND hash = ?`, stored, sessionID, hash)
		return err
	})
	if isForeignKeyViolation(err) {
		return fmt.Errorf("blob %s: session %s: %w", hash, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: store blob %s of session %s: %w", hash, sessionID, err)
	}
	return nil
}

// ReadBlob reads a blob's chunks in order.
func (s *Store) ReadBlob(ctx context.Context, sessionID, hash string, fn func([]byte) error) error {
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1 FROM checkpoint_blobs WHERE session_id = ? AND hash = ?`, sessionID, hash).Scan(&one); err != nil {
		return rowErr(err, "blob "+hash+" of session "+sessionID, "read a blob")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT data FROM checkpoint_chunks WHERE session_id = ? AND hash = ? ORDER BY n`, sessionID, hash)
	if err != nil {
		return fmt.Errorf("sqlite: read blob %s: %w", hash, err)
	}
	defer rows.Close()
	for rows.Next() {
		var chunk []byte
		if err := rows.Scan(&chunk); err != nil {
			return fmt.Errorf("sqlite: read blob %s: %w", hash, err)
		}
		if err := fn(chunk); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: read blob %s: %w", hash, err)
	}
	return nil
}

// PutCheckpoint stores a checkpoint whose blobs the session holds.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return err
	}
	need := hashList(append([]string{c.Manifest}, c.Blobs...))
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var missing int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM json_each(?) WHERE value NOT IN
			(SELECT hash FROM checkpoint_blobs WHERE session_id = ?)`, need, c.SessionID).Scan(&missing); err != nil {
			return err
		}
		if missing > 0 {
			return fmt.Errorf("checkpoint %s: %d of its blobs are not stored: %w", c.CheckpointID, missing, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (session_id, checkpoint_id, seq, turn_id, reason, tool, call_id,
				manifest, digest, files, bytes, skipped, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.SessionID, c.CheckpointID, c.Seq, c.TurnID, c.Reason, c.Tool, c.CallID, c.Manifest, c.Digest, c.Files, c.Bytes,
			skippedText(c.Skipped), micros(c.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_refs (session_id, checkpoint_id, hash)
			SELECT DISTINCT ?, ?, value FROM json_each(?)`, c.SessionID, c.CheckpointID, hashList(c.Blobs))
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

func skippedText(v json.RawMessage) string {
	if v == nil {
		return "[]"
	}
	return string(v)
}

const checkpointColumns = `session_id, checkpoint_id, seq, turn_id, reason, tool, call_id, manifest, digest, files, bytes, skipped, created_at`

func scanCheckpoint(r scanner) (store.Checkpoint, error) {
	var c store.Checkpoint
	var skipped string
	var created int64
	err := r.Scan(&c.SessionID, &c.CheckpointID, &c.Seq, &c.TurnID, &c.Reason, &c.Tool, &c.CallID, &c.Manifest, &c.Digest,
		&c.Files, &c.Bytes, &skipped, &created)
	c.Skipped, c.CreatedAt = json.RawMessage(skipped), fromMicros(created)
	return c, err
}

// ListCheckpoints returns the session's checkpoints by seq.
func (s *Store) ListCheckpoints(ctx context.Context, sessionID string) ([]store.Checkpoint, error) {
	out, err := queryAll(ctx, s.r, scanCheckpoint, `SELECT `+checkpointColumns+` FROM checkpoints WHERE session_id = ?
		ORDER BY seq, created_at, checkpoint_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list the checkpoints of session %s: %w", sessionID, err)
	}
	return out, nil
}

// GetCheckpoint returns one checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, sessionID, checkpointID string) (store.Checkpoint, error) {
	c, err := scanCheckpoint(s.r.QueryRowContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE session_id = ? AND checkpoint_id = ?`, sessionID, checkpointID))
	if err != nil {
		return store.Checkpoint{}, rowErr(err, "checkpoint "+checkpointID+" of session "+sessionID, "read a checkpoint")
	}
	return c, nil
}

// DeleteCheckpoint deletes a checkpoint and the blobs nothing names any more.
func (s *Store) DeleteCheckpoint(ctx context.Context, sessionID, checkpointID string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		n, err := execAffected(ctx, tx, `DELETE FROM checkpoints WHERE session_id = ? AND checkpoint_id = ?`, sessionID, checkpointID)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("checkpoint %s of session %s: %w", checkpointID, sessionID, store.ErrNotFound)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM checkpoint_blobs WHERE session_id = ?
			AND hash NOT IN (SELECT hash FROM checkpoint_refs WHERE session_id = ?)
			AND hash NOT IN (SELECT manifest FROM checkpoints WHERE session_id = ?)`, sessionID, sessionID, sessionID)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("sqlite: delete checkpoint %s: %w", checkpointID, err)
	}
	return err
}

// CheckpointBytes sums the stored size of the session's blobs.
func (s *Store) CheckpointBytes(ctx context.Context, sessionID string) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(stored), 0) FROM checkpoint_blobs WHERE session_id = ?`, sessionID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: sum the blobs of session %s: %w", sessionID, err)
	}
	return n, nil
}
