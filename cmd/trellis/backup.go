package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func newBackupCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent copy of the home's SQLite store to FILE (the daemon may keep running)",
		Long: `trellis backup writes a consistent copy of the store of the home directory
(<home>/trellis.db) to FILE, a new file of mode 0600, while the daemon keeps running:
the copy is the store as of the moment the backup started. It then checks the copy
(SQLite's quick_check, every session's events without a gap) and says what it holds.

The copy has the sessions, their events and history, their checkpoints with the
files they recorded (kept in <home>/trellis.db-blobs/, copied into the one file),
settings, schedules, principals and the hashes of API keys. It does not have <home>/token, <home>/secrets/ (provider
API keys) or TLS files: copy those yourself, keeping their modes.

A PostgreSQL store is backed up with pg_dump (docs/operations.md, Backup and restore).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.backup(cmd.Context(), args[0])
		},
	}
}

func newRestoreCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "restore FILE",
		Short: "Make a backup FILE the store of the home directory (which has none), after checking it",
		Long: `trellis restore checks a backup made by trellis backup (SQLite's quick_check,
a schema this build knows, every session's events without a gap) and makes it the
store of the home directory (--home), which must have no store yet and no daemon
running. The next daemon of that home serves the restored sessions; a turn that was
running when the backup was made ends there as interrupted.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.restore(cmd.Context(), args[0])
		},
	}
}

// sqliteStore is the home's SQLite database, or an error saying why the
// home has none to back up.
func (a *app) sqliteStore() (string, error) {
	if info, err := daemonfile.Read(a.home); err == nil && strings.HasPrefix(info.Store, "postgres") {
		return "", &exitError{code: exitFailed, msg: fmt.Sprintf("the daemon of %s uses a PostgreSQL store (%s): back it up with pg_dump "+
			"(docs/operations.md, Backup and restore)", a.home, info.Store)}
	}
	db := filepath.Join(a.home, sqlite.FileName)
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		return "", &exitError{code: exitFailed, msg: fmt.Sprintf("%s has no store (%s does not exist): nothing to back up", a.home, db)}
	}
	return db, nil
}

func (a *app) backup(ctx context.Context, file string) error {
	db, err := a.sqliteStore()
	if err != nil {
		return err
	}
	if _, err := os.Stat(file); err == nil {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("%s exists: a backup is written to a new file", file)}
	}
	start := time.Now()
	dropped, err := sqlite.Backup(ctx, db, file)
	if err != nil {
		return err
	}
	sum, err := sqlite.Inspect(ctx, file)
	if err != nil {
		return fmt.Errorf("the backup %s does not check out (%w); it is left there for a look, do not restore it", file, err)
	}
	if len(sum.Gaps) > 0 {
		return fmt.Errorf("the backup %s has sessions whose events have gaps (%s): the store itself has them; run trellis restore on an older backup",
			file, strings.Join(sum.Gaps, ", "))
	}
	size := int64(0)
	if fi, err := os.Stat(file); err == nil {
		size = fi.Size()
	}
	fmt.Fprintf(a.stdout, "backed up %s to %s: %d sessions, %d events, %s, in %s\n", db, file, sum.Sessions, sum.Events,
		humanBytes(size), time.Since(start).Round(time.Millisecond))
	if dropped > 0 {
		fmt.Fprintf(a.stderr, "%d checkpoints deleted while the backup ran lost their files before they were copied: the backup has them no more\n", dropped)
	}
	fmt.Fprintf(a.stderr, "not in the backup: %s (the token), %s (provider API keys), TLS files; copy them yourself, keeping their modes\n",
		filepath.Join(a.home, "token"), filepath.Join(a.home, "secrets"))
	return nil
}

func (a *app) restore(ctx context.Context, file string) error {
	if _, err := client.Probe(ctx, a.home, 3*time.Second); err == nil {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("a daemon is running for %s: stop it (trellis --home %s stop) and restore into a home without a store", a.home, a.home)}
	}
	sum, err := sqlite.Inspect(ctx, file)
	if err != nil {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("%s cannot be restored: %v", file, err)}
	}
	if len(sum.Gaps) > 0 {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("%s cannot be restored: the events of %s have gaps", file, strings.Join(sum.Gaps, ", "))}
	}
	db := filepath.Join(a.home, sqlite.FileName)
	if err := sqlite.Restore(ctx, file, db); err != nil {
		return &exitError{code: exitFailed, msg: err.Error()}
	}
	fmt.Fprintf(a.stdout, "restored %s into %s: %d sessions, %d events; the next daemon of this home serves them\n",
		file, db, sum.Sessions, sum.Events)
	return nil
}

// humanBytes is n in B, KiB or MiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
