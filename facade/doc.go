// Package facade is the edge: it serves the external protocol (JSON-RPC 2.0
// over WebSocket, the REST mapping, /health, /version, /protocol.json) and
// translates every call into a gRPC call on the runtime. It never imports
// runtime code: whatever it can do, a gRPC client can do.
package facade
