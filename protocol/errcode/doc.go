// Package errcode is the one place where a gRPC status becomes a JSON-RPC error
// object {code, message, data: {code, ...}} (PROTOCOL.md §2 and §9), through a
// literal table keyed by the protocol's string codes.
package errcode
