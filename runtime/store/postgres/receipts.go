package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// receiptColumns reads a receipt with its idleness and expiry by the
// server's clock.
const receiptColumns = `principal_id, operation_id, method, params_hash, session_id, turn_id, runner, state, error_code, outcome,
	started_at, touched_at, expires_at,
	GREATEST(extract(epoch FROM clock_timestamp() - touched_at), 0)::float8, expires_at <= clock_timestamp()`

func scanReceipt(r pgx.Row) (store.Receipt, error) {
	var rc store.Receipt
	var idle float64
	err := r.Scan(&rc.PrincipalID, &rc.OperationID, &rc.Method, &rc.ParamsHash, &rc.SessionID, &rc.TurnID, &rc.Runner, &rc.State,
		&rc.ErrorCode, &rc.Outcome, &rc.StartedAt, &rc.TouchedAt, &rc.ExpiresAt, &idle, &rc.Expired)
	rc.StartedAt, rc.TouchedAt, rc.ExpiresAt = rc.StartedAt.UTC(), rc.TouchedAt.UTC(), rc.ExpiresAt.UTC()
	rc.Idle = time.Duration(idle * float64(time.Second))
	return rc, err
}

// BeginReceipt stores r as started unless a live receipt has its key.
func (s *Store) BeginReceipt(ctx context.Context, r store.Receipt, window time.Duration) (store.Receipt, bool, error) {
	if err := store.CheckReceipt(r, window); err != nil {
		return store.Receipt{}, false, err
	}
	hash := r.ParamsHash
	if hash == nil {
		hash = []byte{}
	}
	// A receipt seen live may expire (and be swept) between the two
	// statements: look again a few times.
	for range 3 {
		rc, err := scanReceipt(s.pool.QueryRow(ctx, `INSERT INTO operation_receipts AS o (principal_id, operation_id, method,
				params_hash, session_id, turn_id, runner, state, error_code, outcome, started_at, touched_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 'started', '', NULL, now(), now(), now() + $8 * interval '1 millisecond')
			ON CONFLICT (principal_id, operation_id) DO UPDATE SET method = EXCLUDED.method, params_hash = EXCLUDED.params_hash,
				session_id = EXCLUDED.session_id, turn_id = EXCLUDED.turn_id, runner = EXCLUDED.runner, state = 'started', error_code = '', outcome = NULL,
				started_at = EXCLUDED.started_at, touched_at = EXCLUDED.touched_at, expires_at = EXCLUDED.expires_at
				WHERE o.expires_at <= clock_timestamp()
			RETURNING `+receiptColumns, r.PrincipalID, r.OperationID, r.Method, hash, r.SessionID, r.TurnID, r.Runner, millis(window)))
		if err == nil {
			return rc, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Receipt{}, false, flavor.Fail("begin the receipt of operation "+r.OperationID, err)
		}
		cur, err := s.GetReceipt(ctx, r.PrincipalID, r.OperationID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return store.Receipt{}, false, err
		case !cur.Expired:
			return cur, false, nil
		}
	}
	return store.Receipt{}, false, fmt.Errorf("postgres: begin the receipt of operation %s: it changed three times in a row; try again", r.OperationID)
}

// TouchReceipt marks runner's started receipt as still acting.
func (s *Store) TouchReceipt(ctx context.Context, principalID, operationID, runner string) error {
	return s.updateReceipt(ctx, "touch", principalID, operationID, runner,
		`UPDATE operation_receipts SET touched_at = clock_timestamp()
			WHERE principal_id = $1 AND operation_id = $2 AND runner = $3 AND state = 'started'`,
		principalID, operationID, runner)
}

// FinishReceipt stores the outcome of runner's started receipt.
func (s *Store) FinishReceipt(ctx context.Context, principalID, operationID, runner, errorCode string, outcome []byte) error {
	if outcome == nil {
		outcome = []byte{}
	}
	return s.updateReceipt(ctx, "finish", principalID, operationID, runner,
		`UPDATE operation_receipts SET state = 'done', error_code = $4, outcome = $5, touched_at = clock_timestamp()
			WHERE principal_id = $1 AND operation_id = $2 AND runner = $3 AND state = 'started'`,
		principalID, operationID, runner, errorCode, outcome)
}

// ReleaseReceipt deletes runner's started receipt.
func (s *Store) ReleaseReceipt(ctx context.Context, principalID, operationID, runner string) error {
	return s.updateReceipt(ctx, "release", principalID, operationID, runner,
		`DELETE FROM operation_receipts WHERE principal_id = $1 AND operation_id = $2 AND runner = $3 AND state = 'started'`,
		principalID, operationID, runner)
}

// updateReceipt runs query, an update of one started receipt, and answers
// ErrNotFound when it changed no row.
func (s *Store) updateReceipt(ctx context.Context, op, principalID, operationID, runner, query string, args ...any) error {
	tag, err := s.pool.Exec(ctx, query, args...)
	switch {
	case err != nil:
		return flavor.Fail(op+" the receipt of operation "+operationID, err)
	case tag.RowsAffected() == 0:
		return fmt.Errorf("started receipt of operation %s of %s by %s: %w", operationID, principalID, runner, store.ErrNotFound)
	}
	return nil
}

// GetReceipt returns the receipt with the key.
func (s *Store) GetReceipt(ctx context.Context, principalID, operationID string) (store.Receipt, error) {
	rc, err := scanReceipt(s.pool.QueryRow(ctx, `SELECT `+receiptColumns+` FROM operation_receipts
		WHERE principal_id = $1 AND operation_id = $2`, principalID, operationID))
	if err != nil {
		return store.Receipt{}, flavor.RowErr(err, "receipt of operation "+operationID, "get the receipt of operation "+operationID)
	}
	return rc, nil
}

// DeleteExpiredReceipts deletes the expired receipts.
func (s *Store) DeleteExpiredReceipts(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM operation_receipts WHERE expires_at <= clock_timestamp()`)
	if err != nil {
		return 0, flavor.Fail("delete expired receipts", err)
	}
	return tag.RowsAffected(), nil
}
