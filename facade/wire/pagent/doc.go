// Package pagent is the "wire" rendering of a session's events: JSON-RPC 2.0
// notification lines, one per event, that pagent (>= 0.2) decodes with its
// own decode_event_line (WIRE-FORMATS.md). One turn of ours is one pagent
// run; one provider call is one pagent turn.
package pagent
