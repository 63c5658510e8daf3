package approval

import (
	"sync"

	"github.com/trellis-run/trellis/internal/broadcast"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// GroupEvent is one message of an approver group: an event of one of its
// approvers, or (Ended) the end of that approver — detached, replaced by
// another Attach for its origin, dropped for not reading, or the broker
// closing. An approver's events come before its Ended, in order.
type GroupEvent struct {
	Approver *Approver
	Event    ApproverEvent
	Ended    bool
}

// ApproverGroup delivers the events of several approvers (the origins of
// one Attach stream) on one channel, with one goroutine for the whole
// group rather than one per approver. Its backlog is the broker's backlog
// per approver attached: past it, the approver whose event did not fit is
// detached, as a lone approver that stops reading is.
type ApproverGroup struct {
	b    *Broker
	sink *groupSink
}

// groupSink is the group's queue and its approver count.
type groupSink struct {
	box     *broadcast.Queue[GroupEvent]
	backlog int

	mu      sync.Mutex
	members map[*Approver]struct{} // attached, not ended
}

// NewGroup returns an empty approver group; Close ends it.
func (b *Broker) NewGroup() *ApproverGroup {
	// A refused event detaches its approver (sendLocked), whose Ended is a
	// marker past the limit.
	box := broadcast.New(broadcast.Policy[GroupEvent]{Limit: 1, Overflow: broadcast.RefuseValue})
	return &ApproverGroup{b: b, sink: &groupSink{box: box, backlog: b.opts.Backlog, members: map[*Approver]struct{}{}}}
}

// Events returns the group's messages. The channel closes after Close.
func (g *ApproverGroup) Events() <-chan GroupEvent { return g.sink.box.Events() }

// Attach makes a new approver of the group the one of origin, as
// Broker.Attach does: a second approver for the same origin (in this group
// or not) replaces the first, which ends, and receives its pending
// requests.
func (g *ApproverGroup) Attach(origin string) (*Approver, error) {
	if origin == "" {
		return nil, errs.New(errcode.InvalidParams, "an approver needs an origin id")
	}
	ap := &Approver{b: g.b, origin: origin, group: g.sink}
	g.sink.join(ap)
	if err := g.b.attach(ap); err != nil {
		g.sink.leave(ap)
		return nil, err
	}
	return ap, nil
}

// Close ends the group's channel at once. It does not detach its
// approvers: Detach each first.
func (g *ApproverGroup) Close() { g.sink.box.Stop(nil) }

func (s *groupSink) join(ap *Approver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[ap] = struct{}{}
	s.box.SetLimit(s.limit())
}

// leave forgets ap; it reports whether ap was a member.
func (s *groupSink) leave(ap *Approver) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.members[ap]; !ok {
		return false
	}
	delete(s.members, ap)
	s.box.SetLimit(s.limit())
	return true
}

// limit is the backlog per approver attached (at least one's) and the one
// event being handed over.
func (s *groupSink) limit() int { return s.backlog*max(1, len(s.members)) + 1 }

func (s *groupSink) push(ap *Approver, ev ApproverEvent) (full bool) {
	s.mu.Lock()
	_, member := s.members[ap]
	s.mu.Unlock()
	if !member {
		return false
	}
	return s.box.Push(GroupEvent{Approver: ap, Event: ev})
}

// end queues ap's Ended, once, whatever the backlog.
func (s *groupSink) end(ap *Approver) {
	if s.leave(ap) {
		s.box.PushMarker(GroupEvent{Approver: ap, Ended: true})
	}
}
