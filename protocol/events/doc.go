// Package events is a session's canonical event as Go clients hold it,
// {sessionId, seq, kind, payload, ts} (PROTOCOL.md §7), the payloads the
// renderings read, and the "events" line format: one session.event object
// per line, unchanged.
package events
