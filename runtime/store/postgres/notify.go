package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifyChannels are the store's LISTEN/NOTIFY channels. One connection
// LISTENs on all of them for every listener of the store: a connection
// held for each would take a pool that has few (four on two cores) from
// the daemon's statements.
var notifyChannels = []string{eventsChannel, approvalsChannel, providerLimitsChannel}

// notifier holds the LISTENing connection while any listener is there,
// and hands each notification to the listeners of its channel.
type notifier struct {
	pool *pgxpool.Pool

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	stop context.CancelFunc // ends the connection's loop; nil when none runs
}

// subscriber is one listener: its notifications are queued for its own
// goroutine, so that a slow listener delays no other.
type subscriber struct {
	channel string
	notes   chan string
	lost    chan struct{} // the listener missed notifications
}

func newNotifier(pool *pgxpool.Pool) *notifier {
	return &notifier{pool: pool, subs: map[*subscriber]struct{}{}}
}

// listen calls fn with the payload of each notification on channel until
// ctx ends; after notifications were missed (a lost connection, a full
// queue) it calls lost.
func (s *Store) listen(ctx context.Context, channel string, fn func(payload string), lost func()) error {
	sub := &subscriber{channel: channel, notes: make(chan string, 1024), lost: make(chan struct{}, 1)}
	s.notify.add(sub)
	defer s.notify.remove(sub)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-sub.notes:
			fn(p)
		case <-sub.lost:
			lost()
		}
	}
}

func (n *notifier) add(sub *subscriber) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subs[sub] = struct{}{}
	if n.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		n.stop = cancel
		go n.run(ctx)
	}
}

func (n *notifier) remove(sub *subscriber) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.subs, sub)
	if len(n.subs) == 0 && n.stop != nil {
		n.stop()
		n.stop = nil
	}
}

// deliver queues payload for the listeners of channel, or, when payload
// is "" with lost, tells every listener it missed notifications.
func (n *notifier) deliver(channel, payload string, lost bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for sub := range n.subs {
		if lost {
			select {
			case sub.lost <- struct{}{}:
			default:
			}
			continue
		}
		if sub.channel != channel {
			continue
		}
		select {
		case sub.notes <- payload:
		default:
			select { // a full queue: the listener looks at everything again
			case sub.lost <- struct{}{}:
			default:
			}
		}
	}
}

// run holds the connection until ctx ends; after a lost connection it
// reconnects and tells every listener (notifications sent meanwhile are
// gone; the listeners' polls cover the gap).
func (n *notifier) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for first := true; ; first = false {
		if !first {
			n.deliver("", "", true)
		}
		_ = n.listenOnce(ctx, func() { backoff = 100 * time.Millisecond })
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (n *notifier) listenOnce(ctx context.Context, connected func()) error {
	conn, err := n.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection ends LISTENing when it is closed, never returned to
	// the pool in that state.
	defer func() { conn.Conn().Close(context.Background()); conn.Release() }()
	for _, c := range notifyChannels {
		if _, err := conn.Exec(ctx, `LISTEN `+c); err != nil {
			return err
		}
	}
	connected()
	for {
		note, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.deliver(note.Channel, note.Payload, false)
	}
}
