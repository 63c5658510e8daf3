package approval

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// The broker's cluster half (BrokerOptions.Cluster): on a store several
// daemons share, every request is a row of the shared queue and every
// change is announced to all daemons.
//
//   - The owner of the session (the daemon whose turn asks) inserts the
//     request, then waits as alone; its outcome is the request's first
//     resolution recorded in the store, whoever recorded it.
//   - An interactive request whose origin's approver is attached to another
//     daemon is delivered by that daemon, which hears of it by the
//     announcement; the approver's answer is recorded there.
//   - approval.pending and approval.resolved reach the watchers of every
//     daemon from the announcements; approval.list reads the store.
//   - A response on any daemon resolves the row if it is still pending
//     (UPDATE … WHERE resolution IS NULL): exactly one answer wins, a
//     later one is not_found ("already resolved").

// clusterTimeout bounds each call to the shared store.
const clusterTimeout = 10 * time.Second

// remoteRequest is a request another daemon owns that this daemon told
// about: delivered to an approver attached here, or (approver nil)
// announced to the watchers as pending.
type remoteRequest struct {
	req      Request
	approver *Approver
}

func (b *Broker) cctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), clusterTimeout)
}

// approverElsewhere reports whether origin's approver is attached to another
// daemon of the cluster.
func (b *Broker) approverElsewhere(ctx context.Context, origin string) bool {
	if b.opts.Cluster == nil || origin == "" {
		return false
	}
	ctx, cancel := b.cctx(ctx)
	defer cancel()
	d, err := b.opts.Cluster.ApproverOf(ctx, origin, b.opts.Liveness)
	if err != nil {
		b.log.Warn("approval: find the daemon of an approver", "origin", origin, "err", err)
		return false
	}
	return d != "" && d != b.opts.DaemonID
}

// share inserts a new request in the shared queue.
func (b *Broker) share(ctx context.Context, req Request) error {
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := b.cctx(ctx)
	defer cancel()
	return b.opts.Cluster.InsertApproval(ctx, store.ApprovalRow{RequestID: req.RequestID, SessionID: req.SessionID,
		Origin: req.Origin, OwnerID: b.opts.DaemonID, Request: raw}, b.opts.DaemonID)
}

// resolveShared records o in the store unless another resolution got there
// first, and returns the outcome that stands.
func (b *Broker) resolveShared(req Request, o outcome) outcome {
	raw, err := json.Marshal(o.res)
	if err != nil {
		if o.err == nil {
			return unrecordedAllow(req, o)
		}
		return o
	}
	ctx, cancel := b.cctx(context.Background())
	defer cancel()
	row, err := b.opts.Cluster.ResolveApproval(ctx, req.RequestID, raw, b.opts.DaemonID)
	switch {
	case err == nil:
		return o
	case errors.Is(err, store.ErrResolved):
		var won Resolution
		if json.Unmarshal(row.Resolution, &won) == nil {
			return outcomeOf(req, won)
		}
		return o
	default:
		// A deny stands here; other daemons see the request pending until
		// it is swept with the session. An allow the store did not record
		// is a deny: another daemon may have taken the session over and
		// denied the request already.
		b.log.Warn("approval: record a resolution in the shared queue", "requestId", req.RequestID, "err", err)
		if o.err == nil {
			return unrecordedAllow(req, o)
		}
		return o
	}
}

// outcomeOf turns a recorded resolution into what Ask returns.
func outcomeOf(req Request, res Resolution) outcome {
	switch {
	case res.Decision == DecisionAllow:
		return outcome{res: res}
	case res.By == ByTimeout:
		return outcome{res: res, err: errs.Wrap(errcode.ApprovalTimeout, ErrTimeout, "%s was not approved: %s", req.Tool, res.Reason)}
	}
	msg := req.Tool + " was denied by " + res.By
	if res.Reason != "" {
		msg += ": " + res.Reason
	}
	return outcome{res: res, err: errs.Wrap(errcode.ApprovalDenied, ErrDenied, "%s", msg)}
}

// respondRemote answers a request this daemon does not own: it checks the
// row, records the resolution build makes if the request is still pending,
// and tells the local watchers (the owner hears of it by the announcement).
// onlyOrigin: only the request's origin may resolve it (Approver.Fail).
func (b *Broker) respondRemote(by, requestID string, build func(Request) (outcome, error), onlyOrigin bool) error {
	ctx, cancel := b.cctx(context.Background())
	defer cancel()
	row, err := b.opts.Cluster.GetApproval(ctx, requestID)
	if errors.Is(err, store.ErrNotFound) {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, err := b.lookupLocked(requestID) // not_found, saying how it ended when known
		return err
	}
	if err != nil {
		return errs.Wrap(errcode.StoreUnavailable, err, "approval request %s: the shared approval queue is unavailable; try again", requestID)
	}
	var req Request
	if err := json.Unmarshal(row.Request, &req); err != nil {
		return errs.Wrap(errcode.Internal, err, "approval request %s: unreadable in the shared queue", requestID)
	}
	if row.Resolution != nil {
		return alreadyResolved(requestID, row.Resolution)
	}
	if (req.Origin != "" || onlyOrigin) && by != req.Origin {
		who := by
		if who == "" {
			who = "an anonymous caller"
		}
		return errs.Wrap(errcode.Unauthorized, ErrNotYours,
			"approval request %s is not %s's to answer: it was sent to the approver of session %s's origin, and only that connection may answer it",
			requestID, who, req.SessionID)
	}
	o, err := build(req)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(o.res)
	row, err = b.opts.Cluster.ResolveApproval(ctx, requestID, raw, b.opts.DaemonID)
	switch {
	case errors.Is(err, store.ErrResolved):
		return alreadyResolved(requestID, row.Resolution)
	case errors.Is(err, store.ErrNotFound):
		return errs.Wrap(errcode.NotFound, ErrNotPending, "no pending approval request %q", requestID)
	case err != nil:
		return errs.Wrap(errcode.StoreUnavailable, err, "approval request %s: the shared approval queue is unavailable; try again", requestID)
	}
	b.mu.Lock()
	b.publishResolvedLocked(o.res)
	b.mu.Unlock()
	b.log.Info("approval: answered a request of another daemon", "requestId", requestID, "sessionId", req.SessionID,
		"decision", o.res.Decision, "by", o.res.By, "owner", row.OwnerID)
	return nil
}

func alreadyResolved(requestID string, raw json.RawMessage) error {
	var r Resolution
	_ = json.Unmarshal(raw, &r)
	return errs.Wrap(errcode.NotFound, ErrNotPending, "approval request %s is already resolved (%s by %s)", requestID, r.Decision, r.By)
}

// publishResolvedLocked tells this daemon's watchers, and the local approver
// of a remote request, that a request another daemon owns was resolved;
// once per request.
func (b *Broker) publishResolvedLocked(res Resolution) {
	if _, seen := b.recent[res.RequestID]; seen {
		return
	}
	b.rememberLocked(res)
	b.broadcastLocked(QueueEvent{Resolved: &res})
	if rr := b.remote[res.RequestID]; rr != nil {
		delete(b.remote, res.RequestID)
		if rr.approver != nil && b.approvers[rr.approver.origin] == rr.approver {
			b.sendLocked(rr.approver, ApproverEvent{Resolved: &res})
		}
	}
}

// listShared lists the cluster's undecided requests of sessionID ("" =
// all) whose origin keep accepts.
func (b *Broker) listShared(sessionID string, keep func(origin string) bool) ([]Request, error) {
	ctx, cancel := b.cctx(context.Background())
	defer cancel()
	rows, err := b.opts.Cluster.PendingApprovals(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	var out []Request
	for _, row := range rows {
		if !keep(row.Origin) {
			continue
		}
		var req Request
		if err := json.Unmarshal(row.Request, &req); err != nil {
			continue
		}
		out = append(out, req)
	}
	return out, nil
}

// attachShared records where ap's origin is attached and delivers to it
// the pending requests of its origin that other daemons own (its client
// moved here).
func (b *Broker) attachShared(ap *Approver) {
	if b.opts.Cluster == nil {
		return
	}
	ctx, cancel := b.cctx(context.Background())
	defer cancel()
	if err := b.opts.Cluster.SetApprover(ctx, ap.origin, b.opts.DaemonID); err != nil {
		b.log.Warn("approval: record an approver in the shared store", "origin", ap.origin, "err", err)
		return
	}
	rows, err := b.opts.Cluster.PendingApprovals(ctx, "")
	if err != nil {
		b.log.Warn("approval: read the shared queue", "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, row := range rows {
		if row.Origin == ap.origin && row.OwnerID != b.opts.DaemonID {
			b.deliverRemoteLocked(row)
		}
	}
}

// detachSharedLocked forgets ap in the store and denies the remote requests
// waiting on it, as a local detach does (in the background: b.mu is held).
func (b *Broker) detachSharedLocked(ap *Approver) {
	if b.opts.Cluster == nil {
		return
	}
	var waiting []string
	for id, rr := range b.remote {
		if rr.approver == ap {
			waiting = append(waiting, id)
			delete(b.remote, id)
		}
	}
	go func() {
		ctx, cancel := b.cctx(context.Background())
		defer cancel()
		if err := b.opts.Cluster.RemoveApprover(ctx, ap.origin, b.opts.DaemonID); err != nil {
			b.log.Warn("approval: forget an approver in the shared store", "origin", ap.origin, "err", err)
		}
		for _, id := range waiting {
			err := b.respondRemote(ap.origin, id, func(req Request) (outcome, error) {
				return b.denied(req, ByDisconnect, "the approving connection went away", nil), nil
			}, false)
			if err != nil && errs.CodeOf(err) != errcode.NotFound {
				b.log.Warn("approval: deny a request whose approver went away", "requestId", id, "err", err)
			}
		}
	}()
}

// deliverRemoteLocked sends a request another daemon owns to the approver
// of its origin attached here, once.
func (b *Broker) deliverRemoteLocked(row store.ApprovalRow) {
	if _, sent := b.remote[row.RequestID]; sent {
		return
	}
	ap := b.approvers[row.Origin]
	if ap == nil {
		return
	}
	var req Request
	if err := json.Unmarshal(row.Request, &req); err != nil {
		return
	}
	b.remote[req.RequestID] = &remoteRequest{req: req, approver: ap}
	b.sendLocked(ap, ApproverEvent{Request: &req})
}

// Run applies the other daemons' changes of the shared queue until ctx
// ends: it returns at once without a Cluster.
func (b *Broker) Run(ctx context.Context) {
	if b.opts.Cluster == nil {
		return
	}
	// Approvers this daemon id recorded before a restart are gone; the ones
	// attached since (none yet at start) are recorded again on attach.
	b.mu.Lock()
	attached := len(b.approvers)
	b.mu.Unlock()
	if attached == 0 {
		cctx, cancel := b.cctx(ctx)
		if err := b.opts.Cluster.ClearApprovers(cctx, b.opts.DaemonID); err != nil {
			b.log.Warn("approval: forget the approvers of this daemon's previous run", "err", err)
		}
		cancel()
	}
	_ = b.opts.Cluster.ListenApprovals(ctx, func(n store.ApprovalNote) { b.onNote(ctx, n) })
}

func (b *Broker) onNote(ctx context.Context, n store.ApprovalNote) {
	if n.Kind == "" {
		b.resync(ctx)
		return
	}
	if n.By == b.opts.DaemonID {
		return // done here already
	}
	cctx, cancel := b.cctx(ctx)
	defer cancel()
	row, err := b.opts.Cluster.GetApproval(cctx, n.RequestID)
	if err != nil {
		b.log.Warn("approval: read an announced request", "requestId", n.RequestID, "err", err)
		return
	}
	b.apply(row)
}

// apply brings this daemon up to date with one row of the shared queue.
func (b *Broker) apply(row store.ApprovalRow) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if row.Resolution == nil {
		if _, mine := b.pending[row.RequestID]; mine {
			return
		}
		if row.Origin != "" {
			b.deliverRemoteLocked(row)
			return
		}
		if _, seen := b.remote[row.RequestID]; seen {
			return
		}
		var req Request
		if json.Unmarshal(row.Request, &req) != nil {
			return
		}
		// Remembered (with no approver) so that a resync does not announce it again.
		b.remote[req.RequestID] = &remoteRequest{req: req}
		b.broadcastLocked(QueueEvent{Pending: &req})
		return
	}
	var res Resolution
	if json.Unmarshal(row.Resolution, &res) != nil {
		return
	}
	if p := b.pending[row.RequestID]; p != nil {
		// Another daemon answered a request a turn here waits on.
		b.settleLocked(p, outcomeOf(p.req, res))
		return
	}
	b.publishResolvedLocked(res)
}

// resync looks at the whole shared queue again after announcements may
// have been lost.
func (b *Broker) resync(ctx context.Context) {
	cctx, cancel := b.cctx(ctx)
	defer cancel()
	rows, err := b.opts.Cluster.PendingApprovals(cctx, "")
	if err != nil {
		b.log.Warn("approval: resync with the shared queue", "err", err)
		return
	}
	open := map[string]bool{}
	for _, row := range rows {
		open[row.RequestID] = true
		b.apply(row)
	}
	b.mu.Lock()
	var gone []string
	for id := range b.pending {
		if !open[id] {
			gone = append(gone, id)
		}
	}
	for id := range b.remote {
		if !open[id] {
			gone = append(gone, id)
		}
	}
	b.mu.Unlock()
	for _, id := range gone {
		if row, err := b.opts.Cluster.GetApproval(cctx, id); err == nil && row.Resolution != nil {
			b.apply(row)
		}
	}
}

// AbandonSession denies, in the shared queue, the pending requests of a
// session that this daemon just took over: the turns that asked them ran
// on a daemon that stopped (or lost the session), so nobody waits for
// them any more.
func (b *Broker) AbandonSession(ctx context.Context, sessionID string) {
	if b.opts.Cluster == nil {
		return
	}
	cctx, cancel := b.cctx(ctx)
	defer cancel()
	rows, err := b.opts.Cluster.PendingApprovals(cctx, sessionID)
	if err != nil {
		b.log.Warn("approval: read the requests of a session taken over", "sessionId", sessionID, "err", err)
		return
	}
	for _, row := range rows {
		b.mu.Lock()
		_, mine := b.pending[row.RequestID]
		b.mu.Unlock()
		if mine {
			continue
		}
		var req Request
		if json.Unmarshal(row.Request, &req) != nil {
			continue
		}
		res := b.denied(req, ByInterrupt, "the daemon running the turn stopped", nil).res
		raw, _ := json.Marshal(res)
		if _, err := b.opts.Cluster.ResolveApproval(cctx, row.RequestID, raw, b.opts.DaemonID); err == nil {
			b.mu.Lock()
			b.publishResolvedLocked(res)
			b.mu.Unlock()
		}
	}
}
