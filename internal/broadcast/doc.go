// Package broadcast is the in-memory fan-out of the streams that are not
// durable (the approval queue and approvers, the job, gateway, skill, MCP
// and settings watches, the edge's notifications): a publisher hands each
// subscriber's Queue a value and never blocks, and the queue delivers its
// values in order, to a channel (New) or a function (NewSink), from a
// goroutine that runs only while values wait. The durable session event
// stream has its own fan-out (runtime/eventlog, the facade's hub): a reader
// that falls behind there reads the store instead.
//
// A queue holds at most its Policy's Limit undelivered values (the one
// being delivered counts) and declares at construction what a value past
// that does:
//
//   - DropSubscriber ends the subscriber: the values queued before the
//     overflow are delivered, then the policy's Lagged markers, and Err
//     reports ErrLagged. Hub, the fan-out to a set of watchers, drops its
//     laggards this way (a watcher can watch again and re-read the state).
//   - RefuseValue leaves the queue as it is and reports the overflow to the
//     publisher, who decides what it means: the approval broker detaches an
//     approver that stopped reading, the facade closes a connection whose
//     client reads nothing.
//
// Whatever the policy, End delivers what is queued and then its last
// values before the subscriber's end (the end markers: a shutdown, an
// approver's replacement), PushMarker queues a marker past the limit, and
// Stop ends the queue at once, dropping what was not delivered.
package broadcast
