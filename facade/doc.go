// Package facade is the edge: it serves the external protocol (JSON-RPC 2.0
// over WebSocket, the REST mapping, /health, /version, /protocol.json) and
// translates every call into a gRPC call on the runtime. It never imports
// runtime code: whatever it can do, a gRPC client can do.
//
// Session events reach the facade on one multiplexed SessionService
// SubscribeSessions stream for every watched session (hub.go), rendered once
// per event and shared by every connection watching the session.
package facade
