package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	sqlitedrv "modernc.org/sqlite"

	"github.com/trellis-run/trellis/runtime/store"
)

// TestOpen pins what Open promises beyond the store contract: a private file,
// WAL, durable commits (synced with fdatasync on Linux), foreign keys, a query-only read pool, and migrations
// applied once across reopenings.
func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", FileName)
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.CreateSession(ctx, store.Session{SessionID: "s-1", Kind: store.KindChat}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, pragma string
		onWriter     bool
		want         string
	}{
		{"journal mode", "journal_mode", true, "wal"},
		{"synchronous FULL", "synchronous", true, "2"},
		{"foreign keys", "foreign_keys", true, "1"},
		{"busy timeout", "busy_timeout", true, "10000"},
		{"no checkpoint in a commit", "wal_autocheckpoint", true, "0"},
		{"reader busy timeout", "busy_timeout", false, "10000"},
		{"reader query only", "query_only", false, "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := st.r
			if tc.onWriter {
				db = st.w
			}
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
			}
		})
	}
	if runtime.GOOS == "linux" && !sqlitedrv.FdatasyncEnabled() {
		t.Error("commits sync with fsync, want fdatasync")
	}
	if _, err := st.r.ExecContext(ctx, `DELETE FROM sessions`); err == nil {
		t.Error("the read pool accepted a write")
	}
	for _, f := range []string{path, path + "-wal"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	if _, err := st.GetSession(ctx, "s-1"); err != nil {
		t.Errorf("data lost across reopen: %v", err)
	}
	var n int
	if err := st.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := len(mustGlob(t)); n != want {
		t.Errorf("schema_migrations has %d rows after reopen, want %d", n, want)
	}
}

func mustGlob(t *testing.T) []string {
	names, err := migrationFS.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.Name()
	}
	return out
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, p := range []string{"", filepath.Join(t.TempDir(), "a?b.db")} {
		if st, err := Open(p); err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestOpenBatchDurability: with WithBatchDurability the write connection
// commits with synchronous NORMAL (WAL: no fsync per commit); everything
// else Open promises holds.
func TestOpenBatchDurability(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), FileName), WithBatchDurability())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for pragma, want := range map[string]string{"synchronous": "1", "journal_mode": "wal", "foreign_keys": "1"} {
		var got string
		if err := st.w.QueryRowContext(context.Background(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
}
