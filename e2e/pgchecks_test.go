package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/version"
)

// pgExec runs statements on a connection of their own.
func pgExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// withPassword puts a password into a postgres:// DSN (the test server
// trusts the user, so it is ignored there — and must never be printed).
func withPassword(t *testing.T, dsn, pw string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		t.Skipf("%s is not a postgres:// URL with a user", pgtest.Env)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// TestPostgresStoreIsCheckedAtStart: trellisd will not serve a PostgreSQL
// schema with a table it cannot read or a migration newer than it knows;
// it exits 1 naming the DSN without its password, the problem and the
// recovery.
func TestPostgresStoreIsCheckedAtStart(t *testing.T) {
	server := pgtest.Server(t)
	for name, tc := range map[string]struct {
		damage []string
		want   []string
	}{
		"table dropped": {[]string{"DROP TABLE history"}, []string{"cannot read table history", "pg_restore"}},
		// A newer daemon migrated it: the refusal names both versions.
		"newer schema": {[]string{"INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')",
			"INSERT INTO daemons (id, grpc_addr, version) VALUES ('d-future', '127.0.0.1:1', '9.9.9')"},
			[]string{"9999_future.sql", "newer than this trellisd " + version.Server, "daemon d-future runs trellisd 9.9.9"}},
	} {
		t.Run(name, func(t *testing.T) {
			dsn := withPassword(t, pgtest.FreshSchema(t, server), "hunter2-secret")
			// A sound schema first: a daemon that ran and stopped.
			d := startDaemonWith(t, daemon.Config{Store: dsn})
			createSession(t, dialGRPC(t, d), nil)
			d.Stop()
			pgExec(t, dsn, tc.damage...)

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			home := t.TempDir()
			out, err := exec.CommandContext(ctx, trellisdBin, "--home", home, "--provider", "fake", "--store", dsn).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("trellisd: %v\n%s", err, out)
			}
			redacted := strings.Replace(dsn, ":hunter2-secret@", "@", 1)
			for _, want := range append(tc.want, redacted, "will not serve", "To recover") {
				if !strings.Contains(string(out), want) {
					t.Errorf("output does not name %q:\n%s", want, out)
				}
			}
			if strings.Contains(string(out), "hunter2") {
				t.Errorf("the password is in the output:\n%s", out)
			}
			if _, err := os.Stat(home + "/daemon.json"); err == nil {
				t.Error("daemon.json written: the daemon served")
			}
		})
	}
}

// TestPostgresLockTimeoutIsStoreBusy: while another session holds a lock
// the daemon's write needs past the DSN's lock_timeout, the write answers
// store_busy with retry advice (not internal), and works once the lock is
// gone.
func TestPostgresLockTimeoutIsStoreBusy(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Set("lock_timeout", "500")
	u.RawQuery = q.Encode()
	d := startDaemonWith(t, daemon.Config{Store: u.String()})
	c := helloWS(t, d)
	createSession(t, c, nil)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	rerr := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	if rerr == nil || !rerr.HasCode("store_busy") || rerr.Data["retryAfterMs"] == nil || !strings.Contains(rerr.Message, "lock_timeout") {
		t.Fatalf("session.create under a held lock: %v (data %v)", rerr, rerr)
	}
	tx.Rollback(ctx)
	createSession(t, c, nil)
}

// TestPostgresDefaultLockTimeoutIsStoreBusy: with no lock_timeout in the
// DSN the daemon sets one (a quarter of --lease, docs/scale-out.md), so a
// call behind a held lock answers store_busy instead of hanging.
func TestPostgresDefaultLockTimeoutIsStoreBusy(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	d := startDaemonWith(t, daemon.Config{Store: dsn, Lease: 2 * time.Second})
	c := helloWS(t, d)
	createSession(t, c, nil)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	rerr := c.Call(ctx, "session.create", map[string]any{"workdir": t.TempDir()}, nil)
	if rerr == nil || !rerr.HasCode("store_busy") || !strings.Contains(rerr.Message, "lock_timeout") {
		t.Fatalf("session.create under a held lock with the daemon's lock_timeout: %v", rerr)
	}
	tx.Rollback(ctx)
	createSession(t, c, nil)
}
