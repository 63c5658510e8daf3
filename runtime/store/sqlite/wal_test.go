package sqlite

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// oneBlob is a store.BlobSource of b as one chunk.
func oneBlob(b []byte) store.BlobSource {
	sum := sha256.Sum256(b)
	done := false
	return store.BlobSource{Hash: hex.EncodeToString(sum[:]), Size: int64(len(b)), Next: func() ([]byte, error) {
		if done {
			return nil, io.EOF
		}
		done = true
		return b, nil
	}}
}

// TestWALCopiedBesideCommits: no commit copies the log into the database
// file (the write connection's automatic checkpoint is off), and the log
// is copied all the same, by walCopier, soon after the writes.
func TestWALCopiedBesideCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := withSessionAt(t, path)
	ctx := context.Background()
	var every int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&every); err != nil || every != 0 {
		t.Fatalf("the write connection's wal_autocheckpoint = %d (%v), want 0", every, err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4<<20)
	rand.Read(big)
	if err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE big (data BLOB)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO big (data) VALUES ($1)`, big)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= before.Size()+int64(len(big)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database file is %d bytes 30 s after a commit of 4 MiB (%d before): the log was not copied", fi.Size(), before.Size())
		}
	}
	var got int64
	if err := s.r.QueryRowContext(ctx, `SELECT SUM(LENGTH(data)) FROM big`).Scan(&got); err != nil || got != int64(len(big)) {
		t.Fatalf("stored %d bytes (%v), want %d", got, err, len(big))
	}
}

// BenchmarkPutBlobs: one checkpoint's new content of 1 MiB, stored
// (batch durability: the CPU and the page writes, not the disk's sync).
func BenchmarkPutBlobs(b *testing.B) {
	s := withSession(b, WithBatchDurability())
	ctx := context.Background()
	big := make([]byte, 1<<20)
	for b.Loop() {
		b.StopTimer()
		rand.Read(big)
		src := oneBlob(big)
		b.StartTimer()
		if err := s.PutBlobs(ctx, "s-1", []store.BlobSource{src}); err != nil {
			b.Fatal(err)
		}
	}
}
