package approval

import "sync"

// mailbox is a FIFO of at most limit undelivered values in front of a
// channel. push never blocks, so the broker can fan out while holding its
// lock; a goroutine (run) hands the values to the consumer in order.
type mailbox[T any] struct {
	out   chan T
	wake  chan struct{} // capacity 1: "the queue or the state changed"
	stopc chan struct{} // closed by stop
	limit int

	mu       sync.Mutex
	queue    []T
	finished bool // no more pushes: deliver what is queued, then close out
	stopped  bool // the consumer is gone: close out at once
}

func newMailbox[T any](limit int) *mailbox[T] {
	return &mailbox[T]{
		out:   make(chan T),
		wake:  make(chan struct{}, 1),
		stopc: make(chan struct{}),
		limit: limit,
	}
}

// push queues v. It reports full (and queues nothing) when limit values are
// already waiting; a finished or stopped mailbox drops v silently.
func (m *mailbox[T]) push(v T) (full bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished || m.stopped {
		return false
	}
	if len(m.queue) >= m.limit {
		return true
	}
	m.queue = append(m.queue, v)
	m.signal()
	return false
}

// pushAlways queues v whatever the limit (an end marker must not be lost);
// a finished or stopped mailbox drops it.
func (m *mailbox[T]) pushAlways(v T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished || m.stopped {
		return
	}
	m.queue = append(m.queue, v)
	m.signal()
}

// setLimit changes how many undelivered values push accepts.
func (m *mailbox[T]) setLimit(limit int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.limit = limit
}

// finish ends the mailbox after delivering what is queued and then last.
func (m *mailbox[T]) finish(last ...T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished || m.stopped {
		return
	}
	m.finished = true
	m.queue = append(m.queue, last...)
	m.signal()
}

// abandon drops what is queued and ends the mailbox after delivering last.
func (m *mailbox[T]) abandon(last T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished || m.stopped {
		return
	}
	m.finished = true
	m.queue = []T{last}
	m.signal()
}

// stop ends the mailbox at once; undelivered values are dropped.
func (m *mailbox[T]) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		m.stopped = true
		close(m.stopc)
	}
}

func (m *mailbox[T]) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run delivers values until the mailbox ends, then closes out and calls
// onExit (if not nil).
func (m *mailbox[T]) run(onExit func()) {
	defer func() {
		close(m.out)
		if onExit != nil {
			onExit()
		}
	}()
	var zero T
	for {
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			return
		}
		if len(m.queue) == 0 {
			finished := m.finished
			m.mu.Unlock()
			if finished {
				return
			}
			select {
			case <-m.wake:
			case <-m.stopc:
			}
			continue
		}
		v := m.queue[0]
		m.queue[0] = zero
		m.queue = m.queue[1:]
		m.mu.Unlock()
		select {
		case m.out <- v:
		case <-m.stopc:
			return
		}
	}
}
