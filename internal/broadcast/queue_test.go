package broadcast

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var errEnd = errors.New("the publisher ended")

// op is one step a publisher takes on a queue.
type op struct {
	push     int  // Push(push), unless another field is set
	overflow bool // what Push must report
	marker   int  // PushMarker(marker)
	end      []int
	stop     bool
	limit    int // SetLimit(limit)
}

// recvAll reads q until its channel closes (failing the test, not hanging
// it, if the queue never ends).
func recvAll(t *testing.T, q interface{ Events() <-chan int }) []int {
	t.Helper()
	var got []int
	for {
		select {
		case v, ok := <-q.Events():
			if !ok {
				return got
			}
			got = append(got, v)
		case <-time.After(10 * time.Second):
			t.Fatalf("the queue did not end; got %v", got)
		}
	}
}

func TestQueuePolicies(t *testing.T) {
	tests := []struct {
		name    string
		policy  Policy[int]
		ops     []op
		want    []int // delivered, in order
		atMost  int   // after a Stop: only a prefix of want, this long at most
		wantErr error
	}{{
		name:   "DropSubscriber delivers what it held, then the lagged marker",
		policy: Policy[int]{Limit: 2, Overflow: DropSubscriber, Lagged: []int{-1}},
		ops: []op{{push: 1}, {push: 2}, {push: 3, overflow: true},
			{push: 4}, {end: []int{-9}}}, // ended: both dropped, no overflow
		want: []int{1, 2, -1}, wantErr: ErrLagged,
	}, {
		name:   "DropSubscriber without a marker tells by Err",
		policy: Policy[int]{Limit: 1, Overflow: DropSubscriber},
		ops:    []op{{push: 1}, {push: 2, overflow: true}},
		want:   []int{1}, wantErr: ErrLagged,
	}, {
		name:   "RefuseValue drops the value and goes on",
		policy: Policy[int]{Limit: 2, Overflow: RefuseValue},
		ops: []op{{push: 1}, {push: 2}, {push: 3, overflow: true},
			{marker: -2}, {push: 4, overflow: true}, {end: []int{-3}}},
		want: []int{1, 2, -2, -3}, wantErr: errEnd,
	}, {
		name:   "End delivers what is queued, then its last values",
		policy: Policy[int]{Limit: 4, Overflow: DropSubscriber},
		ops:    []op{{push: 1}, {push: 2}, {end: []int{-3, -4}}, {push: 5}, {marker: -6}},
		want:   []int{1, 2, -3, -4}, wantErr: errEnd,
	}, {
		name:   "SetLimit moves the overflow point",
		policy: Policy[int]{Limit: 1, Overflow: RefuseValue},
		ops: []op{{push: 1}, {push: 2, overflow: true}, {limit: 3}, {push: 3}, {push: 4},
			{push: 5, overflow: true}, {limit: 0}, {marker: -1}, {end: []int{}}},
		want: []int{1, 3, 4, -1}, wantErr: errEnd,
	}, {
		name:   "Stop drops what was not handed over",
		policy: Policy[int]{Limit: 3, Overflow: DropSubscriber},
		ops:    []op{{push: 1}, {push: 2}, {stop: true}, {push: 3}, {end: []int{-1}}},
		want:   []int{1}, atMost: 1, wantErr: errEnd,
	}, {
		name:   "Stop after a lag keeps ErrLagged",
		policy: Policy[int]{Limit: 1, Overflow: DropSubscriber, Lagged: []int{-1}},
		ops:    []op{{push: 1}, {push: 2, overflow: true}, {stop: true}},
		want:   []int{1, -1}, atMost: 2, wantErr: ErrLagged,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(tt.policy)
			for i, o := range tt.ops {
				switch {
				case o.end != nil:
					q.End(errEnd, o.end...)
				case o.stop:
					q.Stop(errEnd)
				case o.marker != 0:
					q.PushMarker(o.marker)
				case o.push == 0:
					q.SetLimit(o.limit)
				default:
					if got := q.Push(o.push); got != o.overflow {
						t.Fatalf("op %d: Push(%d) reported overflow %v", i, o.push, got)
					}
				}
			}
			got := recvAll(t, q)
			if tt.atMost > 0 {
				if len(got) > tt.atMost || !slices.Equal(got, tt.want[:len(got)]) {
					t.Errorf("after Stop got %v, want at most %v", got, tt.want[:tt.atMost])
				}
			} else if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if !errors.Is(q.Err(), tt.wantErr) {
				t.Errorf("Err = %v, want %v", q.Err(), tt.wantErr)
			}
		})
	}
}

// TestSink: a sink is offered a value first (try), gets the rest in order
// from one goroutine, and a send that fails stops the queue.
func TestSink(t *testing.T) {
	tests := []struct {
		name     string
		tryTakes bool
		failAt   int // the send of this value fails (0: none)
		push     []int
		want     []int
		wantErr  error
	}{
		{name: "try takes what finds nothing waiting", tryTakes: true, push: []int{1, 2, 3}, want: []int{1, 2, 3}},
		{name: "send delivers in order", push: []int{1, 2, 3}, want: []int{1, 2, 3}},
		{name: "a failed send stops the queue", failAt: 2, push: []int{1, 2, 3}, want: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan int, 16)
			release := make(chan struct{})
			done := make(chan struct{})
			q := NewSink(Policy[int]{Limit: 8, Overflow: RefuseValue},
				func(v int) bool {
					if tt.tryTakes {
						got <- v
					}
					return tt.tryTakes
				},
				func(v int) bool {
					<-release
					if v == tt.failAt {
						close(done)
						return false
					}
					got <- v
					return true
				})
			for _, v := range tt.push {
				if q.Push(v) {
					t.Fatalf("Push(%d) overflowed", v)
				}
			}
			close(release)
			if tt.failAt != 0 {
				<-done
				// Once the queue is stopped, pushes are dropped.
				for q.Err() == nil && q.Push(99) {
					t.Fatal("Push overflowed a stopped queue")
				}
			} else {
				q.End(nil)
			}
			var all []int
			for len(all) < len(tt.want) {
				all = append(all, <-got)
			}
			if !slices.Equal(all, tt.want) {
				t.Errorf("delivered %v, want %v", all, tt.want)
			}
			if q.Events() != nil {
				t.Error("a sink has a channel")
			}
		})
	}
}

func TestHub(t *testing.T) {
	h := &Hub[int]{Limit: 2, Lagged: []int{-1}}
	dropped := 0
	h.OnDrop = func() { dropped++ }
	ctx, cancel := context.WithCancel(context.Background())
	fast, slow := h.Add(ctx), h.Add(context.Background())
	for v := 1; v <= 3; v++ {
		h.Publish(v) // the third leaves slow, which read nothing, behind
		if got := <-fast.Events(); got != v {
			t.Fatalf("fast got %d, want %d", got, v)
		}
	}
	if got := recvAll(t, slow); !slices.Equal(got, []int{1, 2, -1}) || !errors.Is(slow.Err(), ErrLagged) {
		t.Fatalf("slow after lagging: got %v, err %v", got, slow.Err())
	}
	if dropped != 1 || h.Len() != 1 {
		t.Fatalf("dropped %d, %d watchers left; want 1, 1", dropped, h.Len())
	}
	cancel()
	if got := recvAll(t, fast); len(got) != 0 || fast.Err() != nil {
		t.Fatalf("fast after cancel: got %v, err %v", got, fast.Err())
	}
	other := h.Add(context.Background())
	h.Publish(4)
	h.Close()
	if got := recvAll(t, other); !slices.Equal(got, []int{4}) || !errors.Is(other.Err(), ErrClosed) {
		t.Fatalf("after Close: got %v, err %v", got, other.Err())
	}
	late := h.Add(context.Background())
	if _, ok := <-late.Events(); ok || !errors.Is(late.Err(), ErrClosed) {
		t.Fatalf("Add after Close: %v", late.Err())
	}
}
