// Package ws is the protocol's WebSocket transport (PROTOCOL.md §1–§2, STYLE.md
// 11): it upgrades /ws requests whose Origin passes the policy, reads text
// (or binary, taken as UTF-8) frames up to a size limit, pings on an
// interval and drops peers that stop answering, and runs close callbacks so
// that subscriptions end with the connection. A batch of ready messages is
// written as raw text frames into one buffer and one system call. The
// client side (Dial) serves the command-line client and tests.
package ws
