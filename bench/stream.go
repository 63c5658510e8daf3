package bench

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
)

// turnRecorder records when each model chunk of one turn reached one
// client. A chunk is "d<i> w w " of the answer (streamScript); the daemon
// merges chunks that wait for the same commit into one message.delta event,
// so the recorder reads the chunks in each event's text: arrivals[i] is when
// chunk i arrived, in ns since the recorder's epoch (0 = not received).
// Events at or below base (the session's last seq before the turn) are a
// turn before and are not counted. It is written by one goroutine and read
// after done.
type turnRecorder struct {
	base     int64
	epoch    time.Time
	arrivals []int64
	received atomic.Int64 // chunks received (dups included)
	events   atomic.Int64 // the message.delta events that carried them
	dups     atomic.Int64 // chunks received twice
	doneAt   atomic.Int64 // ns since epoch when turn.done arrived
	done     chan struct{}
	once     sync.Once
}

// newTurnRecorder records a turn of chunks model chunks after the
// session's seq base.
func newTurnRecorder(base int64, chunks int, epoch time.Time) *turnRecorder {
	return &turnRecorder{base: base, epoch: epoch, arrivals: make([]int64, chunks), done: make(chan struct{})}
}

// record notes one event (the chunks a message.delta's text holds); it
// returns true once turn.done has arrived.
func (r *turnRecorder) record(seq int64, kind string, chunks []int, at time.Time) bool {
	if seq <= r.base {
		return false
	}
	t := at.Sub(r.epoch).Nanoseconds()
	if t <= 0 {
		t = 1
	}
	if kind == eventkind.MessageDelta {
		r.events.Add(1)
		for _, i := range chunks {
			r.received.Add(1)
			switch {
			case i < 0 || i >= len(r.arrivals):
			case r.arrivals[i] != 0:
				r.dups.Add(1)
			default:
				r.arrivals[i] = t
			}
		}
	}
	if kind == eventkind.TurnDone {
		r.doneAt.Store(t)
		r.once.Do(func() { close(r.done) })
		return true
	}
	return false
}

// missing counts the turn's chunks that never arrived.
func (r *turnRecorder) missing() int64 {
	var n int64
	for _, a := range r.arrivals {
		if a == 0 {
			n++
		}
	}
	return n
}

// chunkIndexes reads the indexes i of the "d<i>" words of a delta's text.
func chunkIndexes(text []byte) []int {
	var out []int
	for _, f := range bytes.Fields(text) {
		if len(f) > 1 && f[0] == 'd' {
			if n, err := strconv.Atoi(string(f[1:])); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
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
				rec.record(ev.GetSeq(), ev.GetKind(), chunkIndexes([]byte(ev.GetMessageDelta().GetText())), time.Now())
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
			var chunks []int
			if ev.Kind == eventkind.MessageDelta {
				chunks = deltaIndexes(ev.raw)
			}
			rec.record(ev.Seq, ev.Kind, chunks, at)
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
			return fmt.Errorf("bench: the turn did not reach every client (%d chunks received in all): %w", got, ctx.Err())
		}
	}
	return nil
}
