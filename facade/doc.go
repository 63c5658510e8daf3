// Package facade is the edge: it serves the external protocol (JSON-RPC 2.0
// over WebSocket, the REST mapping, /health, /version, /protocol.json), the
// agents and sessions as MCP tools at /mcp (mcpserver), and translates
// every call into a gRPC call on the runtime. It never imports
// runtime code: whatever it can do, a gRPC client can do.
//
// Session events reach the facade as pages of stored event objects on one
// multiplexed SessionService SubscribeSessions stream for every watched
// session (hub.go), framed once per event (codec.AppendEventFrames) and
// shared by every connection watching the session; a connection behind the
// shared feed reads on a Subscribe of its own until it catches up (the same
// reader sends a closed session's last events).
// session.resume is the runtime's ResumeSession, as every other method: its
// page renders as the answer's events array (codec.Marshal), and the events
// after a bounded answer follow as session.event.
//
// The other notifications (approval.pending/resolved, job.event,
// gateway.event, commands.changed, mcp.changed) come from one runtime
// watch stream per family and per key (watch.go): the connections that
// said hello with the same key share one set, opened on behalf of the key,
// so the runtime sends each only what its principal may see; the names
// come from the (notification) option (methods.NotificationOf). Which
// methods make a connection watch a session, and become its origin, is
// the (watch) option of the method table.
package facade
