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

const receiptColumns = `principal_id, operation_id, method, params_hash, session_id, turn_id, runner, state, error_code, outcome,
	started_at, touched_at, expires_at`

// scanReceipt reads one row of receiptColumns, judging Idle and Expired by
// now.
func scanReceipt(r sqlstore.Scanner, now time.Time) (store.Receipt, error) {
	var rc store.Receipt
	var started, touched, expires int64
	err := r.Scan(&rc.PrincipalID, &rc.OperationID, &rc.Method, &rc.ParamsHash, &rc.SessionID, &rc.TurnID, &rc.Runner, &rc.State,
		&rc.ErrorCode, &rc.Outcome, &started, &touched, &expires)
	rc.StartedAt, rc.TouchedAt, rc.ExpiresAt = fromMicros(started), fromMicros(touched), fromMicros(expires)
	rc.Idle = max(now.Sub(rc.TouchedAt), 0)
	rc.Expired = !rc.ExpiresAt.After(now)
	return rc, err
}

// BeginReceipt stores r as started unless a live receipt has its key.
func (s *Store) BeginReceipt(ctx context.Context, r store.Receipt, window time.Duration) (store.Receipt, bool, error) {
	if err := store.CheckReceipt(r, window); err != nil {
		return store.Receipt{}, false, err
	}
	var (
		out     store.Receipt
		created bool
	)
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		now := time.Now()
		cur, err := scanReceipt(tx.QueryRowContext(ctx, `SELECT `+receiptColumns+` FROM operation_receipts
			WHERE principal_id = ? AND operation_id = ?`, r.PrincipalID, r.OperationID), now)
		switch {
		case err == nil && !cur.Expired:
			out = cur
			return nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		}
		out = r
		out.State, out.ErrorCode, out.Outcome = store.ReceiptStarted, "", nil
		out.StartedAt = fromMicros(micros(now))
		out.TouchedAt, out.ExpiresAt = out.StartedAt, fromMicros(micros(now.Add(window)))
		out.Idle, out.Expired = 0, false
		if out.ParamsHash == nil {
			out.ParamsHash = []byte{}
		}
		created = true
		_, err = tx.ExecContext(ctx, `INSERT INTO operation_receipts (`+receiptColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', NULL, ?, ?, ?)
			ON CONFLICT (principal_id, operation_id) DO UPDATE SET method = excluded.method, params_hash = excluded.params_hash,
				session_id = excluded.session_id, turn_id = excluded.turn_id, runner = excluded.runner, state = excluded.state, error_code = '',
				outcome = NULL, started_at = excluded.started_at, touched_at = excluded.touched_at, expires_at = excluded.expires_at`,
			out.PrincipalID, out.OperationID, out.Method, out.ParamsHash, out.SessionID, out.TurnID, out.Runner, out.State,
			micros(out.StartedAt), micros(out.TouchedAt), micros(out.ExpiresAt))
		return err
	})
	if err != nil {
		return store.Receipt{}, false, fmt.Errorf("sqlite: begin the receipt of operation %s: %w", r.OperationID, err)
	}
	return out, created, nil
}

// TouchReceipt marks runner's started receipt as still acting.
func (s *Store) TouchReceipt(ctx context.Context, principalID, operationID, runner string) error {
	return s.updateReceipt(ctx, "touch", principalID, operationID, runner,
		`UPDATE operation_receipts SET touched_at = ? WHERE principal_id = ? AND operation_id = ? AND runner = ? AND state = 'started'`,
		micros(time.Now()), principalID, operationID, runner)
}

// FinishReceipt stores the outcome of runner's started receipt.
func (s *Store) FinishReceipt(ctx context.Context, principalID, operationID, runner, errorCode string, outcome []byte) error {
	if outcome == nil {
		outcome = []byte{}
	}
	return s.updateReceipt(ctx, "finish", principalID, operationID, runner,
		`UPDATE operation_receipts SET state = 'done', error_code = ?, outcome = ?, touched_at = ?
			WHERE principal_id = ? AND operation_id = ? AND runner = ? AND state = 'started'`,
		errorCode, outcome, micros(time.Now()), principalID, operationID, runner)
}

// ReleaseReceipt deletes runner's started receipt.
func (s *Store) ReleaseReceipt(ctx context.Context, principalID, operationID, runner string) error {
	return s.updateReceipt(ctx, "release", principalID, operationID, runner,
		`DELETE FROM operation_receipts WHERE principal_id = ? AND operation_id = ? AND runner = ? AND state = 'started'`,
		principalID, operationID, runner)
}

// updateReceipt runs query, an update of one started receipt, and answers
// ErrNotFound when it changed no row.
func (s *Store) updateReceipt(ctx context.Context, op, principalID, operationID, runner, query string, args ...any) error {
	var n int64
	err := s.writeTx(ctx, func(tx sqlstore.Tx) error {
		var err error
		n, err = execAffected(ctx, tx, query, args...)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlite: %s the receipt of operation %s: %w", op, operationID, err)
	case n == 0:
		return fmt.Errorf("started receipt of operation %s of %s by %s: %w", operationID, principalID, runner, store.ErrNotFound)
	}
	return nil
}

// GetReceipt returns the receipt with the key.
func (s *Store) GetReceipt(ctx context.Context, principalID, operationID string) (store.Receipt, error) {
	rc, err := scanReceipt(s.r.QueryRowContext(ctx, `SELECT `+receiptColumns+` FROM operation_receipts
		WHERE principal_id = ? AND operation_id = ?`, principalID, operationID), time.Now())
	if err != nil {
		return store.Receipt{}, flavor.RowErr(err, "receipt of operation "+operationID, "get the receipt of operation "+operationID)
	}
	return rc, nil
}

// DeleteExpiredReceipts deletes the expired receipts.
func (s *Store) DeleteExpiredReceipts(ctx context.Context) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM operation_receipts WHERE expires_at <= ?`, micros(time.Now()))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired receipts: %w", err)
	}
	return res.RowsAffected()
}
