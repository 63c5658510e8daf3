package broadcast

import (
	"errors"
	"sync"
)

var (
	// ErrLagged ends a subscriber that fell more than its limit behind
	// (DropSubscriber).
	ErrLagged = errors.New("the watcher fell behind and was dropped; watch again")
	// ErrClosed ends every subscriber of a Hub that closed.
	ErrClosed = errors.New("the service stopped")
)

// Overflow is what a value past a queue's limit does.
type Overflow int

const (
	// DropSubscriber ends the queue: what it holds is delivered, then the
	// Lagged markers, and Err reports ErrLagged; the value that did not fit
	// and every later one are dropped.
	DropSubscriber Overflow = iota
	// RefuseValue drops the value that did not fit and reports it to the
	// publisher (Push returns true); the queue goes on.
	RefuseValue
)

// Policy is a queue's bound and what happens past it, declared at
// construction.
type Policy[T any] struct {
	// Limit bounds the values not yet handed over, the one being handed
	// over included (at least 1). A value the consumer has just taken
	// counts until the goroutine that handed it over returns, so the
	// consumer may find one place fewer for that moment.
	Limit int
	// Overflow is what a value past Limit does.
	Overflow Overflow
	// Lagged are delivered after the queued values when DropSubscriber
	// ends the queue (none: the consumer learns it from Err).
	Lagged []T
}

// Queue is one subscriber's bounded FIFO. Push never blocks, so a
// publisher may fan out while holding its own lock; a goroutine, started
// when values wait and gone when none do, hands them to the consumer in
// order. It is safe for concurrent use.
type Queue[T any] struct {
	policy Policy[T]
	// try delivers v now if that needs no waiting (nil: never); send
	// delivers v, returning false when the consumer is gone or the queue
	// stopped; done runs once after the last delivery.
	try  func(v T) bool
	send func(v T) bool
	done func()
	ch   chan T        // New's channel; nil for a sink
	stop chan struct{} // closed by Stop

	mu       sync.Mutex
	queue    []T   // undelivered; queue[0] is being delivered while draining
	draining bool  // the delivering goroutine runs
	ended    bool  // no more pushes: deliver what is queued, then done
	stopped  bool  // done without delivering what is queued
	finished bool  // done ran
	err      error // why the queue ended (the first reason)
}

// New returns a queue that delivers on an unbuffered channel (Events),
// closed when the queue ends.
func New[T any](p Policy[T]) *Queue[T] {
	q := newQueue(p)
	q.ch = make(chan T)
	q.try = func(v T) bool {
		select {
		case q.ch <- v:
			return true
		default:
			return false
		}
	}
	q.send = func(v T) bool {
		select {
		case q.ch <- v:
			return true
		case <-q.stop:
			return false
		}
	}
	q.done = func() { close(q.ch) }
	return q
}

// NewSink returns a queue that delivers by calling send, one value at a
// time, in order; send returns false when the consumer is gone, which
// stops the queue, and must return once it is (it is not told of Stop).
// try, if not nil, is offered a value first when nothing waits: true means
// it took it without blocking.
func NewSink[T any](p Policy[T], try, send func(T) bool) *Queue[T] {
	q := newQueue(p)
	q.try, q.send, q.done = try, send, func() {}
	return q
}

func newQueue[T any](p Policy[T]) *Queue[T] {
	p.Limit = max(1, p.Limit)
	return &Queue[T]{policy: p, stop: make(chan struct{})}
}

// Events delivers a queue made by New in order; it is closed when the
// queue ends. A sink's is nil.
func (q *Queue[T]) Events() <-chan T { return q.ch }

// Err tells why the queue ended: ErrLagged after a DropSubscriber
// overflow, else what End or Stop was given (nil while it runs).
func (q *Queue[T]) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Push queues v. It reports an overflow: v did not fit in the limit (the
// policy says what followed). An ended queue drops v and reports none.
func (q *Queue[T]) Push(v T) (overflow bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended || q.stopped {
		return false
	}
	if len(q.queue) == 0 && !q.draining && q.try != nil && q.try(v) {
		return false
	}
	if len(q.queue) >= q.policy.Limit {
		if q.policy.Overflow == DropSubscriber {
			q.endLocked(ErrLagged, q.policy.Lagged)
		}
		return true
	}
	q.queue = append(q.queue, v)
	q.kickLocked()
	return false
}

// PushMarker queues v whatever the limit (a marker that must not be lost,
// such as the end of one of the publishers sharing the queue); an ended
// queue drops it.
func (q *Queue[T]) PushMarker(v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended || q.stopped {
		return
	}
	q.queue = append(q.queue, v)
	q.kickLocked()
}

// SetLimit changes how many undelivered values the queue holds; values
// already queued stay.
func (q *Queue[T]) SetLimit(limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.policy.Limit = max(1, limit)
}

// End ends the queue after delivering what is queued and then last; Err
// reports err. An ended queue is left as it is.
func (q *Queue[T]) End(err error, last ...T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended || q.stopped {
		return
	}
	q.endLocked(err, last)
}

func (q *Queue[T]) endLocked(err error, last []T) {
	q.ended, q.err = true, err
	q.queue = append(q.queue, last...)
	if len(q.queue) == 0 && !q.draining {
		q.finishLocked()
		return
	}
	q.kickLocked()
}

// Stop ends the queue at once: what was not delivered is dropped (a value
// being handed over may still arrive). Err reports err unless the queue
// had ended already.
func (q *Queue[T]) Stop(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopLocked(err)
}

func (q *Queue[T]) stopLocked(err error) {
	if q.stopped {
		return
	}
	if !q.ended {
		q.err = err
	}
	q.stopped = true
	close(q.stop)
	clear(q.queue)
	q.queue = nil
	if !q.draining {
		q.finishLocked()
	}
}

// finishLocked runs done once, with nothing being delivered.
func (q *Queue[T]) finishLocked() {
	if !q.finished {
		q.finished = true
		q.done()
	}
}

func (q *Queue[T]) kickLocked() {
	if !q.draining && len(q.queue) > 0 {
		q.draining = true
		go q.drain()
	}
}

// drain delivers the queued values in order until none wait, then ends
// the queue if it was ended.
func (q *Queue[T]) drain() {
	var zero T
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.stopped && len(q.queue) > 0 {
		v := q.queue[0]
		q.mu.Unlock()
		ok := q.send(v)
		q.mu.Lock()
		if !ok {
			q.stopLocked(q.err) // the consumer is gone
			break
		}
		if !q.stopped {
			q.queue[0] = zero
			q.queue = q.queue[1:]
		}
	}
	q.draining = false
	if q.ended || q.stopped {
		q.finishLocked()
	}
}
