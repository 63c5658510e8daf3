package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// turnRecorder records when each event of one turn reached one client:
// arrivals[seq-base-1] is the time since the recorder's epoch (0 = not
// received). It is written by one goroutine and read after done.
type turnRecorder struct {
	base     int64 // the session's last seq before the turn
	epoch    time.Time
	arrivals []int64
	received atomic.Int64
	dups     atomic.Int64
	doneAt   atomic.Int64 // ns since epoch when turn.done arrived
	done     chan struct{}
	once     sync.Once
}

func newTurnRecorder(base int64, expected int, epoch time.Time) *turnRecorder {
	return &turnRecorder{base: base, epoch: epoch, arrivals: make([]int64, expected), done: make(chan struct{})}
}

// record notes one event; it returns true once turn.done has arrived.
func (r *turnRecorder) record(seq int64, kind string, at time.Time) bool {
	if seq <= r.base {
		return false
	}
	i := seq - r.base - 1
	t := at.Sub(r.epoch).Nanoseconds()
	if t <= 0 {
		t = 1
	}
	if i < int64(len(r.arrivals)) {
		if r.arrivals[i] != 0 {
			r.dups.Add(1)
		} else {
			r.arrivals[i] = t
		}
	}
	r.received.Add(1)
	if kind == "turn.done" {
		r.doneAt.Store(t)
		r.once.Do(func() { close(r.done) })
		return true
	}
	return false
}

// missing counts the events up to last that never arrived.
func (r *turnRecorder) missing(last int64) int64 {
	var n int64
	for i := int64(0); i < last-r.base && i < int64(len(r.arrivals)); i++ {
		if r.arrivals[i] == 0 {
			n++
		}
	}
	return n
}

// recorderSlot holds the recorder of the turn a subscriber is measuring;
// the bench swaps in a new one between turns.
type recorderSlot = atomic.Pointer[turnRecorder]

// newSlot returns a slot holding rec.
func newSlot(rec *turnRecorder) *recorderSlot {
	s := new(recorderSlot)
	s.Store(rec)
	return s
}

// subscribeGRPC opens SessionService.Subscribe after afterSeq and feeds
// whatever recorder slot holds until ctx ends; it returns once the stream
// has caught up.
func subscribeGRPC(ctx context.Context, conn *grpc.ClientConn, sessionID string, afterSeq int64, slot *recorderSlot) error {
	stream, err := trellisv1.NewSessionServiceClient(conn).Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: sessionID, AfterSeq: afterSeq, Typed: true})
	if err != nil {
		return fmt.Errorf("bench: Subscribe: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		caught := false
		for {
			resp, err := stream.Recv()
			if err != nil {
				if !caught {
					ready <- fmt.Errorf("bench: Subscribe: %w", err)
				}
				return
			}
			if resp.GetCaughtUp() != nil {
				if !caught {
					caught = true
					ready <- nil
				}
				continue
			}
			ev := resp.GetEvent()
			if rec := slot.Load(); rec != nil {
				rec.record(ev.GetSeq(), ev.GetKind(), time.Now())
			}
		}
	}()
	select {
	case err := <-ready:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscribeWS has a WebSocket client resume the session after afterSeq, so
// that the facade streams its events as session.event notifications to
// whatever recorder slot holds.
func (h *daemonHandle) subscribeWS(ctx context.Context, sessionID string, afterSeq int64, slot *recorderSlot) (*wsClient, error) {
	c, err := h.dialWS(ctx, func(ev eventRef, at time.Time) {
		if rec := slot.Load(); rec != nil && ev.SessionID == sessionID {
			rec.record(ev.Seq, ev.Kind, at)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := c.call(ctx, "session.resume", map[string]any{"sessionId": sessionID, "afterSeq": afterSeq}, nil); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// lastSeq returns a session's latest seq.
func lastSeq(ctx context.Context, conn *grpc.ClientConn, sessionID string) (int64, error) {
	res, err := trellisv1.NewSessionServiceClient(conn).ListSessions(ctx, &trellisv1.ListSessionsRequest{IncludeClosed: proto.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("bench: session.list: %w", err)
	}
	for _, s := range res.GetSessions() {
		if s.GetSessionId() == sessionID {
			return s.GetSeq(), nil
		}
	}
	return 0, fmt.Errorf("bench: session %s is not listed", sessionID)
}

// waitAll waits until every recorder saw turn.done, or ctx ends.
func waitAll(ctx context.Context, recs []*turnRecorder) error {
	for _, r := range recs {
		select {
		case <-r.done:
		case <-ctx.Done():
			var got int64
			for _, r := range recs {
				got += r.received.Load()
			}
			return fmt.Errorf("bench: the turn did not reach every client (%d events received in all): %w", got, ctx.Err())
		}
	}
	return nil
}
