package cluster_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/cluster"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// recorder notes the node's callbacks.
type recorder struct {
	mu       sync.Mutex
	acquired []string
	lost     chan string
}

func newNode(t *testing.T, st store.Store, id string, lease time.Duration, rec *recorder) *cluster.Node {
	t.Helper()
	n := cluster.New(cluster.Options{
		Store: st, DaemonID: id, GRPCAddr: "127.0.0.1:" + id, Lease: lease,
		OnAcquire: func(ctx context.Context, sid string) error {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.acquired = append(rec.acquired, sid)
			return nil
		},
		OnLost: func(sid string) { rec.lost <- sid },
	})
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func TestAcquireForwardTakeover(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	ra, rb := &recorder{lost: make(chan string, 8)}, &recorder{lost: make(chan string, 8)}
	a := newNode(t, st, "d-a", time.Second, ra)
	b := newNode(t, st, "d-b", time.Second, rb)

	// Concurrent acquisitions in one daemon run OnAcquire once.
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Acquire(ctx, "s-1"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(ra.acquired) != 1 {
		t.Fatalf("OnAcquire ran %d times, want 1", len(ra.acquired))
	}
	f, ok := a.Fence("s-1")
	if !ok || f.OwnerID != "d-a" || f.Epoch != 1 {
		t.Fatalf("fence of the owner = %+v %v", f, ok)
	}
	err := b.Acquire(ctx, "s-1")
	var other *cluster.NotOwnerError
	if !errors.As(err, &other) || other.Owner != "d-a" || other.Addr != "127.0.0.1:d-a" {
		t.Fatalf("acquire of a held session: %v, want a NotOwnerError naming d-a", err)
	}
	if _, ok := b.Fence("s-1"); ok {
		t.Fatal("a non-owner has a fence")
	}

	// A keeps it while it renews (several lease lengths).
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := b.Acquire(ctx, "s-1"); !errors.As(err, &other) {
			t.Fatalf("a renewed lease was taken: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A stops (a crash: no release): B takes the session once the lease
	// expires, with a higher epoch.
	if _, err := st.AcquireLease(ctx, "s-2", "d-dead", time.Second); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		err := b.Acquire(ctx, "s-2")
		if err == nil {
			break
		}
		// d-dead never registered: no address to forward to.
		if errs.CodeOf(err) != errcode.Overloaded || time.Now().After(deadline) {
			t.Fatalf("takeover of an expired lease: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if f, _ := b.Fence("s-2"); f.Epoch != 2 {
		t.Fatalf("takeover epoch %d, want 2", f.Epoch)
	}

	// Released by A (graceful stop): B takes it at once; A learns nothing
	// it must act on.
	a.Release(ctx, "s-1")
	if err := b.Acquire(ctx, "s-1"); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

func TestLostLease(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	ra := &recorder{lost: make(chan string, 8)}
	a := newNode(t, st, "d-a", time.Second, ra)
	if err := a.Acquire(ctx, "s-1"); err != nil {
		t.Fatal(err)
	}
	f, _ := a.Fence("s-1")
	// Another daemon takes it behind A's back (A was paused past the
	// lease): A's next renewal finds it lost.
	if err := st.ReleaseLease(ctx, store.Lease{SessionID: "s-1", OwnerID: "d-a", Epoch: f.Epoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "s-1", "d-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case sid := <-ra.lost:
		if sid != "s-1" {
			t.Fatalf("lost %s", sid)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not notice the lost lease within 20 s")
	}
	if a.Holds("s-1") {
		t.Fatal("the node still holds a lost lease")
	}
	a.Close(ctx)
	if err := a.Acquire(ctx, "s-3"); err == nil {
		t.Fatal("a closed node acquired a lease")
	}
	ds, err := st.ListDaemons(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.ID == "d-a" {
			t.Fatal("a closed node is still registered")
		}
	}
}

// TestResourceLease: a lease that names no session (a gateway binding's
// poller) is held by one node at a time, renewed with the others, runs no
// OnAcquire, and after the holder stops renewing is taken by the other
// node; the old holder's onLost runs when its renewal finds it gone.
func TestResourceLease(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	ra, rb := &recorder{lost: make(chan string, 8)}, &recorder{lost: make(chan string, 8)}
	a := newNode(t, st, "d-a", time.Second, ra)
	b := newNode(t, st, "d-b", time.Second, rb)
	lostA := make(chan struct{}, 1)
	if got, err := a.AcquireResource(ctx, "gateway/b-1", func() { lostA <- struct{}{} }); err != nil || !got {
		t.Fatalf("a: %v %v", got, err)
	}
	if got, err := b.AcquireResource(ctx, "gateway/b-1", nil); err != nil || got {
		t.Fatalf("b while a holds it: %v %v", got, err)
	}
	// Past the first lease's expiry, by the store's record: a renewed it.
	first, err := st.GetLease(ctx, "gateway/b-1")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := st.GetLease(ctx, "gateway/b-1")
		if err != nil {
			t.Fatal(err)
		}
		if l.ExpiresAt.After(first.ExpiresAt) && time.Now().After(first.ExpiresAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's lease %+v was not renewed past %v", l, first.ExpiresAt)
		}
	}
	if got, _ := b.AcquireResource(ctx, "gateway/b-1", nil); got {
		t.Fatal("b took a lease a kept renewing")
	}
	if len(ra.acquired) != 0 {
		t.Fatalf("OnAcquire ran for a resource: %v", ra.acquired)
	}
	// a's lease is expired by hand (as if a paused past it); b takes it;
	// a hears. (A renewal of a between the two revives it: try again.)
	for try := 0; ; try++ {
		l, err := st.GetLease(ctx, "gateway/b-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		got, err := b.AcquireResource(ctx, "gateway/b-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got {
			break
		}
		if try == 10 {
			t.Fatal("b never took the lease after a's ended")
		}
	}
	select {
	case <-lostA:
	case <-time.After(5 * time.Second):
		t.Fatal("a was not told it lost the lease")
	}
	select {
	case sid := <-ra.lost:
		t.Fatalf("OnLost ran for a resource: %s", sid)
	default:
	}
	if a.Holds("gateway/b-1") || !b.Holds("gateway/b-1") {
		t.Fatalf("holds: a %v b %v", a.Holds("gateway/b-1"), b.Holds("gateway/b-1"))
	}
}

// cutStore is a store whose lease renewals and heartbeats fail while cut
// is set, as with a daemon partitioned from its database.
type cutStore struct {
	store.Store
	mu  sync.Mutex
	cut bool
}

func (c *cutStore) setCut(v bool) { c.mu.Lock(); c.cut = v; c.mu.Unlock() }

func (c *cutStore) isCut() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.cut }

func (c *cutStore) RenewLeases(ctx context.Context, owner string, leases []store.Lease, ttl time.Duration) ([]string, error) {
	if c.isCut() {
		return nil, errors.New("connection refused")
	}
	return c.Store.RenewLeases(ctx, owner, leases, ttl)
}

func (c *cutStore) RegisterDaemon(ctx context.Context, d store.Daemon) error {
	if c.isCut() {
		return errors.New("connection refused")
	}
	return c.Store.RegisterDaemon(ctx, d)
}

// A node that cannot renew a lease deposes itself once the lease less its
// margin passed since the last renewal: OnLost runs, and from then on it
// neither holds the session nor has a fence for it, although no other
// daemon took it; another daemon takes it once the store's expiry passes.
func TestSelfDeposedWhenNotRenewed(t *testing.T) {
	st := &cutStore{Store: openStore(t)}
	ctx := context.Background()
	ra, rb := &recorder{lost: make(chan string, 8)}, &recorder{lost: make(chan string, 8)}
	a := newNode(t, st, "d-a", 600*time.Millisecond, ra)
	if err := a.Acquire(ctx, "s-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Fence("s-1"); !ok {
		t.Fatal("no fence right after Acquire")
	}
	st.setCut(true)
	if got := <-ra.lost; got != "s-1" {
		t.Fatalf("OnLost(%q), want s-1", got)
	}
	if a.Holds("s-1") {
		t.Fatal("still holds s-1 after deposing itself")
	}
	if _, ok := a.Fence("s-1"); ok {
		t.Fatal("still has a fence for s-1 after deposing itself")
	}
	// The store's lease outlives the self-judged one: b gets it only
	// once it expires, never while a could still believe it owns it.
	b := newNode(t, st.Store, "d-b", 600*time.Millisecond, rb)
	for {
		err := b.Acquire(ctx, "s-1")
		if err == nil {
			break
		}
		var other *cluster.NotOwnerError
		if !errors.As(err, &other) && errs.CodeOf(err) != errcode.Overloaded {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st.setCut(false)
	if a.Holds("s-1") {
		t.Fatal("a holds s-1 again without acquiring it")
	}
}

// TestAcquireWaitsForTakeover: while OnAcquire runs (the takeover closes
// the previous owner's turns) the lease already fences the takeover's
// writes, but a second Acquire of the session in the same daemon (a call
// to serve) returns only once OnAcquire has returned. A call served
// earlier started a turn the takeover then recorded over, and the
// previous owner's turn was never closed (TestPostgresScaleOutFailover,
// round 10 of one CI run).
func TestAcquireWaitsForTakeover(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	var n *cluster.Node
	fenced := make(chan bool, 1)
	n = cluster.New(cluster.Options{
		Store: st, DaemonID: "d-a", GRPCAddr: "127.0.0.1:1", Lease: 5 * time.Second,
		OnAcquire: func(ctx context.Context, sid string) error {
			_, ok := n.Fence(sid)
			fenced <- ok
			close(entered)
			<-release
			return nil
		},
	})
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })

	first := make(chan error, 1)
	go func() { first <- n.Acquire(ctx, "s-1") }()
	<-entered
	if !<-fenced {
		t.Fatal("inside OnAcquire the node has no fence for the session: the takeover could not write")
	}
	second := make(chan error, 1)
	go func() { second <- n.Acquire(ctx, "s-1") }()
	select {
	case err := <-second:
		t.Fatalf("a second Acquire returned (%v) while the takeover was still running", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for i, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("Acquire %d: %v", i+1, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Acquire %d did not return after the takeover ended", i+1)
		}
	}
	if !n.Holds("s-1") {
		t.Fatal("the node does not hold the session after the takeover")
	}
}
