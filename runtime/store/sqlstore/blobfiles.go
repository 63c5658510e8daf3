package sqlstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/trellis-run/trellis/runtime/store"
)

// blobFiles keeps the content of checkpoint blobs larger than
// InlineBlobMax as files, where a backend keeps them beside its database
// instead of in checkpoint_chunks (SQLite: Config.BlobDir):
// dir/<session>/<hash> holds a blob's chunks one after another. Smaller
// blobs stay rows of checkpoint_chunks, where a few pages of the database
// cost less than a file's creation. A blob's row (checkpoint_blobs, whose
// stored size says where its content is) is what makes it held;
// its file is written and synced before the row commits, renamed into
// place inside the transaction that inserts the row, and removed after
// the transaction that deletes the row commits. Files without a row (a
// crash between the two) are removed when the store opens (Sweep).
type blobFiles struct {
	dir string
	// sync: a file and its directory reach the disk before the row that
	// names it commits.
	sync bool
	// mu is held from a transaction that inserts or deletes blob rows to
	// the renames or removals of their files: a blob collected and stored
	// again at once never loses its new file to the old removal. The
	// daemon is the one process writing a home (it locks it), so a lock
	// of the process is enough.
	mu sync.Mutex
}

// readChunk is the most bytes of a blob file ReadBlob hands over at once.
const readChunk = 1 << 20

// InlineBlobMax is the largest blob, as stored (compressed), kept in the
// database where blobs are files (docs/performance.md, "A checkpoint's
// content is a file"): below it a file's creation costs more than the
// pages it saves.
const InlineBlobMax = 64 << 10

// smallBlobMax is the largest content read into a blob's chunks inside
// the transaction that stores it: compressed, it takes at most
// InlineBlobMax bytes (gzip adds 23 bytes to content it cannot shrink), so
// it is never a file. A larger one is read before, into a temporary file.
const smallBlobMax = InlineBlobMax - 1<<10

// inFile says whether a blob stored in that many bytes is a file, where a
// store keeps files.
func (s *Store) inFile(stored int64) bool { return s.files != nil && stored > InlineBlobMax }

// path is the file of blob hash of session id; ids and hashes that are
// not plain names are refused (an imported file names them).
func (b *blobFiles) path(session, hash string) (string, error) {
	if _, err := hex.DecodeString(hash); err != nil || len(hash) != 64 || strings.ToLower(hash) != hash {
		return "", fmt.Errorf("blob %q of session %s: a blob's hash is 64 lowercase hex digits: %w", hash, session, store.ErrInvalid)
	}
	if !plainName(session) {
		return "", fmt.Errorf("session id %q: %w", session, store.ErrInvalid)
	}
	return filepath.Join(b.dir, session, hash), nil
}

func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`+"\x00")
}

// create writes the chunks next returns into a new temporary file beside
// blob hash's, and returns its name and size (syncFiles syncs it). Nothing
// is left behind on error.
func (b *blobFiles) create(session, hash string, next func() ([]byte, error)) (tmp string, stored int64, err error) {
	defer cannotWrite(&err)
	final, err := b.path(session, hash)
	if err != nil {
		return "", 0, err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(final), hash+".*.tmp") // mode 0600
	if err != nil {
		return "", 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	for {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, err
		}
		if _, err := f.Write(chunk); err != nil {
			return "", 0, err
		}
		stored += int64(len(chunk))
	}
	return f.Name(), stored, f.Close()
}

// cannotWrite marks *err store.ErrCannotWrite when the disk is full or
// read-only.
func cannotWrite(err *error) {
	if errors.Is(*err, syscall.ENOSPC) || errors.Is(*err, syscall.EDQUOT) || errors.Is(*err, syscall.EROFS) {
		*err = fmt.Errorf("%w: %w", store.ErrCannotWrite, *err)
	}
}

// syncFiles makes the content of the files named durable (when b.sync).
func (b *blobFiles) syncFiles(names ...string) (err error) {
	defer cannotWrite(&err)
	if !b.sync {
		return nil
	}
	for _, name := range names {
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			return err
		}
	}
	return nil
}

// place renames the temporary file tmp to blob hash's file.
func (b *blobFiles) place(tmp, session, hash string) error {
	final, err := b.path(session, hash)
	if err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// syncDir makes the names placed in session's directory durable (when
// b.sync).
func (b *blobFiles) syncDir(session string) error {
	if !b.sync {
		return nil
	}
	d, err := os.Open(filepath.Join(b.dir, session))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// read hands blob hash's file to fn in chunks of at most readChunk bytes.
func (b *blobFiles) read(session, hash string, fn func([]byte) error) error {
	p, err := b.path(session, hash)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob %s of session %s: its file %s is gone: %w", hash, session, p, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		chunk := make([]byte, readChunk) // fn may keep it
		n, err := io.ReadFull(f, chunk)
		if n > 0 {
			if err := fn(chunk[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// remove removes the files of session's blobs hashes, and the session's
// directory once it is empty.
func (b *blobFiles) remove(session string, hashes []string) {
	for _, h := range hashes {
		if p, err := b.path(session, h); err == nil {
			os.Remove(p)
		}
	}
	if plainName(session) {
		os.Remove(filepath.Join(b.dir, session)) // only when empty
	}
}

// removeSessions removes the directories of sessions ids.
func (b *blobFiles) removeSessions(ids []string) {
	for _, id := range ids {
		if plainName(id) {
			os.RemoveAll(filepath.Join(b.dir, id))
		}
	}
}

// putBlobFiles is PutBlobs where blobs larger than InlineBlobMax are
// files. A blob whose content is larger than that is read first, outside
// the transaction (the database's writes go on meanwhile), into a
// temporary file; then one transaction inserts the rows, reads the small
// blobs into chunks, takes the content of a temporary file that
// compressed to InlineBlobMax or less as a chunk, and renames the other
// files, synced before it, into place. What is held in memory is one chunk
// at a time, whatever the number of blobs (a first checkpoint of a large
// workdir).
func (s *Store) putBlobFiles(ctx context.Context, sessionID string, blobs []store.BlobSource) error {
	hashes := make([]string, len(blobs))
	for i, b := range blobs {
		hashes[i] = b.Hash
	}
	missing, err := s.MissingBlobs(ctx, sessionID, hashes)
	if err != nil {
		return err
	}
	need := map[string]bool{}
	for _, h := range missing {
		need[h] = true
	}
	type put struct {
		b      store.BlobSource
		tmp    string // the temporary file of a blob read before the transaction
		stored int64  // its size
	}
	var puts []put
	defer func() {
		for _, p := range puts {
			if p.tmp != "" {
				os.Remove(p.tmp)
			}
		}
	}()
	for _, b := range blobs {
		if !need[b.Hash] {
			continue
		}
		need[b.Hash] = false
		p := put{b: b}
		if b.Size > smallBlobMax {
			if p.tmp, p.stored, err = s.files.create(sessionID, b.Hash, b.Next); err != nil {
				return s.f.Fail("store blob "+b.Hash+" of session "+sessionID, err)
			}
		}
		puts = append(puts, p)
	}
	if len(puts) == 0 {
		return nil
	}
	var files []string
	for _, p := range puts {
		if p.tmp != "" && s.inFile(p.stored) {
			files = append(files, p.tmp)
		}
	}
	if err := s.files.syncFiles(files...); err != nil {
		return s.f.Fail("store the blobs of session "+sessionID, err)
	}
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	var placed []string
	err = s.tx(ctx, func(ctx context.Context, tx Tx) error {
		placed = placed[:0]
		for _, p := range puts {
			in, err := s.putBlob(ctx, tx, sessionID, p.b, p.tmp, p.stored)
			if err != nil {
				return fmt.Errorf("blob %s: %w", p.b.Hash, err)
			}
			if in {
				placed = append(placed, p.b.Hash)
			}
		}
		if len(placed) == 0 {
			return nil
		}
		return s.files.syncDir(sessionID)
	})
	if err != nil {
		s.files.remove(sessionID, placed) // their rows are not there
	}
	if s.f.isForeignKey(err) {
		return fmt.Errorf("blobs of session %s: %w", sessionID, store.ErrNotFound)
	}
	if err != nil {
		return s.f.Fail("store the blobs of session "+sessionID, err)
	}
	return nil
}

// MoveChunksToFiles moves blobs larger than InlineBlobMax stored in
// checkpoint_chunks (by an earlier Trellis, or in a backup: sqlite.Backup
// embeds the files there) into files, one blob per transaction; a blob moved twice (a crash in between)
// is written again. It does nothing where blobs are not files.
func (s *Store) MoveChunksToFiles(ctx context.Context) (int, error) {
	if s.files == nil {
		return 0, nil
	}
	type blob struct{ session, hash string }
	list, err := QueryAll(ctx, s.r, func(r Scanner) (blob, error) {
		var b blob
		return b, r.Scan(&b.session, &b.hash)
	}, `SELECT b.session_id, b.hash FROM checkpoint_blobs b WHERE b.stored > $1
		AND EXISTS (SELECT 1 FROM checkpoint_chunks c WHERE c.session_id = b.session_id AND c.hash = b.hash)
		ORDER BY b.session_id, b.hash`, InlineBlobMax)
	if err != nil {
		return 0, s.f.Fail("list the blobs kept in the database", err)
	}
	for _, b := range list {
		var chunks [][]byte
		err := s.readChunks(ctx, b.session, b.hash, func(c []byte) error { chunks = append(chunks, c); return nil })
		if err != nil {
			return 0, err
		}
		tmp, _, err := s.files.create(b.session, b.hash, func() ([]byte, error) {
			if len(chunks) == 0 {
				return nil, io.EOF
			}
			c := chunks[0]
			chunks = chunks[1:]
			return c, nil
		})
		if err == nil {
			if err = s.files.syncFiles(tmp); err != nil {
				os.Remove(tmp)
			}
		}
		if err != nil {
			return 0, s.f.Fail("move blob "+b.hash+" of session "+b.session+" into a file", err)
		}
		s.files.mu.Lock()
		err = s.tx(ctx, func(ctx context.Context, tx Tx) error {
			if err := s.files.place(tmp, b.session, b.hash); err != nil {
				return err
			}
			if err := s.files.syncDir(b.session); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM checkpoint_chunks WHERE session_id = $1 AND hash = $2`, b.session, b.hash)
			return err
		})
		s.files.mu.Unlock()
		if err != nil {
			os.Remove(tmp)
			return 0, s.f.Fail("move blob "+b.hash+" of session "+b.session+" into a file", err)
		}
	}
	return len(list), nil
}

// SweepBlobFiles removes the blob files no row names: those a crash left
// between writing a file and committing its row, or between deleting a
// row and removing its file. It counts what it removed; it does nothing
// where blobs are not files. The daemon runs it as its store opens, before
// any write.
func (s *Store) SweepBlobFiles(ctx context.Context) (int, error) {
	if s.files == nil {
		return 0, nil
	}
	dirs, err := os.ReadDir(s.files.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, d := range dirs {
		session := filepath.Join(s.files.dir, d.Name())
		if !d.IsDir() {
			if os.Remove(session) == nil {
				removed++
			}
			continue
		}
		held, err := QueryAll(ctx, s.r, func(r Scanner) (string, error) {
			var h string
			return h, r.Scan(&h)
		}, `SELECT hash FROM checkpoint_blobs WHERE session_id = $1 AND stored > $2`, d.Name(), InlineBlobMax)
		if err != nil {
			return removed, s.f.Fail("list the blobs of session "+d.Name(), err)
		}
		keep := map[string]bool{}
		for _, h := range held {
			keep[h] = true
		}
		files, err := os.ReadDir(session)
		if err != nil {
			return removed, err
		}
		for _, f := range files {
			if !keep[f.Name()] && os.RemoveAll(filepath.Join(session, f.Name())) == nil {
				removed++
			}
		}
		if len(held) == 0 {
			os.Remove(session)
		}
	}
	return removed, nil
}
