// Package pi is the "json" rendering of a session's events: agent session
// event lines as pi's JSON mode prints them (pinned to pi 1.6.0,
// WIRE-FORMATS.md), opened by a session header. One turn of ours is one pi
// agent run; one provider call is one pi turn.
package pi
