package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env is the environment variable holding the test server's DSN.
const Env = "TRELLIS_TEST_POSTGRES"

// Example is a DSN for the server this project's machines and CI run.
const Example = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Server returns the test server's DSN, or skips t when Env is unset.
func Server(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		t.Skipf("PostgreSQL tests need a server: run with %s=%s (any database the user may create schemas in)", Env, Example)
	}
	return dsn
}

// FreshSchema creates an empty schema t_<random> on the server at dsn,
// drops it (with everything in it) when t ends, and returns dsn with the
// schema as its search_path.
func FreshSchema(t testing.TB, dsn string) string {
	t.Helper()
	schema := randomName("t_")
	exec(t, dsn, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { exec(t, dsn, `DROP SCHEMA `+schema+` CASCADE`) })
	return WithSearchPath(t, dsn, schema)
}

// randomName is prefix and 16 random hex digits.
func randomName(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// exec runs one statement on a connection of its own.
func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	execWithin(t, dsn, sql, 30*time.Second)
}

// execWithin is exec with its own time limit: dropping a database waits
// for the server to end its connections and flush, which a loaded machine
// can take longer than 30 s to do.
func execWithin(t testing.TB, dsn, sql string, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// WithSearchPath returns dsn with search_path, a run-time parameter pgx sends when it
// connects, in a URL or key=value DSN.
func WithSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		errors.As(err, &ue) // its message would quote the password
		t.Fatalf("pgtest: %s is not a URL: %v", Env, ue.Err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// FreshDatabase creates an empty database trellis_test_<random> on the
// server at dsn, drops it (closing its connections) when t ends, and
// returns dsn naming it: for tests that run several daemons, whose
// notifications must not reach other tests' daemons.
func FreshDatabase(t testing.TB, dsn string) string {
	t.Helper()
	name := randomName("trellis_test_")
	exec(t, dsn, `CREATE DATABASE `+name)
	t.Cleanup(func() { execWithin(t, dsn, `DROP DATABASE `+name+` WITH (FORCE)`, 2*time.Minute) })
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " dbname=" + name
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL", Env)
	}
	u.Path = "/" + name
	return u.String()
}

// ExpireLease ends the lease key (a session's, or a resource's such as
// "gateway/<bindingId>") at the database, as if its holder had not renewed
// it for a lease, while the holder still believes it holds it: another
// daemon may take it at once.
func ExpireLease(ctx context.Context, dsn, key string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1`, key)
	return err
}
