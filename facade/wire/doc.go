// Package wire renders a session's canonical events in the line formats of
// WIRE-FORMATS.md, for the HTTP event stream and the trellis CLI: "events"
// (the session.event objects themselves, package events), "wire" (pagent's
// JSON-RPC notification lines, package pagent) and "pi" (pi's JSON mode
// lines, package pi). The encoders are pure: fed the same events in seq
// order, they return the same lines.
package wire
