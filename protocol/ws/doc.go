// Package ws is the protocol's WebSocket transport (PROTOCOL.md §1–§2, STYLE.md
// 11), for the daemon's facade, the Go client, the CLI and the bench alike,
// on one library (gobwas/ws) used through its frame API: it upgrades /ws
// requests whose Origin passes the policy, reads text (or binary, taken as
// UTF-8) messages up to a size limit — closing with 1009 as soon as a frame
// header announces more — answers pings, pings on an interval from a timer
// and drops peers that stop answering, and runs close callbacks so that
// subscriptions end with the connection. A batch of ready messages is
// written as frames into one buffer and one system call; a large lone
// frame goes out from the caller's bytes.
package ws
