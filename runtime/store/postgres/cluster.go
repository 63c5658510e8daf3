package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// eventsChannel is the LISTEN/NOTIFY channel of committed events; the
// payload is "<sessionId> <lastSeq>". Readers fetch the events from the log.
const eventsChannel = "trellis_events"

// RegisterDaemon inserts or refreshes a registry row.
func (s *Store) RegisterDaemon(ctx context.Context, d store.Daemon) error {
	if d.ID == "" {
		return fmt.Errorf("daemon: empty id: %w", store.ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO daemons (id, grpc_addr, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET grpc_addr = EXCLUDED.grpc_addr, version = EXCLUDED.version, heartbeat_at = now()`, d.ID, d.GRPCAddr, d.Version)
	if err != nil {
		return flavor.Fail("register daemon "+d.ID, err)
	}
	return nil
}

// RemoveDaemon deletes a registry row.
func (s *Store) RemoveDaemon(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM daemons WHERE id = $1`, id); err != nil {
		return flavor.Fail("remove daemon "+id, err)
	}
	return nil
}

// ListDaemons returns the registry by id.
func (s *Store) ListDaemons(ctx context.Context) ([]store.Daemon, error) {
	out, err := queryAll(ctx, s.pool, func(row pgx.Row) (store.Daemon, error) {
		var d store.Daemon
		err := row.Scan(&d.ID, &d.GRPCAddr, &d.Version, &d.StartedAt, &d.HeartbeatAt)
		d.StartedAt, d.HeartbeatAt = d.StartedAt.UTC(), d.HeartbeatAt.UTC()
		return d, err
	}, `SELECT id, grpc_addr, version, started_at, heartbeat_at FROM daemons ORDER BY id`)
	if err != nil {
		return nil, flavor.Fail("list daemons", err)
	}
	return out, nil
}

func millis(d time.Duration) int64 { return d.Milliseconds() }

// AcquireLease takes the lease when it is free, expired or already owner's.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (store.Lease, error) {
	if sessionID == "" || owner == "" || ttl <= 0 {
		return store.Lease{}, fmt.Errorf("lease %q for %q: need a session, an owner and a positive ttl: %w", sessionID, owner, store.ErrInvalid)
	}
	// A lease seen held may expire or be released between the two
	// statements: look again a few times before reporting its holder.
	for range 3 {
		l := store.Lease{SessionID: sessionID, OwnerID: owner}
		err := s.pool.QueryRow(ctx, `INSERT INTO session_leases AS l (session_id, owner_id, epoch, expires_at)
			VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
			ON CONFLICT (session_id) DO UPDATE
				SET owner_id = EXCLUDED.owner_id, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at
				WHERE l.expires_at <= now() OR l.owner_id = EXCLUDED.owner_id
			RETURNING epoch, expires_at`, sessionID, owner, millis(ttl)).Scan(&l.Epoch, &l.ExpiresAt)
		if err == nil {
			l.ExpiresAt = l.ExpiresAt.UTC()
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, flavor.Fail("acquire the lease of "+sessionID, err)
		}
		var live bool
		held, err := s.getLease(ctx, sessionID, &live)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return store.Lease{}, err
		case live:
			return held, &store.LeaseHeldError{Lease: held}
		}
	}
	return store.Lease{}, fmt.Errorf("postgres: acquire the lease of %s: it changed hands three times in a row; try again", sessionID)
}

// GetLease returns the session's lease row.
func (s *Store) GetLease(ctx context.Context, sessionID string) (store.Lease, error) {
	return s.getLease(ctx, sessionID, nil)
}

func (s *Store) getLease(ctx context.Context, sessionID string, live *bool) (store.Lease, error) {
	l := store.Lease{SessionID: sessionID}
	var alive bool
	err := s.pool.QueryRow(ctx, `SELECT l.owner_id, l.epoch, l.expires_at, COALESCE(d.grpc_addr, ''), COALESCE(d.version, ''), l.expires_at > now()
		FROM session_leases l LEFT JOIN daemons d ON d.id = l.owner_id WHERE l.session_id = $1`, sessionID).
		Scan(&l.OwnerID, &l.Epoch, &l.ExpiresAt, &l.OwnerAddr, &l.OwnerVersion, &alive)
	if err != nil {
		return l, flavor.RowErr(err, "lease of session "+sessionID, "get the lease of "+sessionID)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	if live != nil {
		*live = alive
	}
	return l, nil
}

// RenewLeases extends the leases that still have their owner and epoch.
func (s *Store) RenewLeases(ctx context.Context, owner string, leases []store.Lease, ttl time.Duration) ([]string, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	ids := make([]string, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.SessionID, l.Epoch
	}
	rows, err := s.pool.Query(ctx, `UPDATE session_leases l SET expires_at = now() + $4 * interval '1 millisecond'
		FROM unnest($2::text[], $3::bigint[]) AS h(session_id, epoch)
		WHERE l.session_id = h.session_id AND l.epoch = h.epoch AND l.owner_id = $1
		RETURNING l.session_id`, owner, ids, epochs, millis(ttl))
	if err != nil {
		return nil, flavor.Fail("renew leases", err)
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, flavor.Fail("renew leases", err)
	}
	return kept, nil
}

// ReleaseLease expires the lease if it is still l.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE session_leases SET expires_at = now() - interval '1 millisecond'
		WHERE session_id = $1 AND owner_id = $2 AND epoch = $3`, l.SessionID, l.OwnerID, l.Epoch)
	if err != nil {
		return flavor.Fail("release the lease of "+l.SessionID, err)
	}
	return nil
}

// ListenEvents holds one connection LISTENing on the events channel and
// calls fn for each notification until ctx ends. After a lost connection it
// reconnects and calls fn("", 0): notifications sent meanwhile are gone.
func (s *Store) ListenEvents(ctx context.Context, fn func(sessionID string, seq int64)) error {
	return s.listen(ctx, eventsChannel, func(payload string) {
		id, seqText, ok := strings.Cut(payload, " ")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if !ok || err != nil || id == "" {
			return
		}
		fn(id, seq)
	}, func() { fn("", 0) })
}

// InitSetting stores value under namespace/key unless a value is already
// there, and returns the stored one: daemons starting together agree on
// the first writer's value (the cluster's shared token).
func (s *Store) InitSetting(ctx context.Context, namespace, key string, value json.RawMessage) (json.RawMessage, error) {
	if err := (store.Setting{Namespace: namespace, Key: key, Value: value}).Validate(); err != nil {
		return nil, err
	}
	var out []byte
	var err error
	// A concurrent first insert can leave both parts empty (the SELECT's
	// snapshot predates it): the next try sees it.
	for range 3 {
		err = s.pool.QueryRow(ctx, `WITH ins AS (
				INSERT INTO settings (namespace, key, value) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING value)
			SELECT value::text FROM ins UNION ALL SELECT value::text FROM settings WHERE namespace = $1 AND key = $2 LIMIT 1`,
			namespace, key, sqlstore.JSONText(value)).Scan(&out)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return nil, flavor.Fail("init setting "+namespace+"/"+key, err)
	}
	return out, nil
}

// WithLock runs fn while holding a session-level advisory lock named name
// in this database, waiting for it: daemons starting together run fn one
// after another (River's migrations, which are not safe to run at once).
func (s *Store) WithLock(ctx context.Context, name string, fn func() error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return flavor.Fail("lock "+name, err)
	}
	defer conn.Release()
	key := migrationLockKey("lock\x00" + name)
	reset, err := unbounded(ctx, conn)
	if err != nil {
		return flavor.Fail("lock "+name, err)
	}
	defer reset()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return flavor.Fail("lock "+name, err)
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			conn.Conn().Close(context.Background()) // ending the session releases it
		}
	}()
	return fn()
}
