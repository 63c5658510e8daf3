package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlstore"
)

// TakeProviderSlot decides t under the store's single writer, which holds
// the provider's row as PostgreSQL's FOR UPDATE does.
func (s *Store) TakeProviderSlot(ctx context.Context, t store.ProviderTake) (time.Duration, error) {
	return t.TakeWith(ctx, s.ProviderLimitState, s.takeProviderSlot)
}

// takeProviderSlot is TakeProviderSlot's decision, taken with the
// provider's row held.
func (s *Store) takeProviderSlot(ctx context.Context, t store.ProviderTake) (time.Duration, error) {
	var wait time.Duration
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		now := time.Now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO provider_limits (provider) VALUES (?) ON CONFLICT DO NOTHING`, t.Provider); err != nil {
			return err
		}
		row, err := providerRow(ctx, tx, t.Provider)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM provider_slots WHERE provider = ? AND expires_at <= ?`, t.Provider, micros(now)); err != nil {
			return err
		}
		var live int
		var earliest sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), MIN(expires_at) FROM provider_slots WHERE provider = ?`, t.Provider).Scan(&live, &earliest); err != nil {
			return err
		}
		var next store.ProviderRow
		wait, next = t.Decide(now, row, live, fromNullMicros(earliest))
		if wait > 0 {
			return nil
		}
		if t.Slots > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO provider_slots (provider, holder, owner, expires_at) VALUES (?, ?, ?, ?)`,
				t.Provider, t.Holder, t.Owner, micros(now.Add(t.Lease))); err != nil {
				return err
			}
		}
		if t.PerMinute > 0 {
			_, err = tx.ExecContext(ctx, `UPDATE provider_limits SET tokens = ?, refilled_at = ? WHERE provider = ?`,
				next.Tokens, micros(next.RefilledAt), t.Provider)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: take a slot of provider %s: %w", t.Provider, err)
	}
	return wait, nil
}

func providerRow(ctx context.Context, tx sqlstore.Tx, provider string) (store.ProviderRow, error) {
	var row store.ProviderRow
	var refilled, held sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT tokens, refilled_at, held_until FROM provider_limits WHERE provider = ?`, provider).
		Scan(&row.Tokens, &refilled, &held)
	row.RefilledAt, row.HeldUntil = fromNullMicros(refilled), fromNullMicros(held)
	return row, err
}

// RenewProviderSlots extends the slots that still exist.
func (s *Store) RenewProviderSlots(ctx context.Context, provider string, holders []string, lease time.Duration) ([]string, error) {
	if len(holders) == 0 {
		return nil, nil
	}
	var kept []string
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		until := micros(time.Now().Add(lease))
		for _, h := range holders {
			n, err := execAffected(ctx, tx, `UPDATE provider_slots SET expires_at = ? WHERE provider = ? AND holder = ?`, until, provider, h)
			if err != nil {
				return err
			}
			if n > 0 {
				kept = append(kept, h)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew the slots of provider %s: %w", provider, err)
	}
	return kept, nil
}

// ReleaseProviderSlot deletes the slot. One process uses the file, so
// there is nobody to announce it to.
func (s *Store) ReleaseProviderSlot(ctx context.Context, provider, holder string) error {
	if _, err := s.exec(ctx, `DELETE FROM provider_slots WHERE provider = ? AND holder = ?`, provider, holder); err != nil {
		return fmt.Errorf("sqlite: release a slot of provider %s: %w", provider, err)
	}
	return nil
}

// ClearProviderSlots deletes owner's slots.
func (s *Store) ClearProviderSlots(ctx context.Context, owner string) error {
	if _, err := s.exec(ctx, `DELETE FROM provider_slots WHERE owner = ?`, owner); err != nil {
		return fmt.Errorf("sqlite: clear the provider slots of %s: %w", owner, err)
	}
	return nil
}

// HoldProvider moves the provider's hold later.
func (s *Store) HoldProvider(ctx context.Context, provider string, d time.Duration) error {
	if strings.TrimSpace(provider) == "" {
		return fmt.Errorf("hold a provider: no provider: %w", store.ErrInvalid)
	}
	until := micros(time.Now().Add(d))
	_, err := s.exec(ctx, `INSERT INTO provider_limits (provider, held_until) VALUES (?, ?)
		ON CONFLICT (provider) DO UPDATE SET held_until = MAX(COALESCE(held_until, 0), excluded.held_until)`, provider, until)
	if err != nil {
		return fmt.Errorf("sqlite: hold provider %s: %w", provider, err)
	}
	return nil
}

// ProviderLimitState reads the provider's hold and live slots.
func (s *Store) ProviderLimitState(ctx context.Context, provider string) (store.ProviderLimitState, error) {
	now := micros(time.Now())
	var st store.ProviderLimitState
	var held sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT held_until FROM provider_limits WHERE provider = ?),
		(SELECT COUNT(*) FROM provider_slots WHERE provider = ? AND expires_at > ?)`, provider, provider, now).Scan(&held, &st.Slots)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, fmt.Errorf("sqlite: read the limits of provider %s: %w", provider, err)
	}
	if held.Valid && held.Int64 > now {
		st.HeldFor = time.Duration(held.Int64-now) * time.Microsecond
	}
	return st, nil
}
