package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// providerLimitsChannel is the LISTEN/NOTIFY channel of released provider
// slots; the payload is the provider's name.
const providerLimitsChannel = "trellis_provider_limits"

var (
	_ store.ProviderLimitStore    = (*Store)(nil)
	_ store.ProviderLimitNotifier = (*Store)(nil)
)

// TakeProviderSlot decides t in a transaction holding the provider's row
// (SELECT … FOR UPDATE): every daemon's takes of one provider run one
// after another. Times are the database server's clock, read once the row
// is held.
func (s *Store) TakeProviderSlot(ctx context.Context, t store.ProviderTake) (time.Duration, error) {
	return t.TakeWith(ctx, s.ProviderLimitState, s.takeProviderSlot)
}

// takeProviderSlot is TakeProviderSlot's decision, taken with the
// provider's row held.
func (s *Store) takeProviderSlot(ctx context.Context, t store.ProviderTake) (time.Duration, error) {
	var wait time.Duration
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO provider_limits (provider) VALUES ($1) ON CONFLICT DO NOTHING`, t.Provider); err != nil {
			return err
		}
		var row store.ProviderRow
		var refilled, held *time.Time
		var now time.Time
		err := tx.QueryRow(ctx, `SELECT tokens, refilled_at, held_until FROM provider_limits WHERE provider = $1 FOR UPDATE`,
			t.Provider).Scan(&row.Tokens, &refilled, &held)
		if err != nil {
			return err
		}
		// The time once the row is held: the locking statement's own
		// clock_timestamp() may be from before its wait for the lock.
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return err
		}
		if refilled != nil {
			row.RefilledAt = *refilled
		}
		if held != nil {
			row.HeldUntil = *held
		}
		if _, err := tx.Exec(ctx, `DELETE FROM provider_slots WHERE provider = $1 AND expires_at <= $2`, t.Provider, now); err != nil {
			return err
		}
		var live int
		var earliest *time.Time
		if err := tx.QueryRow(ctx, `SELECT count(*), min(expires_at) FROM provider_slots WHERE provider = $1`, t.Provider).Scan(&live, &earliest); err != nil {
			return err
		}
		var first time.Time
		if earliest != nil {
			first = *earliest
		}
		var next store.ProviderRow
		wait, next = t.Decide(now, row, live, first)
		if wait > 0 {
			return nil
		}
		if t.Slots > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO provider_slots (provider, holder, owner, expires_at) VALUES ($1, $2, $3, $4)`,
				t.Provider, t.Holder, t.Owner, now.Add(t.Lease)); err != nil {
				return err
			}
		}
		if t.PerMinute > 0 {
			_, err = tx.Exec(ctx, `UPDATE provider_limits SET tokens = $2, refilled_at = $3 WHERE provider = $1`, t.Provider, next.Tokens, next.RefilledAt)
		}
		return err
	})
	if err != nil {
		return 0, flavor.Fail("take a slot of provider "+t.Provider, err)
	}
	return wait, nil
}

// RenewProviderSlots extends the slots that still exist.
func (s *Store) RenewProviderSlots(ctx context.Context, provider string, holders []string, lease time.Duration) ([]string, error) {
	if len(holders) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `UPDATE provider_slots SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
		WHERE provider = $1 AND holder = ANY($2::text[]) RETURNING holder`, provider, holders, millis(lease))
	if err != nil {
		return nil, flavor.Fail("renew the slots of provider "+provider, err)
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, flavor.Fail("renew the slots of provider "+provider, err)
	}
	return kept, nil
}

// ReleaseProviderSlot deletes the slot and announces it to every daemon's
// waiters (delivered on commit).
func (s *Store) ReleaseProviderSlot(ctx context.Context, provider, holder string) error {
	_, err := s.pool.Exec(ctx, `WITH d AS (DELETE FROM provider_slots WHERE provider = $1 AND holder = $2 RETURNING provider)
		SELECT pg_notify($3, provider) FROM d`, provider, holder, providerLimitsChannel)
	if err != nil {
		return flavor.Fail("release a slot of provider "+provider, err)
	}
	return nil
}

// ClearProviderSlots deletes owner's slots and announces each provider
// that had one.
func (s *Store) ClearProviderSlots(ctx context.Context, owner string) error {
	_, err := s.pool.Exec(ctx, `WITH d AS (DELETE FROM provider_slots WHERE owner = $1 RETURNING provider)
		SELECT pg_notify($2, provider) FROM (SELECT DISTINCT provider FROM d) AS p`, owner, providerLimitsChannel)
	if err != nil {
		return flavor.Fail("clear the provider slots of "+owner, err)
	}
	return nil
}

// HoldProvider moves the provider's hold later.
func (s *Store) HoldProvider(ctx context.Context, provider string, d time.Duration) error {
	if provider == "" {
		return fmt.Errorf("hold a provider: no provider: %w", store.ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO provider_limits AS l (provider, held_until) VALUES ($1, clock_timestamp() + $2 * interval '1 microsecond')
		ON CONFLICT (provider) DO UPDATE SET held_until = GREATEST(l.held_until, EXCLUDED.held_until)`, provider, d.Microseconds())
	if err != nil {
		return flavor.Fail("hold provider "+provider, err)
	}
	return nil
}

// ProviderLimitState reads the provider's hold and live slots.
func (s *Store) ProviderLimitState(ctx context.Context, provider string) (store.ProviderLimitState, error) {
	var st store.ProviderLimitState
	var heldMicros *int64
	err := s.pool.QueryRow(ctx, `SELECT
			(SELECT (extract(epoch FROM held_until - clock_timestamp()) * 1000000)::bigint FROM provider_limits WHERE provider = $1),
			(SELECT count(*) FROM provider_slots WHERE provider = $1 AND expires_at > clock_timestamp())`, provider).Scan(&heldMicros, &st.Slots)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return st, flavor.Fail("read the limits of provider "+provider, err)
	}
	if heldMicros != nil && *heldMicros > 0 {
		st.HeldFor = time.Duration(*heldMicros) * time.Microsecond
	}
	return st, nil
}

// ListenProviderLimits holds one connection LISTENing on the channel of
// released slots and calls fn for each until ctx ends; after a lost
// connection it reconnects and calls fn(""): releases announced meanwhile
// are gone.
func (s *Store) ListenProviderLimits(ctx context.Context, fn func(provider string)) error {
	return s.listen(ctx, providerLimitsChannel, fn, func() { fn("") })
}
