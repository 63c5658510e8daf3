package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/trellis-run/trellis/runtime/store"
)

// ListBlobs returns the session's blobs by hash.
func (s *Store) ListBlobs(ctx context.Context, sessionID string) ([]store.Blob, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (store.Blob, error) {
		var b store.Blob
		return b, r.Scan(&b.Hash, &b.Size, &b.Stored)
	}, `SELECT hash, size, stored FROM checkpoint_blobs WHERE session_id = $1 ORDER BY hash`+s.f.Bytewise, sessionID)
	if err != nil {
		return nil, s.f.Fail("list the blobs of session "+sessionID, err)
	}
	return out, nil
}

// CheckpointBlobs returns the file blobs a checkpoint keeps.
func (s *Store) CheckpointBlobs(ctx context.Context, sessionID, checkpointID string) ([]string, error) {
	out, err := QueryAll(ctx, s.r, func(r Scanner) (string, error) {
		var h string
		return h, r.Scan(&h)
	}, `SELECT hash FROM checkpoint_refs WHERE session_id = $1 AND checkpoint_id = $2 ORDER BY hash`+s.f.Bytewise, sessionID, checkpointID)
	if err != nil {
		return nil, s.f.Fail("list the blobs of checkpoint "+checkpointID, err)
	}
	return out, nil
}

// ImportSession creates a session and fills it in one transaction.
func (s *Store) ImportSession(ctx context.Context, sess store.Session, fill func(store.SessionWriter) error) error {
	if err := sess.Validate(); err != nil {
		return err
	}
	if s.files != nil {
		s.files.mu.Lock()
		defer s.files.mu.Unlock()
	}
	var w *sessionWriter
	err := s.tx(ctx, func(ctx context.Context, tx Tx) error {
		if err := s.insertSession(ctx, tx, sess); err != nil {
			return err
		}
		w = &sessionWriter{s: s, tx: tx, id: sess.SessionID}
		if err := fill(w); err != nil {
			return err
		}
		return w.placeFiles()
	})
	if err != nil && w != nil {
		w.removeFiles()
	}
	if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) {
		return err
	}
	return s.f.InsertErr(err, "session "+sess.SessionID, "import session "+sess.SessionID)
}

// sessionWriter writes into the session ImportSession creates, inside its
// transaction.
type sessionWriter struct {
	s       *Store
	tx      Tx
	id      string
	history int64
	// journal and journalSeq are the N and Seq of the latest journal entry.
	journal, journalSeq int64
	// files are the blob files written (where large blobs are files), by
	// hash: temporary until placeFiles renames them into place.
	files map[string]*importedFile
	order []string
}

type importedFile struct {
	tmp    string
	chunks int  // written so far
	placed bool // renamed to the blob's file
}

// placeFiles syncs the blob files the import wrote and renames them into
// place (inside its transaction, before the rows commit).
func (w *sessionWriter) placeFiles() error {
	for _, h := range w.order {
		f := w.files[h]
		if err := w.s.files.syncFiles(f.tmp); err != nil {
			return err
		}
		if err := w.s.files.place(f.tmp, w.id, h); err != nil {
			return err
		}
		f.placed = true
	}
	if len(w.order) == 0 {
		return nil
	}
	return w.s.files.syncDir(w.id)
}

// removeFiles removes what an import that failed wrote of blob files.
func (w *sessionWriter) removeFiles() {
	var placed []string
	for _, h := range w.order {
		if f := w.files[h]; f.placed {
			placed = append(placed, h)
		} else {
			os.Remove(f.tmp)
		}
	}
	if len(w.order) > 0 {
		w.s.files.remove(w.id, placed)
	}
}

func (w *sessionWriter) Event(ctx context.Context, e store.Event) error {
	e.SessionID = w.id
	if err := e.Validate(); err != nil {
		return err
	}
	_, err := w.tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, kind, payload, ts) VALUES ($1, $2, $3, $4`+w.s.f.JSONCast+`, $5)`,
		w.id, e.Seq, e.Kind, JSONText(e.Payload), w.s.f.Time(e.TS))
	return err
}

func (w *sessionWriter) History(ctx context.Context, msg json.RawMessage) error {
	if err := store.ValidateHistory(w.id, []json.RawMessage{msg}); err != nil {
		return err
	}
	w.history++
	_, err := w.tx.ExecContext(ctx, `INSERT INTO history (session_id, idx, message) VALUES ($1, $2, $3`+w.s.f.JSONCast+`)`, w.id, w.history, string(msg))
	return err
}

func (w *sessionWriter) Journal(ctx context.Context, e store.JournalEntry) error {
	if err := e.Validate(w.journal, w.journalSeq); err != nil {
		return err
	}
	w.journal, w.journalSeq = e.N, e.Seq
	_, err := w.tx.ExecContext(ctx, `INSERT INTO history_journal (session_id, n, seq, op, messages) VALUES ($1, $2, $3, $4, $5)`,
		w.id, e.N, e.Seq, e.Op, string(e.Messages))
	return err
}

func (w *sessionWriter) Blob(ctx context.Context, b store.Blob) error {
	if b.Hash == "" || b.Size < 0 || b.Stored < 0 {
		return fmt.Errorf("blob %q: empty hash or negative size: %w", b.Hash, store.ErrInvalid)
	}
	if _, err := w.tx.ExecContext(ctx, `INSERT INTO checkpoint_blobs (session_id, hash, size, stored) VALUES ($1, $2, $3, $4)`,
		w.id, b.Hash, b.Size, b.Stored); err != nil || !w.s.inFile(b.Stored) {
		return err
	}
	tmp, _, err := w.s.files.create(w.id, b.Hash, func() ([]byte, error) { return nil, io.EOF })
	if err != nil {
		return err
	}
	if w.files == nil {
		w.files = map[string]*importedFile{}
	}
	w.files[b.Hash] = &importedFile{tmp: tmp}
	w.order = append(w.order, b.Hash)
	return nil
}

func (w *sessionWriter) Chunk(ctx context.Context, hash string, n int, data []byte) error {
	f := w.files[hash]
	if f == nil { // a blob kept in the database (or a chunk before its blob: the foreign key refuses it)
		_, err := w.tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ($1, $2, $3, $4)`, w.id, hash, n, data)
		return err
	}
	if n != f.chunks {
		return fmt.Errorf("chunk %d of blob %s after %d chunks: %w", n, hash, f.chunks, store.ErrInvalid)
	}
	out, err := os.OpenFile(f.tmp, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := out.Write(data); err != nil {
		out.Close()
		return err
	}
	f.chunks++
	return out.Close()
}

func (w *sessionWriter) Checkpoint(ctx context.Context, c store.Checkpoint) error {
	c.SessionID = w.id
	if err := c.Validate(); err != nil {
		return err
	}
	var missing int
	need := append([]string{c.Manifest}, c.Blobs...)
	if err := w.tx.QueryRowContext(ctx, `SELECT COUNT(DISTINCT m.v) FROM `+w.s.f.ListRows("$1")+` WHERE `+notStored("m.v", "$2"),
		w.s.f.List(need), w.id).Scan(&missing); err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("checkpoint %s: %d of its blobs are not in the file: %w", c.CheckpointID, missing, store.ErrInvalid)
	}
	if _, err := w.tx.ExecContext(ctx, `INSERT INTO checkpoints (session_id, checkpoint_id, seq, turn_id, reason, tool, call_id,
			manifest, digest, files, bytes, skipped, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12`+w.s.f.JSONCast+`, $13)`,
		w.id, c.CheckpointID, c.Seq, c.TurnID, c.Reason, c.Tool, c.CallID, c.Manifest, c.Digest, c.Files, c.Bytes,
		skippedText(c.Skipped), w.s.f.Time(c.CreatedAt)); err != nil {
		return err
	}
	_, err := w.tx.ExecContext(ctx, `INSERT INTO checkpoint_refs (session_id, checkpoint_id, hash)
		SELECT DISTINCT CAST($1 AS TEXT), CAST($2 AS TEXT), m.v FROM `+w.s.f.ListRows("$3"), w.id, c.CheckpointID, w.s.f.List(c.Blobs))
	return err
}
