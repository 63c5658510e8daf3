package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/retention"
	"github.com/trellis-run/trellis/runtime/store"
)

// PruneParams are the inputs of Prune. A nil rule is the daemon's
// (Deps.Retention); a zero one is off for this call.
type PruneParams struct {
	Within *time.Duration
	Latest *int
	Per    string // "" = the daemon's, else retention.PerWorkdir or PerAgent
	// DryRun lists what would be deleted and deletes nothing.
	DryRun bool
}

// Pruned is one session a retention policy keeps none of.
type Pruned struct {
	Row store.Session
	// LastActivity is its last turn's start, else its creation.
	LastActivity time.Time
	Reason       string
	// Held says why it was not deleted ("" = it was, or would be in a dry
	// run): a running turn, a pending approval, live on another daemon.
	Held string
	// CheckpointBytes is what its checkpoints' blobs took in the store.
	CheckpointBytes int64
}

// PruneResult is what Prune did.
type PruneResult struct {
	Policy retention.Policy
	// Sessions are those the policy keeps none of, oldest activity first;
	// Deleted counts those deleted (0 in a dry run), and CheckpointBytes
	// the checkpoint blobs they took (would take, in a dry run).
	Sessions        []Pruned
	Deleted         int
	CheckpointBytes int64
}

// policy is the retention policy params ask for: the daemon's
// (Deps.Retention) for each rule they leave out. A policy without a rule
// is invalid_params.
func (s *Service) policy(p PruneParams) (retention.Policy, error) {
	pol := s.deps.Retention
	if p.Within != nil {
		pol.Within = *p.Within
	}
	if p.Latest != nil {
		pol.Latest = *p.Latest
	}
	if p.Per != "" {
		pol.Per = p.Per
	}
	if pol.Per == "" {
		pol.Per = retention.PerWorkdir
	}
	if err := pol.Validate(); errors.Is(err, retention.ErrNoRule) {
		return pol, errs.New(errcode.InvalidParams, "no retention rule: give olderThan or keepLatest (the daemon has none: trellisd --retain, --retain-latest); with neither every session would go")
	} else if err != nil {
		return pol, errs.New(errcode.InvalidParams, "%v", err)
	}
	return pol, nil
}

// Prune deletes the saved sessions the retention policy keeps none of
// (docs/export.md, "Retention"), each with its events, history,
// checkpoints and blobs, and its workdir when the daemon made it; with
// DryRun it only lists them. Archived sessions are never deleted, nor
// those running a turn, with prompts queued, paused for their budget,
// waiting for an approval, or (several daemons) live on another daemon:
// those are listed with Held set. Each session is deleted in its own
// transaction under this daemon's lease, so that daemons pruning the same
// store at once delete each session once and skip what another deleted.
func (s *Service) Prune(ctx context.Context, p PruneParams) (PruneResult, error) {
	pol, err := s.policy(p)
	if err != nil {
		return PruneResult{}, err
	}
	res := PruneResult{Policy: pol}
	rows, err := s.deps.Store.ListSessions(ctx, store.SessionFilter{IncludeClosed: true})
	if err != nil {
		return res, fmt.Errorf("list sessions: %w", err)
	}
	elsewhere, paused := s.runningElsewhere(ctx, ""), s.pausedSessions(ctx, "")
	byID := map[string]store.Session{}
	cands := make([]retention.Session, 0, len(rows))
	for _, r := range rows {
		r = s.localize(r)
		byID[r.SessionID] = r
		last := r.LastActivityAt
		if last.IsZero() || last.Before(r.CreatedAt) {
			last = r.CreatedAt
		}
		cands = append(cands, retention.Session{ID: r.SessionID, LastActivity: last, Workdir: r.Workdir, Agent: r.Agent,
			Managed: r.Workspace == store.WorkspaceManaged, Archived: r.Archived, Busy: s.busyReason(r.SessionID, elsewhere, paused)})
	}
	for _, d := range retention.Select(pol, time.Now(), cands) {
		pr := Pruned{Row: byID[d.Session.ID], LastActivity: d.Session.LastActivity, Reason: d.Reason, Held: d.Session.Busy}
		if pr.Held == "" {
			if n, err := s.deps.Store.CheckpointBytes(ctx, pr.Row.SessionID); err == nil {
				pr.CheckpointBytes = n
			}
		}
		if pr.Held == "" && !p.DryRun {
			held, err := s.pruneOne(ctx, pr.Row)
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				// One session's failure does not stop the others.
				s.deps.Log.WarnContext(ctx, "prune: delete a session", "sessionId", pr.Row.SessionID, "err", err)
				held = heldFailed
			}
			pr.Held = held
			if held == "" {
				res.Deleted++
			}
		}
		if pr.Held == "" {
			res.CheckpointBytes += pr.CheckpointBytes
		}
		res.Sessions = append(res.Sessions, pr)
	}
	return res, nil
}

// busyReason says why session id cannot be deleted now ("" = it can).
func (s *Service) busyReason(id string, elsewhere, paused map[string]bool) string {
	if l := s.liveSession(id); l != nil {
		l.mu.Lock()
		running, queued := l.running != nil, len(l.queue)
		l.mu.Unlock()
		switch {
		case queued > 0:
			return "prompts are queued"
		case running:
			return "a turn is running"
		}
	}
	switch {
	case elsewhere[id]:
		return "a turn is running on another daemon"
	case paused[id]:
		return "its turn is paused for its budget"
	case s.deps.Approvals != nil && s.deps.Approvals.Pending(id) > 0:
		return "an approval is pending"
	}
	return ""
}

// Why pruneOne left a session.
const (
	heldElsewhere = "live on another daemon"
	heldGone      = "already deleted (by another daemon)"
	heldFailed    = "the delete failed (the daemon's log says why)"
)

// pruneOne deletes one session as DeleteSaved does, an idle live one
// included; it returns why it did not ("" = it did).
func (s *Service) pruneOne(ctx context.Context, row store.Session) (string, error) {
	id := row.SessionID
	// Another daemon's prune may have deleted it since the listing: then
	// no lease is taken on a session that is gone.
	if _, err := s.deps.Store.GetSession(ctx, id); errors.Is(err, store.ErrNotFound) {
		return heldGone, nil
	} else if err != nil {
		return "", fmt.Errorf("load session %s: %w", id, err)
	}
	taken, left, err := s.leasesToDelete(ctx, []string{id})
	if err != nil {
		return "", err
	}
	defer func() {
		for _, t := range taken {
			s.deps.Leases.Release(context.WithoutCancel(ctx), t)
		}
	}()
	if len(left) == 0 {
		return heldElsewhere, nil
	}
	held, err := s.deleteIdle(ctx, id)
	if held != "" || err != nil {
		return held, err
	}
	if s.deps.Leases != nil {
		// Its lease row went with it: stop renewing it.
		s.deps.Leases.Release(context.WithoutCancel(ctx), id)
	}
	s.dropSettings(ctx, id)
	if s.deps.Browsers != nil {
		s.deps.Browsers.CloseSession(id)
	}
	if s.deps.Backends != nil {
		if err := s.deps.Backends.CloseSession(ctx, id); err != nil {
			s.deps.Log.Warn("prune: the session's container was not removed", "session", id, "err", err)
		}
	}
	if s.managed(id, row.Workdir) {
		_ = s.removeManaged(ctx, id) // logged
	} else if row.Workdir != "" && s.daemonWorkspace(row.Workdir) {
		if err := os.RemoveAll(row.Workdir); err != nil {
			s.deps.Log.Warn("prune: delete a session's workspace", "session", id, "dir", row.Workdir, "err", err)
		}
	}
	return "", nil
}

// deleteIdle deletes session id from the store unless it is live here
// with a turn running or prompts queued, and forgets it; it returns why
// it did not ("" = it did). s.mu is held across the delete, as in
// deleteSaved: a prompt that finds the session live waits, then loads it
// again and finds it gone.
func (s *Service) deleteIdle(ctx context.Context, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.live[id]; l != nil {
		l.mu.Lock()
		busy := l.running != nil || len(l.queue) > 0
		l.mu.Unlock()
		if busy {
			return "a turn started meanwhile", nil
		}
	}
	deleted, err := s.deps.Store.DeleteSessions(ctx, s.writer(id), []string{id})
	if errors.Is(err, store.ErrLeaseLost) {
		return heldElsewhere, nil
	}
	if err != nil {
		return "", fmt.Errorf("delete session %s: %w", id, err)
	}
	s.forget(id)
	if deleted == 0 {
		return heldGone, nil
	}
	return "", nil
}
