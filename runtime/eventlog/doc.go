// Package eventlog gives each session a durable, gap-free sequence of events that can be replayed and tailed.
//
// Append numbers a session's events 1, 2, 3 … under the session's lock and
// hands them to one writer goroutine that group-commits whatever is queued,
// across sessions, in a single store transaction; only then are the events
// fanned out to subscribers and Append returns. Subscribe replays from the
// store, marks the point where it caught up, then tails live events with no
// gap and no duplicate. A subscriber that falls behind is never dropped and
// never slows Append: it reads from the store until it has caught up again.
//
// The delivery rules live in one place, Cursor (Log.Watch): a pull-based
// reader with no goroutine of its own, told by a notify callback when it may
// have something; Next returns the next page of events (bounded in count and
// bytes) and, once, the end of the replay. A Subscription is a Cursor read
// by a goroutine onto a channel; the runtime's multiplexed SubscribeSessions
// stream reads thousands of cursors from one goroutine.
package eventlog
