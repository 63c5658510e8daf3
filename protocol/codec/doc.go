// Package codec translates between the protocol's JSON (PROTOCOL.md §2, §7)
// and the protobuf messages of the runtime's gRPC services: params are decoded
// strictly (unknown fields and wrong types are invalid_params naming the
// field), and results, notifications and session events are rendered with
// every field present, 64-bit integers as numbers and SessionEvent flattened
// to {sessionId, seq, kind, payload, ts}. The runtime renders stored events
// with the same code (AppendStoredEvent, and StoredEvents for a page of one
// session), optionally inside their session.event frames
// (EventFramePrefix, EventFrameSuffix), so that the facade passes them on
// as they are.
package codec
