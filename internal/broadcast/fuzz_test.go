package broadcast

import (
	"errors"
	"testing"
	"time"
)

// FuzzBroadcastQueue plays random push, marker, end, stop, limit and
// consume sequences against a model of the queue: the publisher never
// blocks, the consumer gets the values in order, none is lost before the
// declared overflow point, and an end marker always arrives.
func FuzzBroadcastQueue(f *testing.F) {
	f.Add([]byte{0x02, 0, 0, 0, 3, 0, 3, 5})
	f.Add([]byte{0x03, 0, 0, 0, 4, 3, 3, 7, 0x3f, 0, 0, 6})
	f.Add([]byte{0x00, 0, 0, 3, 3, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		const lagged, marker, last = -1, -2, -3
		p := Policy[int]{Limit: int(ops[0]>>1&7) + 1, Overflow: Overflow(ops[0] & 1), Lagged: []int{lagged}}
		q := New(p)
		var (
			owed     []int  // what the consumer is still owed, in order
			inHand   = -100 // after a Stop: the one value that may still arrive
			ended    bool
			stopped  bool
			wantErr  error
			lastGot  int
			tookOne  bool // the consumer took a value
			next     = 1
			limit    = p.Limit
			timeout  = time.After(20 * time.Second)
			received = func() (int, bool) {
				select {
				case v, ok := <-q.Events():
					return v, ok
				case <-timeout:
					t.Fatal("the consumer waited for a value the queue owes")
					return 0, false
				}
			}
		)
		consume := func() {
			switch {
			case stopped:
				if v, ok := received(); ok {
					if v != inHand {
						t.Fatalf("after Stop got %d, want nothing or %d", v, inHand)
					}
					inHand = -100
				}
			case len(owed) > 0:
				v, ok := received()
				if !ok || v != owed[0] {
					t.Fatalf("got %d (open %v), want %d", v, ok, owed[0])
				}
				owed, lastGot, tookOne = owed[1:], v, true
			case ended:
				if v, ok := received(); ok {
					t.Fatalf("got %d after the end", v)
				}
			}
		}
		for _, op := range ops[1:] {
			switch op & 7 {
			case 0, 1, 2:
				v := next
				next++
				overflow := q.Push(v)
				switch {
				case ended || stopped:
					if overflow {
						t.Fatalf("Push(%d) to an ended queue reported an overflow", v)
					}
				case overflow:
					// The value the consumer took last may count until
					// the goroutine that handed it over returns.
					if len(owed) < limit-1 || len(owed) == limit-1 && !tookOne {
						t.Fatalf("Push(%d) with %d owed, limit %d: overflow", v, len(owed), limit)
					}
					if p.Overflow == DropSubscriber {
						ended, wantErr = true, ErrLagged
						owed = append(owed, lagged)
					}
				case len(owed) >= limit:
					t.Fatalf("Push(%d) with %d owed, limit %d: no overflow", v, len(owed), limit)
				default:
					owed = append(owed, v)
				}
			case 3:
				consume()
			case 4:
				q.PushMarker(marker)
				if !ended && !stopped {
					owed = append(owed, marker)
				}
			case 5:
				q.End(errEnd, last)
				if !ended && !stopped {
					ended, wantErr = true, errEnd
					owed = append(owed, last)
				}
			case 6:
				q.Stop(errEnd)
				if !stopped {
					if !ended {
						wantErr = errEnd
					}
					if len(owed) > 0 {
						inHand = owed[0]
					}
					stopped, owed = true, nil
				}
			case 7:
				limit = max(1, int(op>>3))
				q.SetLimit(int(op >> 3))
			}
		}
		if !ended && !stopped {
			q.End(errEnd, last)
			ended, wantErr = true, errEnd
			owed = append(owed, last)
		}
		for len(owed) > 0 {
			consume()
		}
		consume()
		if !stopped && lastGot != last && lastGot != lagged {
			t.Fatalf("the queue ended after %d, not an end marker", lastGot)
		}
		if v, ok := received(); ok {
			t.Fatalf("got %d after the end", v)
		}
		if !errors.Is(q.Err(), wantErr) {
			t.Fatalf("Err = %v, want %v", q.Err(), wantErr)
		}
	})
}
