// Package codec renders the protobuf messages of the runtime's gRPC services
// as the protocol's JSON (PROTOCOL.md §2, §7): results, notifications and
// session events with every field present, 64-bit integers as numbers and
// SessionEvent flattened to {sessionId, seq, kind, payload, ts}; Unmarshal
// reads that JSON back leniently. The strict decoding of what clients send
// (params, results of server → client requests) is protocol/strict's.
//
// Stored events are rendered with the same bytes without decoding their
// payload (AppendStoredEvent, and StoredEvents for a page of one session);
// one writer builds every event object, typed or stored. The runtime sends
// them in pages (trellisv1.EventPage; PageObjects reads one), and the
// facade wraps each object into its session.event frame with
// AppendEventFrames, the one place such a frame is built. A page inside a
// result (session.resume's events) renders as the array of its objects
// (Marshal); fields marked (trellis.v1.grpc_only) are not in the protocol's
// JSON.
package codec
