package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-run/trellis/version"
)

// ErrUnsound: the database fails the start-up check (a table is missing or
// unreadable, or the schema is newer than this build).
var ErrUnsound = errors.New("the store's database fails its start-up check")

// checkedTables are the tables the store reads and writes; the start-up
// check reads one row of each.
var checkedTables = []string{
	"schema_migrations", "sessions", "events", "history", "allowlist", "approval_audit", "settings",
	"memories", "daemons", "session_leases", "approvals", "approvers",
}

// check is the PostgreSQL counterpart of SQLite's quick_check, run after
// the migrations: every migration this build knows is recorded and none it
// does not know (a newer trellisd migrated the schema), and one row of each
// table can be read (a dropped table, a missing privilege, or corruption
// the server detects — SQLSTATE XX001/XX002 — fails here). The error names
// the DSN without its password and says how to recover.
func check(ctx context.Context, pool *pgxpool.Pool, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ms, err := migrations()
	if err != nil {
		return err
	}
	known := map[int]bool{}
	latest := 0
	for _, m := range ms {
		known[m.version] = true
		latest = max(latest, m.version)
	}
	rows, err := pool.Query(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return unsound(dsn, "cannot read schema_migrations: "+err.Error(), restoreSteps)
	}
	recorded := map[int]bool{}
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			rows.Close()
			return unsound(dsn, "cannot read schema_migrations: "+err.Error(), restoreSteps)
		}
		if !known[v] {
			rows.Close()
			return unsound(dsn, fmt.Sprintf("the schema has migration %d (%s), newer than this trellisd %s knows (up to %d)%s",
				v, name, version.Server, latest, registeredVersions(ctx, pool)),
				"run the trellisd release that migrated it (or a newer one); do not point an older daemon at a newer schema")
		}
		recorded[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return unsound(dsn, "cannot read schema_migrations: "+err.Error(), restoreSteps)
	}
	for _, m := range ms {
		if !recorded[m.version] {
			return unsound(dsn, fmt.Sprintf("migration %s is not recorded in schema_migrations", m.name), restoreSteps)
		}
	}
	for _, table := range checkedTables {
		var one int
		err := pool.QueryRow(ctx, `SELECT 1 FROM `+table+` LIMIT 1`).Scan(&one)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return unsound(dsn, fmt.Sprintf("cannot read table %s: %v", table, err), restoreSteps)
		}
	}
	return nil
}

// registeredVersions names the versions the registry's daemons run (the
// newest heartbeats first), for the refusal of a schema newer than this
// build: "" when none recorded one or the registry cannot be read.
func registeredVersions(ctx context.Context, pool *pgxpool.Pool) string {
	rows, err := pool.Query(ctx, `SELECT id, version FROM daemons WHERE version <> '' ORDER BY heartbeat_at DESC LIMIT 5`)
	if err != nil {
		return ""
	}
	var runs []string
	for rows.Next() {
		var id, v string
		if rows.Scan(&id, &v) == nil {
			runs = append(runs, fmt.Sprintf("daemon %s runs trellisd %s", id, v))
		}
	}
	rows.Close()
	if len(runs) == 0 {
		return ""
	}
	return "; " + strings.Join(runs, ", ")
}

const restoreSteps = "restore the schema from your last backup (pg_dump/pg_restore, or point-in-time recovery), " +
	"or, if the server reports corruption (SQLSTATE XX001/XX002), check its log and run REINDEX or amcheck on the table; " +
	"to start over with an empty store instead, point --store at a new schema (search_path=...) or database (sessions and settings are then lost)"

func unsound(dsn, found, recovery string) error {
	return fmt.Errorf("%w: %s fails the PostgreSQL start-up check (%s); the daemon will not serve it. To recover, with every daemon on it stopped: %s",
		ErrUnsound, RedactDSN(dsn), found, recovery)
}

var kvPassword = regexp.MustCompile(`(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

// RedactDSN returns dsn without its password, as a URL (user:password@ or
// ?password=) or a key=value string (password=...).
func RedactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "a postgres:// DSN that does not parse"
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.User(u.User.Username())
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "password=…")
}
