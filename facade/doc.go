// Package facade is the edge: it serves the external protocol (JSON-RPC 2.0
// over WebSocket, the REST mapping, /health, /version, /protocol.json) and
// translates every call into a gRPC call on the runtime. It never imports
// runtime code: whatever it can do, a gRPC client can do.
//
// Session events reach the facade as pages of stored event objects on one
// multiplexed SessionService SubscribeSessions stream for every watched
// session (hub.go), framed once per event (codec.AppendEventFrames) and
// shared by every connection watching the session; a connection behind the
// shared feed reads on a Subscribe of its own until it catches up.
// session.resume is the runtime's ResumeSession, as every other method: its
// page renders as the answer's events array (codec.Marshal), and the events
// after a bounded answer follow as session.event.
package facade
