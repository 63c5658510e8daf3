// Package eventlog gives each session a durable, gap-free sequence of events that can be replayed and tailed.
//
// Append numbers a session's events 1, 2, 3 … under the session's lock and
// hands them to one writer goroutine that group-commits whatever is queued,
// across sessions, in a single store transaction; only then are the events
// fanned out to readers and Append returns.
//
// Reading has one implementation, Cursor (Log.Watch): a pull-based reader
// with no goroutine of its own, told by a notify callback when it may have
// something. Visit hands the next events, bounded in count and bytes, to a
// callback: first the stored ones (read through the store's ScanEvents,
// straight from the driver's buffers, in pages that start small and grow),
// then, once, the end of the replay, then live events with no gap and no
// duplicate. A reader that falls behind is never dropped and never slows
// Append: it reads from the store until it has caught up again. Every
// reader of the runtime's gRPC edge (Subscribe, SubscribeSessions,
// ResumeSession) is a Cursor; a Subscription is a Cursor read by a
// goroutine onto a channel, for the runtime's own consumers, and returns
// stored events only: a held event reaches it once stored, never from
// memory, so nothing of the runtime acts on an event the log may not keep.
//
// The log's memory is bounded by live work: no payload outlives its commit
// (a reader's buffer aside), and sessions with no cursor, nothing queued
// and nothing held are swept out of its table (WithIdleSessions); their
// next event reads the last seq from the store. The log's own count of a
// session's stored events stands for the store's only while this daemon
// holds the session's lease and has appended since taking it (another
// daemon may have written in between); otherwise the store answers.
package eventlog
