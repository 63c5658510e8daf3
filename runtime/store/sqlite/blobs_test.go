package sqlite

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// blobFiles lists the files under the store's blob directory, relative.
func blobFiles(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(BlobDir(path), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(BlobDir(path), p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

func readBlob(t *testing.T, s *Store, session, hash string) []byte {
	t.Helper()
	var got []byte
	if err := s.ReadBlob(context.Background(), session, hash, func(c []byte) error { got = append(got, c...); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

func putCheckpoint(t *testing.T, s *Store, id string, seq int64, manifest string) {
	t.Helper()
	c := store.Checkpoint{SessionID: "s-1", CheckpointID: id, Seq: seq, Reason: store.CheckpointTurn, Manifest: manifest, Digest: "d",
		CreatedAt: time.Now()}
	if err := s.PutCheckpoint(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TestBlobsAreFiles: a large blob's content is one file beside the
// database, mode 0600, and none of it is in checkpoint_chunks; a small
// one stays in the database; deleting the last
// checkpoint that names it removes the file, deleting the session its
// directory; a put whose content fails leaves no file and no row.
func TestBlobsAreFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := withSessionAt(t, path)
	ctx := context.Background()
	big := make([]byte, 3<<20+5)
	rand.Read(big)
	b := oneBlob(big)
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{b}); err != nil {
		t.Fatal(err)
	}
	if got := blobFiles(t, path); !slices.Equal(got, []string{"s-1/" + b.Hash}) {
		t.Fatalf("blob files %v, want s-1/%s", got, b.Hash)
	}
	fi, err := os.Stat(filepath.Join(BlobDir(path), "s-1", b.Hash))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the blob's file: %v, %v; want mode 0600", fi, err)
	}
	var rows int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkpoint_chunks`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("checkpoint_chunks holds %d rows (%v), want 0", rows, err)
	}
	if got := readBlob(t, s, "s-1", b.Hash); !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes, not the %d stored", len(got), len(big))
	}
	if bs, err := s.ListBlobs(ctx, "s-1"); err != nil || len(bs) != 1 || bs[0].Stored != int64(len(big)) {
		t.Fatalf("ListBlobs = %+v, %v; want one blob stored in %d bytes", bs, err, len(big))
	}

	small := oneBlob([]byte("a small file's content"))
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{small}); err != nil {
		t.Fatal(err)
	}
	if got := blobFiles(t, path); len(got) != 1 {
		t.Fatalf("blob files %v after a small blob, want the large one only: a small blob stays in the database", got)
	}
	if got := readBlob(t, s, "s-1", small.Hash); string(got) != "a small file's content" {
		t.Fatalf("the small blob reads %q", got)
	}

	calls := 0
	failing := store.BlobSource{Hash: "ab" + b.Hash[2:], Size: 1 << 20, Next: func() ([]byte, error) {
		if calls++; calls == 1 {
			return make([]byte, sqlstore.InlineBlobMax+1), nil // a file is begun
		}
		return nil, errors.New("the disk is gone")
	}}
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{failing}); err == nil {
		t.Fatal("a put whose content fails succeeded")
	}
	if got := blobFiles(t, path); len(got) != 1 {
		t.Fatalf("after a failed put the blob files are %v, want the first one only", got)
	}
	if m, err := s.MissingBlobs(ctx, "s-1", []string{failing.Hash}); err != nil || len(m) != 1 {
		t.Fatalf("the failed blob is held: missing %v, %v", m, err)
	}

	putCheckpoint(t, s, "c-1", 1, b.Hash)
	if err := s.DeleteCheckpoint(ctx, "s-1", "c-1"); err != nil {
		t.Fatal(err)
	}
	if got := blobFiles(t, path); len(got) != 0 {
		t.Fatalf("blob files %v after the last checkpoint naming them went, want none", got)
	}
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{oneBlob(big)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteSessions(ctx, store.Unfenced(), []string{"s-1"}); err != nil || n != 1 {
		t.Fatalf("DeleteSessions = %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(BlobDir(path), "s-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted session's blob directory: %v, want it gone", err)
	}
}

// TestOpenMovesChunksAndSweeps: blobs kept in checkpoint_chunks (by an
// earlier Trellis, or a backup) are moved into files when the store
// opens, and files no row names are removed.
func TestOpenMovesChunksAndSweeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateSession(ctx, store.Session{SessionID: "s-1", Workdir: "/w", Mode: "default", Kind: store.KindChat, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, sqlstore.InlineBlobMax+1)
	rand.Read(content)
	b := oneBlob(content)
	if err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_blobs (session_id, hash, size, stored) VALUES ('s-1', $1, $2, $2)`, b.Hash, len(content)); err != nil {
			return err
		}
		for i, part := range [][]byte{content[:10], content[10:]} { // chunks as an earlier Trellis stored them
			if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ('s-1', $1, $2, $3)`, b.Hash, i, part); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dir := BlobDir(path)
	orphans := []string{filepath.Join(dir, "s-1", b.Hash+".123.tmp"), filepath.Join(dir, "s-1", "ab"+b.Hash[2:]), filepath.Join(dir, "s-gone", b.Hash)}
	for _, p := range orphans {
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("left by a crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := blobFiles(t, path); !slices.Equal(got, []string{"s-1/" + b.Hash}) {
		t.Fatalf("blob files %v after open, want s-1/%s only", got, b.Hash)
	}
	if _, err := os.Stat(filepath.Join(dir, "s-gone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the directory of a session without blobs: %v, want it gone", err)
	}
	var rows int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkpoint_chunks`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("checkpoint_chunks holds %d rows (%v) after open, want 0", rows, err)
	}
	if got := readBlob(t, s, "s-1", b.Hash); !bytes.Equal(got, content) {
		t.Fatalf("read back %d bytes, not the %d stored", len(got), len(content))
	}
}

// TestBackupCarriesBlobs: a backup is one file that holds the blobs'
// content; restored, the blobs are files again and read back the same. A
// blob whose file is gone (its checkpoint deleted while the backup ran)
// takes the checkpoints naming it out of the backup, counted.
func TestBackupCarriesBlobs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "home", FileName)
	s := withSessionAt(t, path)
	ctx := context.Background()
	kept, lost, small := make([]byte, 1<<20+100), make([]byte, sqlstore.InlineBlobMax+1), []byte("a small file")
	rand.Read(kept)
	rand.Read(lost)
	bk, bl, bs := oneBlob(kept), oneBlob(lost), oneBlob(small)
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{bk, bl, bs}); err != nil {
		t.Fatal(err)
	}
	putCheckpoint(t, s, "c-1", 1, bk.Hash)
	putCheckpoint(t, s, "c-2", 2, bl.Hash)
	putCheckpoint(t, s, "c-3", 3, bs.Hash)
	if err := os.Remove(filepath.Join(BlobDir(path), "s-1", bl.Hash)); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	dropped, err := Backup(ctx, path, backup)
	if err != nil || dropped != 1 {
		t.Fatalf("Backup = %d, %v; want 1 checkpoint dropped", dropped, err)
	}
	restored := filepath.Join(dir, "other", FileName)
	if err := Restore(ctx, backup, restored); err != nil {
		t.Fatal(err)
	}
	r, err := Open(restored)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := readBlob(t, r, "s-1", bk.Hash); !bytes.Equal(got, kept) {
		t.Fatalf("the restored blob reads %d bytes, not the %d backed up", len(got), len(kept))
	}
	if got := readBlob(t, r, "s-1", bs.Hash); !bytes.Equal(got, small) {
		t.Fatalf("the restored small blob reads %q, want %q", got, small)
	}
	cs, err := r.ListCheckpoints(ctx, "s-1")
	if err != nil || len(cs) != 2 || cs[0].CheckpointID != "c-1" || cs[1].CheckpointID != "c-3" {
		t.Fatalf("restored checkpoints %+v, %v; want c-1 and c-3", cs, err)
	}
	if got := blobFiles(t, restored); !slices.Equal(got, []string{"s-1/" + bk.Hash}) {
		t.Fatalf("restored blob files %v, want s-1/%s", got, bk.Hash)
	}
}

// TestImportWritesBlobFiles: an imported large blob is a file, read back
// whole; an import that fails after writing one leaves no file, and a
// chunk out of order is refused.
func TestImportWritesBlobFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	big := make([]byte, 3*sqlstore.InlineBlobMax)
	rand.Read(big)
	b := oneBlob(big)
	fill := func(fail error) func(store.SessionWriter) error {
		return func(w store.SessionWriter) error {
			if err := w.Blob(ctx, store.Blob{Hash: b.Hash, Size: int64(len(big)), Stored: int64(len(big))}); err != nil {
				return err
			}
			for n, part := range [][]byte{big[:len(big)/2], big[len(big)/2:]} {
				if err := w.Chunk(ctx, b.Hash, n, part); err != nil {
					return err
				}
			}
			return fail
		}
	}
	row := func(id string) store.Session {
		return store.Session{SessionID: id, Workdir: "/w", Mode: "default", Kind: store.KindChat, CreatedAt: time.Now()}
	}

	if err := s.ImportSession(ctx, row("s-failed"), fill(errors.New("the file is truncated"))); err == nil {
		t.Fatal("an import whose fill failed succeeded")
	}
	if got := blobFiles(t, path); len(got) != 0 {
		t.Fatalf("blob files %v after a failed import, want none", got)
	}
	if _, err := s.GetSession(ctx, "s-failed"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed import's session: %v, want not found", err)
	}

	outOfOrder := func(w store.SessionWriter) error {
		if err := w.Blob(ctx, store.Blob{Hash: b.Hash, Size: int64(len(big)), Stored: int64(len(big))}); err != nil {
			return err
		}
		return w.Chunk(ctx, b.Hash, 1, big)
	}
	if err := s.ImportSession(ctx, row("s-order"), outOfOrder); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("an import with chunk 1 first: %v, want ErrInvalid", err)
	}

	if err := s.ImportSession(ctx, row("s-imported"), fill(nil)); err != nil {
		t.Fatal(err)
	}
	if got := blobFiles(t, path); !slices.Equal(got, []string{"s-imported/" + b.Hash}) {
		t.Fatalf("blob files %v after the import, want s-imported/%s", got, b.Hash)
	}
	if got := readBlob(t, s, "s-imported", b.Hash); !bytes.Equal(got, big) {
		t.Fatalf("the imported blob reads %d bytes, not the %d imported", len(got), len(big))
	}
}

// TestPutStreamsSmallBlobs: a put holds one chunk in memory at a time,
// whatever the number of blobs. A blob of at most a few KiB less than
// sqlstore.InlineBlobMax is read inside the transaction that stores it (the
// database is locked for writes while its content is read); a larger one
// is read before, into a temporary file, which becomes the blob's file
// or, when it compressed to InlineBlobMax or less, its chunk in the
// database. Every blob reads back as it was put.
func TestPutStreamsSmallBlobs(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := withSessionAt(t, path)
	ctx := context.Background()
	other, err := sql.Open("sqlite", path+"?_busy_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)
	locked := func() bool {
		if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return true
		}
		if _, err := other.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		return false
	}
	type blob struct {
		name    string
		content []byte // as stored
		size    int64  // as announced (uncompressed)
		inTx    bool   // read inside the transaction
		file    bool   // kept as a file
	}
	random := func(n int) []byte { b := make([]byte, n); rand.Read(b); return b }
	blobs := []*blob{
		{name: "small", content: random(4 << 10), size: 4 << 10, inTx: true},
		{name: "at the limit", content: random(sqlstore.InlineBlobMax - 2<<10), size: sqlstore.InlineBlobMax - 2<<10, inTx: true},
		{name: "compressed small", content: random(20 << 10), size: 300 << 10},
		{name: "large", content: random(300 << 10), size: 300 << 10, file: true},
	}
	var sources []store.BlobSource
	for _, b := range blobs {
		src := oneBlob(b.content)
		src.Size = b.size
		next := src.Next
		src.Next = func() ([]byte, error) {
			if got := locked(); got != b.inTx {
				t.Errorf("%s: the database was locked for writes (%v) while its content was read, want %v", b.name, got, b.inTx)
			}
			return next()
		}
		sources = append(sources, src)
	}
	if err := s.PutBlobs(ctx, "s-1", sources); err != nil {
		t.Fatal(err)
	}
	var files []string
	for i, b := range blobs {
		if got := readBlob(t, s, "s-1", sources[i].Hash); !bytes.Equal(got, b.content) {
			t.Errorf("%s: read back %d bytes, not the %d put", b.name, len(got), len(b.content))
		}
		if b.file {
			files = append(files, "s-1/"+sources[i].Hash)
		}
	}
	if got := blobFiles(t, path); !slices.Equal(got, files) {
		t.Errorf("blob files %v, want %v (no temporary file left)", got, files)
	}

	// A content that fails as it is read inside the transaction (a file
	// changed since its snapshot) fails the put with its error, and none of
	// the put's blobs is stored, the large one read before included.
	changed := errors.New("the file changed")
	large, small := oneBlob(random(300<<10)), oneBlob(random(1<<10))
	small.Next = func() ([]byte, error) { return nil, changed }
	if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{large, small}); !errors.Is(err, changed) {
		t.Fatalf("a put whose small content fails: %v, want its error", err)
	}
	if m, err := s.MissingBlobs(ctx, "s-1", []string{large.Hash, small.Hash}); err != nil || len(m) != 2 {
		t.Fatalf("after the failed put the store lacks %v (%v), want both of its blobs", m, err)
	}
	if got := blobFiles(t, path); !slices.Equal(got, files) {
		t.Errorf("blob files %v after the failed put, want %v", got, files)
	}
}

// BenchmarkPutManySmallBlobs puts what the first checkpoint of a workdir
// of 4,000 files of 16 KiB that do not compress stores (64 MiB), and
// reports the most Go heap in use seen while it did, above the heap before
// (peak-heap-MiB): the content held in memory at once (the collector runs
// at 5 % of growth, so that garbage does not count).
func BenchmarkPutManySmallBlobs(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	content := make([]byte, 16<<10)
	rand.Read(content)
	for range b.N {
		b.StopTimer()
		s := withSessionAt(b, filepath.Join(b.TempDir(), FileName))
		sources := make([]store.BlobSource, 4000)
		for i := range sources {
			c := bytes.Clone(content)
			c[0], c[1] = byte(i), byte(i>>8)
			sources[i] = oneBlob(c)
			sources[i].Next = copied(sources[i].Next) // a chunk of its own, as a compressor's
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapInuse, ms.HeapInuse
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapInuse)
				}
			}
		}()
		b.StartTimer()
		if err := s.PutBlobs(context.Background(), "s-1", sources); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		close(done)
		<-sampled
		b.ReportMetric(float64(peak-base)/(1<<20), "peak-heap-MiB")
	}
}

// copied makes next return a fresh copy of each chunk.
func copied(next func() ([]byte, error)) func() ([]byte, error) {
	return func() ([]byte, error) {
		c, err := next()
		return bytes.Clone(c), err
	}
}
