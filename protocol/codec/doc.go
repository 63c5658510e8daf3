// Package codec translates between the protocol's JSON (PROTOCOL.md §2, §7)
// and the protobuf messages of the runtime's gRPC services: params are decoded
// strictly (unknown fields and wrong types are invalid_params naming the
// field), and results, notifications and session events are rendered with
// every field present, 64-bit integers as numbers and SessionEvent flattened
// to {sessionId, seq, kind, payload, ts}.
//
// Stored events are rendered with the same bytes without decoding their
// payload (AppendStoredEvent, and StoredEvents for a page of one session):
// the runtime sends them in pages (trellisv1.EventPage; PageObjects reads
// one), and the facade wraps each object into its session.event frame with
// AppendEventFrame(s), the one place such a frame is built. A page inside a
// result (session.resume's events) renders as the array of its objects
// (Marshal); fields marked (trellis.v1.grpc_only) are not in the protocol's
// JSON.
package codec
