package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/runtime/store"
)

// approvalsChannel is the LISTEN/NOTIFY channel of the shared approval
// queue; the payload is "<kind> <requestId> <daemonId>".
const approvalsChannel = "trellis_approvals"

// keepResolved is how long a resolved request stays, so that a late answer
// is told how it ended.
const keepResolved = time.Hour

var _ store.ApprovalQueue = (*Store)(nil)

const approvalColumns = `request_id, session_id, origin, owner_id, request::text, resolution::text, created_at`

func scanApproval(row pgx.Row) (store.ApprovalRow, error) {
	var r store.ApprovalRow
	var req string
	var res *string
	if err := row.Scan(&r.RequestID, &r.SessionID, &r.Origin, &r.OwnerID, &req, &res, &r.CreatedAt); err != nil {
		return r, err
	}
	r.Request = json.RawMessage(req)
	if res != nil {
		r.Resolution = json.RawMessage(*res)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

// InsertApproval stores a pending request and announces it in the same
// transaction; old resolved requests are dropped on the way.
func (s *Store) InsertApproval(ctx context.Context, row store.ApprovalRow, by string) error {
	if row.RequestID == "" || row.SessionID == "" || row.OwnerID == "" || !json.Valid(row.Request) {
		return fmt.Errorf("approval %q: need a request id, a session, an owner and a JSON request: %w", row.RequestID, store.ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM approvals WHERE resolution IS NOT NULL AND resolved_at < now() - $1 * interval '1 millisecond'`, millis(keepResolved))
		b.Queue(`INSERT INTO approvals (request_id, session_id, origin, owner_id, request) VALUES ($1, $2, $3, $4, $5)`,
			row.RequestID, row.SessionID, row.Origin, row.OwnerID, string(row.Request))
		b.Queue(`SELECT pg_notify($1, $2)`, approvalsChannel, "pending "+row.RequestID+" "+by)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return flavor.Fail("insert approval "+row.RequestID, err)
	}
	return nil
}

// ResolveApproval resolves a pending request once.
func (s *Store) ResolveApproval(ctx context.Context, requestID string, resolution json.RawMessage, by string) (store.ApprovalRow, error) {
	if !json.Valid(resolution) {
		return store.ApprovalRow{}, fmt.Errorf("approval %s: the resolution is not JSON: %w", requestID, store.ErrInvalid)
	}
	var out store.ApprovalRow
	var lost error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanApproval(tx.QueryRow(ctx, `UPDATE approvals SET resolution = $2, resolved_at = now()
			WHERE request_id = $1 AND resolution IS NULL RETURNING `+approvalColumns, requestID, string(resolution)))
		if errors.Is(err, pgx.ErrNoRows) {
			r, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE request_id = $1`, requestID))
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				lost = fmt.Errorf("approval request %s: %w", requestID, store.ErrNotFound)
				return nil
			case err != nil:
				return err
			}
			out, lost = r, fmt.Errorf("approval request %s: %w", requestID, store.ErrResolved)
			return nil
		}
		if err != nil {
			return err
		}
		out = r
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, approvalsChannel, "resolved "+requestID+" "+by)
		return err
	})
	if err != nil {
		return store.ApprovalRow{}, flavor.Fail("resolve approval "+requestID, err)
	}
	return out, lost
}

// GetApproval returns one request.
func (s *Store) GetApproval(ctx context.Context, requestID string) (store.ApprovalRow, error) {
	r, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE request_id = $1`, requestID))
	if err != nil {
		return r, flavor.RowErr(err, "approval request "+requestID, "get approval "+requestID)
	}
	return r, nil
}

// PendingApprovals lists the pending requests, oldest first.
func (s *Store) PendingApprovals(ctx context.Context, sessionID string) ([]store.ApprovalRow, error) {
	out, err := queryAll(ctx, s.pool, scanApproval,
		`SELECT `+approvalColumns+` FROM approvals
		WHERE resolution IS NULL AND ($1 = '' OR session_id = $1) ORDER BY created_at, request_id`, sessionID)
	if err != nil {
		return nil, flavor.Fail("list pending approvals", err)
	}
	return out, nil
}

// SetApprover records where origin's approver is attached.
func (s *Store) SetApprover(ctx context.Context, origin, daemon string) error {
	if origin == "" || daemon == "" {
		return fmt.Errorf("approver: need an origin and a daemon: %w", store.ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO approvers (origin, daemon_id) VALUES ($1, $2)
		ON CONFLICT (origin) DO UPDATE SET daemon_id = EXCLUDED.daemon_id, attached_at = now()`, origin, daemon)
	if err != nil {
		return flavor.Fail("set the approver of "+origin, err)
	}
	return nil
}

// RemoveApprover forgets origin's approver if daemon still has it.
func (s *Store) RemoveApprover(ctx context.Context, origin, daemon string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM approvers WHERE origin = $1 AND daemon_id = $2`, origin, daemon); err != nil {
		return flavor.Fail("remove the approver of "+origin, err)
	}
	return nil
}

// ApproverOf returns the registered daemon origin's approver is attached to.
func (s *Store) ApproverOf(ctx context.Context, origin string, fresh time.Duration) (string, error) {
	var d string
	err := s.pool.QueryRow(ctx, `SELECT a.daemon_id FROM approvers a JOIN daemons d ON d.id = a.daemon_id
		WHERE a.origin = $1 AND d.heartbeat_at > now() - $2 * interval '1 millisecond'`, origin, millis(fresh)).Scan(&d)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", flavor.Fail("find the approver of "+origin, err)
	}
	return d, nil
}

// ClearApprovers forgets daemon's approvers.
func (s *Store) ClearApprovers(ctx context.Context, daemon string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM approvers WHERE daemon_id = $1`, daemon); err != nil {
		return flavor.Fail("clear the approvers of "+daemon, err)
	}
	return nil
}

// ListenApprovals calls fn for each announcement of the approval queue.
func (s *Store) ListenApprovals(ctx context.Context, fn func(store.ApprovalNote)) error {
	return s.listen(ctx, approvalsChannel, func(payload string) {
		parts := strings.SplitN(payload, " ", 3)
		if len(parts) != 3 || parts[1] == "" {
			return
		}
		fn(store.ApprovalNote{Kind: parts[0], RequestID: parts[1], By: parts[2]})
	}, func() { fn(store.ApprovalNote{}) })
}
