package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// ErrCorrupt: the database file fails SQLite's integrity check.
var ErrCorrupt = errors.New("the store's database is corrupt")

// QuickCheck runs PRAGMA quick_check on the database at path, read-only,
// and returns an error wrapping ErrCorrupt that names the file, what SQLite
// found and how to recover, when the file is not a sound SQLite database.
// A missing file passes: the daemon creates it. An empty one does not
// (SQLite would take it for an empty database): Open writes the header the
// moment it creates the file, so an empty file is a store that was
// truncated or replaced, and serving it would silently start from nothing.
func QuickCheck(ctx context.Context, path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: check %s: %w", path, err)
	}
	if fi.Size() == 0 {
		// With a write-ahead log beside it, SQLite rebuilds the database
		// from the log: quick_check judges the result.
		if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
			return empty(path)
		}
	}
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000&_query_only=1")
	if err != nil {
		return fmt.Errorf("sqlite: check %s: %w", path, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return corrupt(path, err.Error())
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return corrupt(path, err.Error())
		}
		if line != "ok" && len(problems) < 10 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return corrupt(path, err.Error())
	}
	if len(problems) > 0 {
		return corrupt(path, strings.Join(problems, "; "))
	}
	return nil
}

func empty(path string) error {
	return fmt.Errorf("%w: %s is empty (0 bytes), and a store the daemon created never is: it was truncated or replaced "+
		"(a failed copy or restore, a full disk), or the daemon stopped in the instant it created it. The daemon will not start "+
		"on it as an empty store. Restore the file from a backup, or, to start with an empty store (sessions and settings are "+
		"then lost), remove it: rm %[2]s", ErrCorrupt, path)
}

func corrupt(path, found string) error {
	return fmt.Errorf("%w: %s fails SQLite's quick_check (%s); the daemon will not serve it. "+
		"To recover, with the daemon stopped: keep a copy (cp %[2]s %[2]s.bad); try `sqlite3 %[2]s .recover | sqlite3 %[2]s.recovered` "+
		"and, if that works, move %[2]s.recovered to %[2]s (remove any %[2]s-wal and %[2]s-shm); "+
		"or move the file away to start with an empty store (sessions and settings are then lost)",
		ErrCorrupt, path, found)
}
