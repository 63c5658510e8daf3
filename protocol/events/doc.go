// Package events is a session's canonical event as Go clients hold it,
// {sessionId, seq, kind, payload, ts} (PROTOCOL.md §7), the payload of each
// kind, and the "events" line format: one session.event object per line,
// unchanged.
//
// The payload types and the values of their one_of fields (turn.done
// reasons, step.done stop reasons, ...) are generated from events.proto
// (payloads.gen.go): plain structs that encoding/json renders as the
// protocol does, which the runtime's producers marshal and the renderings
// and clients decode.
package events
