package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	// Lease is how long a session's lease lasts without renewal; the node
	// renews every Lease/3 (default DefaultLease).
	Lease time.Duration
	Log   *slog.Logger
	// OnAcquire runs after the node took a session's lease and before any
	// call is served under it: the daemon reloads the session's numbering
	// and closes the turns a previous owner left open. An error gives the
	// lease back.
	OnAcquire func(ctx context.Context, sessionID string) error
	// OnLost runs when a renewal finds that the lease has been taken over
	// or released: the daemon stops serving the session.
	OnLost func(sessionID string)
}

// Node is this daemon's membership of the cluster.
type Node struct {
	opts Options

	mu        sync.Mutex
	held      map[string]store.Lease
	acquiring map[string]*sync.Mutex
	// resources are the held leases that name no session (AcquireResource),
	// with what to call when one is lost.
	resources map[string]func()

	started bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// New returns a node; Start registers it and starts its renewals.
func New(opts Options) *Node {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Node{opts: opts, held: map[string]store.Lease{}, acquiring: map[string]*sync.Mutex{}, resources: map[string]func(){},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// ID is this daemon's id.
func (n *Node) ID() string { return n.opts.DaemonID }

// Lease is the configured lease length.
func (n *Node) Lease() time.Duration { return n.opts.Lease }

// Start registers the daemon and starts the heartbeat and lease renewals.
func (n *Node) Start(ctx context.Context) error {
	if err := n.opts.Store.RegisterDaemon(ctx, store.Daemon{ID: n.opts.DaemonID, GRPCAddr: n.opts.GRPCAddr}); err != nil {
		return fmt.Errorf("register this daemon in the store: %w", err)
	}
	n.started = true
	go n.renewLoop()
	return nil
}

func (n *Node) renewLoop() {
	defer close(n.done)
	t := time.NewTicker(n.opts.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.renew()
	}
}

// renew refreshes the heartbeat and every held lease; leases the store no
// longer gives this daemon are lost.
func (n *Node) renew() {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.Lease/3)
	defer cancel()
	if err := n.opts.Store.RegisterDaemon(ctx, store.Daemon{ID: n.opts.DaemonID, GRPCAddr: n.opts.GRPCAddr}); err != nil {
		n.opts.Log.Warn("heartbeat", "err", err)
	}
	n.mu.Lock()
	leases := make([]store.Lease, 0, len(n.held))
	for _, l := range n.held {
		leases = append(leases, l)
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
		if cur, still := n.held[l.SessionID]; still && cur.Epoch == l.Epoch && !ok[l.SessionID] {
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
func (n *Node) Fence(sessionID string) (store.Fence, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.held[sessionID]
	return store.Fence{OwnerID: l.OwnerID, Epoch: l.Epoch}, ok
}

// Holds reports whether this daemon holds the session's lease.
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
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("session %s is served by daemon %s at %s", e.SessionID, e.Owner, e.Addr)
}

// Acquire makes sure this daemon holds the session's lease: nil when it
// does (taking a free or expired lease, with OnAcquire, on the way), a
// *NotOwnerError when another live daemon holds it.
func (n *Node) Acquire(ctx context.Context, sessionID string) error {
	if n.Holds(sessionID) {
		return nil
	}
	select {
	case <-n.stop:
		return errs.New(errs.Overloaded, "this daemon is shutting down; call another daemon of the cluster").WithData("retryAfterMs", 200)
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
	if n.Holds(sessionID) {
		return nil
	}
	l, err := n.opts.Store.AcquireLease(ctx, sessionID, n.opts.DaemonID, n.opts.Lease)
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		if held.Lease.OwnerAddr == "" {
			return errs.New(errs.Overloaded, "session %s is owned by daemon %s, which has no registered address; try again once its lease (%v) expires",
				sessionID, held.Lease.OwnerID, n.opts.Lease).WithData("retryAfterMs", n.opts.Lease.Milliseconds())
		}
		return &NotOwnerError{SessionID: sessionID, Owner: held.Lease.OwnerID, Addr: held.Lease.OwnerAddr}
	}
	if err != nil {
		return fmt.Errorf("acquire the lease of session %s: %w", sessionID, err)
	}
	n.mu.Lock()
	n.held[sessionID] = l
	n.mu.Unlock()
	if n.opts.OnAcquire != nil {
		if err := n.opts.OnAcquire(ctx, sessionID); err != nil {
			n.Release(context.WithoutCancel(ctx), sessionID)
			return fmt.Errorf("take session %s over: %w", sessionID, err)
		}
	}
	return nil
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
	l, err := n.opts.Store.AcquireLease(ctx, key, n.opts.DaemonID, n.opts.Lease)
	if errors.Is(err, store.ErrLeaseHeld) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire the lease %s: %w", key, err)
	}
	n.mu.Lock()
	n.held[key] = l
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
	if err := n.opts.Store.ReleaseLease(ctx, l); err != nil {
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
