package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// RegisterDaemon inserts or refreshes a registry row.
func (s *Store) RegisterDaemon(ctx context.Context, d store.Daemon) error {
	if d.ID == "" {
		return fmt.Errorf("daemon: empty id: %w", store.ErrInvalid)
	}
	now := micros(time.Now())
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO daemons (id, grpc_addr, version, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET grpc_addr = excluded.grpc_addr, version = excluded.version, heartbeat_at = excluded.heartbeat_at`,
			d.ID, d.GRPCAddr, d.Version, now, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: register daemon %s: %w", d.ID, err)
	}
	return nil
}

// RemoveDaemon deletes a registry row.
func (s *Store) RemoveDaemon(ctx context.Context, id string) error {
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM daemons WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: remove daemon %s: %w", id, err)
	}
	return nil
}

// ListDaemons returns the registry by id.
func (s *Store) ListDaemons(ctx context.Context) ([]store.Daemon, error) {
	out, err := sqlstore.QueryAll(ctx, s.r, func(r sqlstore.Scanner) (store.Daemon, error) {
		var d store.Daemon
		var started, beat int64
		err := r.Scan(&d.ID, &d.GRPCAddr, &d.Version, &started, &beat)
		d.StartedAt, d.HeartbeatAt = fromMicros(started), fromMicros(beat)
		return d, err
	}, `SELECT id, grpc_addr, version, started_at, heartbeat_at FROM daemons ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list daemons: %w", err)
	}
	return out, nil
}

// AcquireLease takes the lease when it is free, expired or already owner's.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner string, ttl time.Duration) (store.Lease, error) {
	if sessionID == "" || owner == "" || ttl <= 0 {
		return store.Lease{}, fmt.Errorf("lease %q for %q: need a session, an owner and a positive ttl: %w", sessionID, owner, store.ErrInvalid)
	}
	var (
		l    store.Lease
		held *store.LeaseHeldError
	)
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		now := time.Now()
		cur, live, err := getLease(ctx, tx, sessionID, now)
		switch {
		case err == nil && live && cur.OwnerID != owner:
			held = &store.LeaseHeldError{Lease: cur}
			return nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		}
		l = store.Lease{SessionID: sessionID, OwnerID: owner, Epoch: cur.Epoch + 1, ExpiresAt: fromMicros(micros(now.Add(ttl)))}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_leases (session_id, owner_id, epoch, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (session_id) DO UPDATE SET owner_id = excluded.owner_id, epoch = excluded.epoch, expires_at = excluded.expires_at`,
			sessionID, owner, l.Epoch, micros(l.ExpiresAt))
		return err
	})
	switch {
	case err != nil:
		return store.Lease{}, fmt.Errorf("sqlite: acquire the lease of %s: %w", sessionID, err)
	case held != nil:
		return held.Lease, held
	}
	return l, nil
}

// GetLease returns the session's lease row.
func (s *Store) GetLease(ctx context.Context, sessionID string) (store.Lease, error) {
	l, _, err := getLease(ctx, s.r, sessionID, time.Now())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return l, fmt.Errorf("sqlite: get the lease of %s: %w", sessionID, err)
	}
	return l, err
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getLease(ctx context.Context, q querier, sessionID string, now time.Time) (store.Lease, bool, error) {
	l := store.Lease{SessionID: sessionID}
	var exp int64
	err := q.QueryRowContext(ctx, `SELECT l.owner_id, l.epoch, l.expires_at, COALESCE(d.grpc_addr, ''), COALESCE(d.version, '')
		FROM session_leases l LEFT JOIN daemons d ON d.id = l.owner_id WHERE l.session_id = ?`, sessionID).
		Scan(&l.OwnerID, &l.Epoch, &exp, &l.OwnerAddr, &l.OwnerVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return l, false, fmt.Errorf("lease of session %s: %w", sessionID, store.ErrNotFound)
	}
	if err != nil {
		return l, false, err
	}
	l.ExpiresAt = fromMicros(exp)
	return l, exp > micros(now), nil
}

// RenewLeases extends the leases that still have their owner and epoch.
func (s *Store) RenewLeases(ctx context.Context, owner string, leases []store.Lease, ttl time.Duration) ([]string, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	var kept []string
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		kept = kept[:0]
		exp := micros(time.Now().Add(ttl))
		for _, l := range leases {
			n, err := execAffected(ctx, tx, `UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND owner_id = ? AND epoch = ?`,
				exp, l.SessionID, owner, l.Epoch)
			if err != nil {
				return err
			}
			if n > 0 {
				kept = append(kept, l.SessionID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew leases: %w", err)
	}
	return kept, nil
}

// ReleaseLease expires the lease if it is still l.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE session_leases SET expires_at = ? WHERE session_id = ? AND owner_id = ? AND epoch = ?`,
			micros(time.Now())-1, l.SessionID, l.OwnerID, l.Epoch)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: release the lease of %s: %w", l.SessionID, err)
	}
	return nil
}
