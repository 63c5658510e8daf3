package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// DefaultLease is the default lease length (--lease).
const DefaultLease = 10 * time.Second

// Options configure a Node.
type Options struct {
	Store    store.Store
	DaemonID string
	// GRPCAddr is where other daemons reach this one's gRPC server.
	GRPCAddr string
	// Version is this daemon's trellisd version, recorded in the registry.
	Version string
	// Lease is how long a session's lease lasts without renewal; the node
	// renews every Lease/3 (default DefaultLease).
	Lease time.Duration
	// Margin is how long before the end of a lease, counted on this
	// daemon's monotonic clock from the start of its last successful
	// renewal, the node gives the lease up on its own (default Lease/5):
	// from then on it writes nothing and starts nothing under it, though no
	// other daemon may have taken it yet (see Node.Fence).
	Margin time.Duration
	Log    *slog.Logger
	// OnAcquire runs after the node took a session's lease and before any
	// call is served under it: the daemon reloads the session's numbering
	// and closes the turns a previous owner left open. An error gives the
	// lease back.
	OnAcquire func(ctx context.Context, sessionID string) error
	// OnLost runs when a renewal finds that the lease has been taken over
	// or released, or when the lease runs past Lease-Margin since its last
	// renewal (the daemon deposes itself: it can no longer be sure nobody
	// else owns the session): the daemon stops serving the session at once.
	OnLost func(sessionID string)
}

// Node is this daemon's membership of the cluster.
type Node struct {
	opts Options

	mu        sync.Mutex
	held      map[string]heldLease
	acquiring map[string]*sync.Mutex
	// resources are the held leases that name no session (AcquireResource),
	// with what to call when one is lost.
	resources map[string]func()

	started bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// heldLease is a lease this node holds, with the monotonic time at which
// the store call that last took or renewed it started: the store's expiry
// is at least Lease after that.
type heldLease struct {
	store.Lease
	renewed time.Time
	// takingOver: OnAcquire has not returned yet. The lease fences the
	// takeover's own writes, but Acquire does not report it taken until
	// the takeover is done, so no call is served on the session before
	// the previous owner's turns are closed.
	takingOver bool
}

// New returns a node; Start registers it and starts its renewals.
func New(opts Options) *Node {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Margin <= 0 || opts.Margin >= opts.Lease {
		opts.Margin = opts.Lease / 5
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Node{opts: opts, held: map[string]heldLease{}, acquiring: map[string]*sync.Mutex{}, resources: map[string]func(){},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// ID is this daemon's id.
func (n *Node) ID() string { return n.opts.DaemonID }

// Lease is the configured lease length.
func (n *Node) Lease() time.Duration { return n.opts.Lease }

// Start registers the daemon and starts the heartbeat and lease renewals.
func (n *Node) Start(ctx context.Context) error {
	if err := n.opts.Store.RegisterDaemon(ctx, n.registryRow()); err != nil {
		return fmt.Errorf("register this daemon in the store: %w", err)
	}
	n.noteOtherVersions(ctx)
	n.started = true
	go n.renewLoop()
	go n.watchLoop()
	return nil
}

// registryRow is this daemon's row of the registry, written at start and
// by every heartbeat.
func (n *Node) registryRow() store.Daemon {
	return store.Daemon{ID: n.opts.DaemonID, GRPCAddr: n.opts.GRPCAddr, Version: n.opts.Version}
}

// noteOtherVersions logs the live daemons of the registry that run another
// version than this one: a cluster mid-upgrade works while the store's
// migrations are additive, and a call this daemon forwards to an older one
// that does not serve it is refused naming both versions (rpc.Forwarder).
func (n *Node) noteOtherVersions(ctx context.Context) {
	list, err := n.opts.Store.ListDaemons(ctx)
	if err != nil {
		return // the heartbeat reports a store that fails
	}
	for _, d := range list {
		if d.ID == n.opts.DaemonID || d.Version == n.opts.Version || time.Since(d.HeartbeatAt) > n.opts.Lease {
			continue
		}
		version := d.Version
		if version == "" {
			version = "an earlier build (no version recorded)"
		}
		n.opts.Log.Warn("cluster: a daemon of another trellisd version is running; finish the upgrade of every daemon",
			"daemon", d.ID, "daemon_version", version, "this_version", n.opts.Version)
	}
}

// watchLoop deposes the node from every lease it could not renew in time
// (Lease-Margin since the start of its last renewal), checking often
// enough that it stops well within the margin, and at once after the
// process was stopped (SIGSTOP, a frozen VM): a ticker's next tick comes
// as soon as the process runs again.
func (n *Node) watchLoop() {
	n.every(max(min(n.opts.Margin/4, 250*time.Millisecond), 5*time.Millisecond), n.expire)
}

// every calls fn each period until the node stops.
func (n *Node) every(period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		fn()
	}
}

// valid reports whether the node may still act under h: less than
// Lease-Margin passed on the monotonic clock since its last renewal began.
func (n *Node) valid(h heldLease) bool {
	return time.Since(h.renewed) < n.opts.Lease-n.opts.Margin
}

// expire gives up every held lease past Lease-Margin since its last
// renewal: another daemon may take it once the store's expiry passes, so
// this one stops now (OnLost for a session, the resource's callback).
func (n *Node) expire() {
	var lost []string
	var lostResources []func()
	n.mu.Lock()
	for id, h := range n.held {
		if n.valid(h) {
			continue
		}
		delete(n.held, id)
		if fn, res := n.resources[id]; res {
			delete(n.resources, id)
			lostResources = append(lostResources, fn)
			continue
		}
		lost = append(lost, id)
	}
	n.mu.Unlock()
	for _, fn := range lostResources {
		n.opts.Log.Warn("gave a lease up: not renewed within the lease less its margin", "lease", n.opts.Lease, "margin", n.opts.Margin)
		if fn != nil {
			fn()
		}
	}
	for _, id := range lost {
		n.opts.Log.Warn("deposed from a session: its lease was not renewed within the lease less its margin; its turns are stopped",
			"sessionId", id, "lease", n.opts.Lease, "margin", n.opts.Margin)
		if n.opts.OnLost != nil {
			n.opts.OnLost(id)
		}
	}
}

func (n *Node) renewLoop() {
	defer close(n.done)
	n.every(n.opts.Lease/3, n.renew)
}

// renew refreshes the heartbeat and every held lease; leases the store no
// longer gives this daemon are lost.
func (n *Node) renew() {
	// The start of the call: the store's new expiry is at least a lease
	// after it, whenever the answer comes.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.Lease/3)
	defer cancel()
	if err := n.opts.Store.RegisterDaemon(ctx, n.registryRow()); err != nil {
		n.opts.Log.Warn("heartbeat", "err", err)
	}
	n.mu.Lock()
	leases := make([]store.Lease, 0, len(n.held))
	for _, h := range n.held {
		if n.valid(h) { // one past it is given up, not renewed
			leases = append(leases, h.Lease)
		}
	}
	n.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	kept, err := n.opts.Store.RenewLeases(ctx, n.opts.DaemonID, leases, n.opts.Lease)
	if err != nil {
		// Not lost yet: a lease nobody took is renewed next time; one
		// taken meanwhile is refused to this daemon's writes by the fence.
		n.opts.Log.Warn("renew session leases", "leases", len(leases), "err", err)
		return
	}
	ok := make(map[string]bool, len(kept))
	for _, id := range kept {
		ok[id] = true
	}
	var lost []string
	var lostResources []func()
	n.mu.Lock()
	for _, l := range leases {
		cur, still := n.held[l.SessionID]
		if still && cur.Epoch == l.Epoch && ok[l.SessionID] {
			cur.renewed = start
			n.held[l.SessionID] = cur
			continue
		}
		if still && cur.Epoch == l.Epoch && !ok[l.SessionID] {
			delete(n.held, l.SessionID)
			if fn, res := n.resources[l.SessionID]; res {
				delete(n.resources, l.SessionID)
				n.opts.Log.Warn("lost a lease to another daemon", "lease", l.SessionID)
				lostResources = append(lostResources, fn)
				continue
			}
			lost = append(lost, l.SessionID)
		}
	}
	n.mu.Unlock()
	for _, fn := range lostResources {
		if fn != nil {
			fn()
		}
	}
	for _, id := range lost {
		n.opts.Log.Warn("lost the lease of a session to another daemon", "sessionId", id)
		if n.opts.OnLost != nil {
			n.opts.OnLost(id)
		}
	}
}

// Fence returns the lease this daemon writes the session's events under.
// ok is false when it holds none, and also once Lease-Margin passed since
// the lease's last renewal: a cheap, in-memory check that every write and
// every side effect (a tool run, a provider call) makes right before it
// starts, so that nothing starts after the node judged itself deposed,
// even before expire ran.
func (n *Node) Fence(sessionID string) (store.Fence, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.held[sessionID]
	if ok && !n.valid(h) {
		ok = false
	}
	if !ok {
		return store.Fence{}, false
	}
	return h.Fence(), true
}

// Holds reports whether this daemon holds the session's lease (see Fence).
func (n *Node) Holds(sessionID string) bool {
	_, ok := n.Fence(sessionID)
	return ok
}

// NotOwnerError says another live daemon owns the session; Addr is its gRPC
// address, where calls on the session are forwarded.
type NotOwnerError struct {
	SessionID string
	Owner     string
	Addr      string
	Version   string // the owner's trellisd version ("" when it did not record one)
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("session %s is served by daemon %s at %s", e.SessionID, e.Owner, e.Addr)
}

// Acquire makes sure this daemon holds the session's lease: nil when it
// does (taking a free or expired lease, with OnAcquire, on the way), a
// *NotOwnerError when another live daemon holds it.
func (n *Node) Acquire(ctx context.Context, sessionID string) error {
	if n.takenOver(sessionID) {
		return nil
	}
	// A lease held past its margin is given up (OnLost) before it is
	// taken again: what ran under it stops first.
	n.expire()
	select {
	case <-n.stop:
		return errs.New(errcode.Overloaded, "this daemon is shutting down; call another daemon of the cluster").WithData("retryAfterMs", 200)
	default:
	}
	// One acquisition per session at a time in this daemon: a second
	// caller waits and then finds the lease held.
	n.mu.Lock()
	km := n.acquiring[sessionID]
	if km == nil {
		km = &sync.Mutex{}
		n.acquiring[sessionID] = km
	}
	n.mu.Unlock()
	km.Lock()
	defer func() {
		km.Unlock()
		n.mu.Lock()
		if n.acquiring[sessionID] == km {
			delete(n.acquiring, sessionID)
		}
		n.mu.Unlock()
	}()
	if n.takenOver(sessionID) {
		return nil
	}
	start := time.Now()
	l, err := n.opts.Store.AcquireLease(ctx, sessionID, n.opts.DaemonID, n.opts.Lease)
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		if held.Lease.OwnerAddr == "" {
			return errs.New(errcode.Overloaded, "session %s is owned by daemon %s, which has no registered address; try again once its lease (%v) expires",
				sessionID, held.Lease.OwnerID, n.opts.Lease).WithData("retryAfterMs", n.opts.Lease.Milliseconds())
		}
		return &NotOwnerError{SessionID: sessionID, Owner: held.Lease.OwnerID, Addr: held.Lease.OwnerAddr, Version: held.Lease.OwnerVersion}
	}
	if err != nil {
		return fmt.Errorf("acquire the lease of session %s: %w", sessionID, err)
	}
	n.mu.Lock()
	n.held[sessionID] = heldLease{Lease: l, renewed: start, takingOver: true}
	n.mu.Unlock()
	if n.opts.OnAcquire != nil {
		if err := n.opts.OnAcquire(ctx, sessionID); err != nil {
			n.Release(context.WithoutCancel(ctx), sessionID)
			return fmt.Errorf("take session %s over: %w", sessionID, err)
		}
	}
	n.mu.Lock()
	if h, ok := n.held[sessionID]; ok && h.Epoch == l.Epoch {
		h.takingOver = false
		n.held[sessionID] = h
	}
	n.mu.Unlock()
	return nil
}

// takenOver reports whether this daemon holds the session's lease and its
// takeover (OnAcquire) is done: a caller that finds it taking over waits
// in Acquire for the takeover to end.
func (n *Node) takenOver(sessionID string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.held[sessionID]
	return ok && !h.takingOver && n.valid(h)
}

// AcquireResource takes, or keeps, the lease named key for this daemon:
// a lease on something that is not a session (a gateway binding's inbound
// channel, "gateway/<bindingId>"), kept in the same table, renewed with the
// session leases and given back by Close. It reports false when another
// live daemon holds it. Nothing runs on acquisition; onLost runs if a
// renewal finds the lease taken over (this daemon must stop at once).
func (n *Node) AcquireResource(ctx context.Context, key string, onLost func()) (bool, error) {
	if n.Holds(key) {
		return true, nil
	}
	select {
	case <-n.stop:
		return false, nil
	default:
	}
	n.expire()
	start := time.Now()
	l, err := n.opts.Store.AcquireLease(ctx, key, n.opts.DaemonID, n.opts.Lease)
	if errors.Is(err, store.ErrLeaseHeld) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire the lease %s: %w", key, err)
	}
	n.mu.Lock()
	n.held[key] = heldLease{Lease: l, renewed: start}
	n.resources[key] = onLost
	n.mu.Unlock()
	return true, nil
}

// Release gives the session's lease (or a resource's) back, if held.
func (n *Node) Release(ctx context.Context, sessionID string) {
	n.mu.Lock()
	l, ok := n.held[sessionID]
	delete(n.held, sessionID)
	delete(n.resources, sessionID)
	n.mu.Unlock()
	if !ok {
		return
	}
	if err := n.opts.Store.ReleaseLease(ctx, l.Lease); err != nil {
		n.opts.Log.Warn("release a session lease", "sessionId", sessionID, "err", err)
	}
}

// Close stops the renewals, releases every held lease (so that another
// daemon takes the sessions at once, not after the lease) and removes the
// daemon from the registry. Call it after the sessions stopped writing.
func (n *Node) Close(ctx context.Context) {
	n.once.Do(func() {
		close(n.stop)
		if n.started {
			<-n.done
		}
		n.mu.Lock()
		var ids []string
		for id := range n.held {
			ids = append(ids, id)
		}
		n.mu.Unlock()
		for _, id := range ids {
			n.Release(ctx, id)
		}
		if err := n.opts.Store.RemoveDaemon(ctx, n.opts.DaemonID); err != nil {
			n.opts.Log.Warn("leave the daemon registry", "err", err)
		}
	})
}
