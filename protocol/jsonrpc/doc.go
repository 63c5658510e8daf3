// Package jsonrpc is a JSON-RPC 2.0 connection (PROTOCOL.md §2, §5, §6) over
// any message transport: it decodes frames and batches, runs each request
// concurrently through a Handler, echoes ids exactly, bounds in-flight
// requests and the outgoing queue, and issues server → client requests and
// notifications.
package jsonrpc
