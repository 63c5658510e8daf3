package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// Backup writes a consistent copy of the database at src to dst, a new
// file of mode 0600 (the store holds settings and keys' hashes). It is
// SQLite's VACUUM INTO: one read transaction, so a daemon may go on writing
// meanwhile and the copy is the database as of its start, compacted. The
// checkpoint blobs' files (BlobDir) are then copied into the copy's
// checkpoint_chunks, so that the backup is one file; Open moves them out
// again. A checkpoint deleted while the backup ran may have lost its files
// before they were copied: it is left out of the copy, and counted in
// dropped. dst must not exist.
func Backup(ctx context.Context, src, dst string) (dropped int, err error) {
	if _, err := os.Stat(src); err != nil {
		return 0, fmt.Errorf("sqlite: back up %s: %w", src, err)
	}
	if strings.ContainsRune(src, '?') {
		return 0, fmt.Errorf("sqlite: unusable database path %q", src)
	}
	// VACUUM INTO fills an empty file: made here, private, and never over
	// an existing one.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("sqlite: back up into %s: %w", dst, err)
	}
	f.Close()
	db, err := sql.Open("sqlite", src+"?_busy_timeout=10000")
	if err != nil {
		os.Remove(dst)
		return 0, fmt.Errorf("sqlite: back up %s: %w", src, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		os.Remove(dst)
		return 0, fmt.Errorf("sqlite: back up %s into %s: %w", src, dst, err)
	}
	if dropped, err = embedBlobs(ctx, dst, BlobDir(src)); err != nil {
		os.Remove(dst)
		return 0, fmt.Errorf("sqlite: back up the checkpoint blobs of %s into %s: %w", src, dst, err)
	}
	return dropped, nil
}

// embedBlobs copies the files in dir of the blobs the database at path
// holds as files (sqlstore.InlineBlobMax) into its checkpoint_chunks, in one transaction. A blob without its
// file goes, with the checkpoints that name it; dropped counts them.
func embedBlobs(ctx context.Context, path, dir string) (dropped int, err error) {
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000&_foreign_keys=1")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	err = writeTx(ctx, db, func(tx sqlstore.Tx) error {
		type blob struct{ session, hash string }
		blobs, err := sqlstore.QueryAll(ctx, tx, func(r sqlstore.Scanner) (blob, error) {
			var b blob
			return b, r.Scan(&b.session, &b.hash)
		}, `SELECT session_id, hash FROM checkpoint_blobs WHERE stored > $1 ORDER BY session_id, hash`, sqlstore.InlineBlobMax)
		if err != nil {
			return err
		}
		buf := make([]byte, 1<<20)
		for _, b := range blobs {
			f, err := os.Open(filepath.Join(dir, b.session, b.hash))
			if errors.Is(err, fs.ErrNotExist) {
				n, err := affected(ctx, tx, `DELETE FROM checkpoints WHERE session_id = $1 AND (manifest = $2
					OR checkpoint_id IN (SELECT checkpoint_id FROM checkpoint_refs WHERE session_id = $1 AND hash = $2))`, b.session, b.hash)
				if err != nil {
					return err
				}
				dropped += int(n)
				if _, err := tx.ExecContext(ctx, `DELETE FROM checkpoint_blobs WHERE session_id = $1 AND hash = $2`, b.session, b.hash); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			for n := 0; ; n++ {
				k, rerr := io.ReadFull(f, buf)
				if k > 0 {
					if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint_chunks (session_id, hash, n, data) VALUES ($1, $2, $3, $4)`,
						b.session, b.hash, n, buf[:k]); err != nil {
						f.Close()
						return err
					}
				}
				if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
					break
				}
				if rerr != nil {
					f.Close()
					return rerr
				}
			}
			f.Close()
		}
		return nil
	})
	return dropped, err
}

func affected(ctx context.Context, q sqlstore.Querier, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Summary is what a database file holds, as Inspect finds it.
type Summary struct {
	Schema   int   // the newest migration applied
	Sessions int64 // sessions stored
	Events   int64 // events stored
	// Gaps names the sessions whose events do not run 1, 2, 3 … without a
	// hole (at most 10 of them).
	Gaps []string
}

// ErrNewerSchema: the database was written by a newer Trellis.
var ErrNewerSchema = errors.New("the database's schema is newer than this build's")

// Inspect checks a database file without changing it: SQLite's quick_check
// (ErrCorrupt), that it is a Trellis store this build can open (its schema
// no newer than this build's: ErrNewerSchema), and how many sessions and
// events it holds, with the sessions whose event log has a gap.
func Inspect(ctx context.Context, path string) (Summary, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	if fi.IsDir() {
		return Summary{}, fmt.Errorf("sqlite: %s is a directory, not a database file", path)
	}
	if err := QuickCheck(ctx, path); err != nil {
		return Summary{}, err
	}
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000&_query_only=1")
	if err != nil {
		return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	defer db.Close()
	var s Summary
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&s.Schema); err != nil {
		return Summary{}, fmt.Errorf("%w: %s is not a Trellis store (%v)", ErrCorrupt, path, err)
	}
	if newest := newestMigration(); s.Schema > newest {
		return s, fmt.Errorf("%w: %s is at schema version %d, this build knows up to %d: use the Trellis that wrote it, or a newer one",
			ErrNewerSchema, path, s.Schema, newest)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions`).Scan(&s.Sessions); err != nil {
		return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&s.Events); err != nil {
		return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT session_id FROM events GROUP BY session_id
		HAVING MIN(seq) != 1 OR MAX(seq) != COUNT(*) ORDER BY session_id LIMIT 10`)
	if err != nil {
		return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return Summary{}, fmt.Errorf("sqlite: inspect %s: %w", path, err)
		}
		s.Gaps = append(s.Gaps, id)
	}
	return s, rows.Err()
}

// newestMigration is the version of the newest embedded migration.
func newestMigration() int {
	names, _ := migrationFS.ReadDir("migrations")
	newest := 0
	for _, e := range names {
		var v int
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > newest {
			newest = v
		}
	}
	return newest
}

// Restore makes a copy of the backup file src the database at dst (which
// must not exist), mode 0600, written under a temporary name and renamed
// into place, then opens it once so that its schema is brought up to this
// build's. The caller checks src with Inspect first.
func Restore(ctx context.Context, src, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("sqlite: %s exists: restore into a home without a store, or move it away first", dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("sqlite: restore into %s: %w", dst, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("sqlite: restore %s: %w", src, err)
	}
	defer in.Close()
	tmp := dst + ".restoring"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: restore into %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("sqlite: restore %s into %s: %w", src, dst, err)
	}
	if err := errors.Join(out.Sync(), out.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sqlite: restore %s into %s: %w", src, dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sqlite: restore into %s: %w", dst, err)
	}
	st, err := Open(dst)
	if err != nil {
		return fmt.Errorf("sqlite: the restored store %s does not open: %w", dst, err)
	}
	return st.Close()
}
