package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/trellis-run/trellis/runtime/store"
)

// notStored is the condition that the session ($session) holds no blob
// of the hash in column: one lookup by the blobs' key per hash, where NOT
// IN would read every hash the session holds first.
func notStored(column, session string) string {
	return `NOT EXISTS (SELECT 1 FROM checkpoint_blobs b WHERE b.session_id = ` + session + ` AND b.hash = ` + column + `)`
}

// MissingBlobs returns the hashes the session does not hold.
func (s *Store) MissingBlobs(ctx context.Context, sessionID string, hashes []string) ([]string, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (string, error) {
		var h string
		return h, r.Scan(&h)
	}, `SELECT DISTINCT m.v`+s.f.Bytewise+` AS h FROM `+s.f.ListRows("$1")+` WHERE `+notStored("m.v", "$2")+` ORDER BY h`, s.f.List(hashes), sessionID)
	if err != nil {
		return nil, s.f.Fail("find the blobs of session "+sessionID, err)
	}
	return out, nil
}

// PutBlobs stores blobs chunk by chunk in one transaction.
func (s *Store) PutBlobs(ctx context.Context, sessionID string, blobs []store.BlobSource) error {
	for _, b := range blobs {
		if sessionID == "" || b.Hash == "" || b.Size < 0 {
			return fmt.Errorf("blob %q of session %q: empty id or negative size: %w", b.Hash, sessionID, store.ErrInvalid)
		}
	}
	if s.files != nil {
		return s.putBlobFiles(ctx, sessionID, blobs)
	}
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		for _, b := range blobs {
			if _, err := s.putBlob(ctx, tx, sessionID, b, "", 0); err != nil {
				return fmt.Errorf("blob %s: %w", b.Hash, err)
			}
		}
		return nil
	})
	if s.f.isForeignKey(err) {
		return fmt.Errorf("blobs of session %s: %w", sessionID, store.ErrNotFound)
	}
	if err != nil {
		return s.f.Fail("store the blobs of session "+sessionID, err)
	}
	return nil
}

// putBlob stores blob b of the session inside tx, unless it is held:
// its row, then its content. Where blobs are files (putBlobFiles), a blob
// read before the transaction into the temporary file tmp (stored bytes)
// is that file renamed into place (placed), or, when it compressed to
// InlineBlobMax or less, the file's content as one chunk; a smaller blob
// is read whole, as one chunk. Elsewhere its chunks are streamed as b.Next
// returns them.
func (s *Store) putBlob(ctx context.Context, tx Tx, sessionID string, b store.BlobSource, tmp string, stored int64) (placed bool, err error) {
	var content []byte // the whole content, read before the row
	whole := s.files != nil && !s.inFile(stored)
	switch {
	case whole && tmp != "":
		content, err = os.ReadFile(tmp)
	case whole:
		content, err = readSmall(b)
		stored = int64(len(content))
	}
	if err != nil {
		return false, err
	}
	n, err := affected(ctx, tx, `INSERT INTO checkpoint_blobs (session_id, hash, size, stored) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, sessionID, b.Hash, b.Size, stored)
	switch {
	case err != nil || n == 0:
		return false, err
	case !whole && tmp != "":
		return true, s.files.place(tmp, sessionID, b.Hash)
	case whole:
		if len(content) > 0 {
			_, err = tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ($1, $2, 0, $3)`,
				sessionID, b.Hash, content)
		}
		return false, err
	}
	for i := 0; ; i++ {
		chunk, err := b.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ($1, $2, $3, $4)`,
			sessionID, b.Hash, i, chunk); err != nil {
			return false, err
		}
		stored += int64(len(chunk))
	}
	_, err = tx.ExecContext(ctx, `UPDATE checkpoint_blobs SET stored = $1 WHERE session_id = $2 AND hash = $3`, stored, sessionID, b.Hash)
	return false, err
}

// readSmall reads the content of a blob kept in the database where blobs
// are files: at most InlineBlobMax bytes.
func readSmall(b store.BlobSource) ([]byte, error) {
	var content []byte
	for {
		chunk, err := b.Next()
		if errors.Is(err, io.EOF) {
			return content, nil
		}
		if err != nil {
			return nil, err
		}
		if len(content)+len(chunk) > InlineBlobMax {
			return nil, fmt.Errorf("its content of %d bytes takes more than the %d stored of a blob kept in the database", b.Size, InlineBlobMax)
		}
		content = append(content, chunk...)
	}
}

// ReadBlob reads a blob's chunks in order.
func (s *Store) ReadBlob(ctx context.Context, sessionID, hash string, fn func([]byte) error) error {
	var stored int64
	if err := s.r.QueryRowContext(ctx, `SELECT stored FROM checkpoint_blobs WHERE session_id = $1 AND hash = $2`, sessionID, hash).Scan(&stored); err != nil {
		return s.f.RowErr(err, "blob "+hash+" of session "+sessionID, "read a blob")
	}
	if s.inFile(stored) {
		return s.files.read(sessionID, hash, fn)
	}
	return s.readChunks(ctx, sessionID, hash, fn)
}

// readChunks reads a blob's rows of checkpoint_chunks in order.
func (s *Store) readChunks(ctx context.Context, sessionID, hash string, fn func([]byte) error) error {
	rows, err := s.r.QueryContext(ctx, `SELECT data FROM checkpoint_chunks WHERE session_id = $1 AND hash = $2 ORDER BY n`, sessionID, hash)
	if err != nil {
		return s.f.Fail("read blob "+hash, err)
	}
	defer rows.Close()
	for rows.Next() {
		var chunk []byte
		if err := rows.Scan(&chunk); err != nil {
			return s.f.Fail("read blob "+hash, err)
		}
		if err := fn(chunk); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return s.f.Fail("read blob "+hash, err)
	}
	return nil
}

// lockCheckpoints serialises, per session, the transactions that store a
// checkpoint and those that delete one and collect its blobs (by the
// session's row; SQLite's one writer already does): a collection never
// sees a checkpoint half stored, so it never deletes a blob that a
// checkpoint committing meanwhile names.
func (s *Store) lockCheckpoints(ctx context.Context, tx Tx, sessionID string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE session_id = $1`+s.f.ForNoKeyUpdate, sessionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("session %s: %w", sessionID, store.ErrNotFound)
	}
	return err
}

// PutCheckpoint stores a checkpoint whose blobs the session holds.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return err
	}
	need := append([]string{c.Manifest}, c.Blobs...)
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		if err := s.lockCheckpoints(ctx, tx, c.SessionID); err != nil {
			return err
		}
		var missing int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(DISTINCT m.v) FROM `+s.f.ListRows("$1")+` WHERE `+notStored("m.v", "$2"),
			s.f.List(need), c.SessionID).Scan(&missing); err != nil {
			return err
		}
		if missing > 0 {
			return fmt.Errorf("checkpoint %s: %d of its blobs are not stored: %w", c.CheckpointID, missing, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (session_id, checkpoint_id, seq, turn_id, reason, tool, call_id,
				manifest, digest, files, bytes, skipped, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12`+s.f.JSONCast+`, $13)`,
			c.SessionID, c.CheckpointID, c.Seq, c.TurnID, c.Reason, c.Tool, c.CallID, c.Manifest, c.Digest, c.Files, c.Bytes,
			skippedText(c.Skipped), s.f.Time(c.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_refs (session_id, checkpoint_id, hash)
			SELECT DISTINCT CAST($1 AS TEXT), CAST($2 AS TEXT), m.v FROM `+s.f.ListRows("$3"), c.SessionID, c.CheckpointID, s.f.List(c.Blobs))
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return err
	case s.f.isForeignKey(err):
		return fmt.Errorf("checkpoint %s: session %s: %w", c.CheckpointID, c.SessionID, store.ErrNotFound)
	}
	return s.f.InsertErr(err, "checkpoint "+c.CheckpointID, "store checkpoint "+c.CheckpointID)
}

// skippedText is the stored form of a checkpoint's skipped paths.
func skippedText(v json.RawMessage) string {
	if v == nil {
		return "[]"
	}
	return string(v)
}

const checkpointCols = `session_id, checkpoint_id, seq, turn_id, reason, tool, call_id, manifest, digest, files, bytes,
	CAST(skipped AS TEXT), created_at`

func scanCheckpoint(r Scanner) (store.Checkpoint, error) {
	var c store.Checkpoint
	var skipped string
	err := r.Scan(&c.SessionID, &c.CheckpointID, &c.Seq, &c.TurnID, &c.Reason, &c.Tool, &c.CallID, &c.Manifest, &c.Digest,
		&c.Files, &c.Bytes, &skipped, scanTime(&c.CreatedAt))
	c.Skipped = json.RawMessage(skipped)
	return c, err
}

// ListCheckpoints returns the session's checkpoints by seq.
func (s *Store) ListCheckpoints(ctx context.Context, sessionID string) ([]store.Checkpoint, error) {
	out, err := QueryAll(ctx, s.r, scanCheckpoint, `SELECT `+checkpointCols+` FROM checkpoints WHERE session_id = $1
		ORDER BY seq, created_at, checkpoint_id`+s.f.Bytewise, sessionID)
	if err != nil {
		return nil, s.f.Fail("list the checkpoints of session "+sessionID, err)
	}
	return out, nil
}

// LatestCheckpoint returns the session's checkpoint of the highest seq.
func (s *Store) LatestCheckpoint(ctx context.Context, sessionID string) (store.Checkpoint, error) {
	c, err := scanCheckpoint(s.r.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints WHERE session_id = $1
		ORDER BY seq DESC, created_at DESC, checkpoint_id`+s.f.Bytewise+` DESC LIMIT 1`, sessionID))
	if err != nil {
		return store.Checkpoint{}, s.f.RowErr(err, "a checkpoint of session "+sessionID, "read the latest checkpoint of session "+sessionID)
	}
	return c, nil
}

// GetCheckpoint returns one checkpoint.
func (s *Store) GetCheckpoint(ctx context.Context, sessionID, checkpointID string) (store.Checkpoint, error) {
	c, err := scanCheckpoint(s.r.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints
		WHERE session_id = $1 AND checkpoint_id = $2`, sessionID, checkpointID))
	if err != nil {
		return store.Checkpoint{}, s.f.RowErr(err, "checkpoint "+checkpointID+" of session "+sessionID, "read a checkpoint")
	}
	return c, nil
}

// DeleteCheckpoint deletes a checkpoint and the blobs nothing names any
// more (and their files, once that commits).
func (s *Store) DeleteCheckpoint(ctx context.Context, sessionID, checkpointID string) error {
	var collected []string
	if s.files != nil {
		s.files.mu.Lock()
		defer s.files.mu.Unlock()
	}
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		if err := s.lockCheckpoints(ctx, tx, sessionID); err != nil {
			return err
		}
		n, err := affected(ctx, tx, `DELETE FROM checkpoints WHERE session_id = $1 AND checkpoint_id = $2`, sessionID, checkpointID)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("checkpoint %s of session %s: %w", checkpointID, sessionID, store.ErrNotFound)
		}
		collected, err = QueryAll(ctx, tx, func(r Scanner) (string, error) {
			var h string
			return h, r.Scan(&h)
		}, `DELETE FROM checkpoint_blobs WHERE session_id = $1
			AND hash NOT IN (SELECT hash FROM checkpoint_refs WHERE session_id = $1)
			AND hash NOT IN (SELECT manifest FROM checkpoints WHERE session_id = $1)
			RETURNING hash`, sessionID)
		return err
	})
	if err == nil && s.files != nil {
		s.files.remove(sessionID, collected)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return s.f.Fail("delete checkpoint "+checkpointID, err)
	}
	return err
}

// CheckpointBytes sums the stored size of the session's blobs.
func (s *Store) CheckpointBytes(ctx context.Context, sessionID string) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT CAST(COALESCE(SUM(stored), 0) AS BIGINT) FROM checkpoint_blobs WHERE session_id = $1`, sessionID).Scan(&n); err != nil {
		return 0, s.f.Fail("sum the blobs of session "+sessionID, err)
	}
	return n, nil
}
