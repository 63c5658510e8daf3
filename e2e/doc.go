// Package e2e holds the end-to-end tests: a real daemon (in process, or as
// a child process where a test kills it) driven through its real interfaces —
// gRPC, JSON-RPC over WebSocket and REST — with behaviour tests written once
// and run against each transport through one small client interface.
package e2e
