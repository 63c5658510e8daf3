package wire

import (
	"errors"
	"fmt"

	"github.com/trellis-run/trellis/facade/wire/pagent"
	"github.com/trellis-run/trellis/facade/wire/pi"
	"github.com/trellis-run/trellis/protocol/events"
)

// Event is a session's canonical event, {sessionId, seq, kind, payload, ts}.
type Event = events.Event

// Header describes the session a "pi" stream renders (its header line).
type Header = pi.Header

// Format names a rendering.
type Format string

// The formats.
const (
	// FormatEvents is the session.event objects, one per line.
	FormatEvents Format = "events"
	// FormatWire is pagent's JSON-RPC 2.0 notification lines.
	FormatWire Format = "wire"
	// FormatPi is pi's JSON mode lines (the CLI's --output json).
	FormatPi Format = "pi"
)

// ErrUnknownFormat is returned (wrapped) by ParseFormat and NewEncoder.
var ErrUnknownFormat = errors.New("wire: unknown format")

// ParseFormat parses "events", "wire" or "pi"; "json" is accepted for "pi",
// as the CLI's --output calls it.
func ParseFormat(s string) (Format, error) {
	switch s {
	case string(FormatEvents):
		return FormatEvents, nil
	case string(FormatWire):
		return FormatWire, nil
	case string(FormatPi), "json":
		return FormatPi, nil
	}
	return "", fmt.Errorf("%w %q: use events, wire or pi", ErrUnknownFormat, s)
}

// Encoder renders one session's events, fed in seq order, in one format.
// Each call returns complete lines ending in "\n"; a call may return none.
// An encoder is stateful and not safe for concurrent use.
type Encoder interface {
	// Begin returns the lines that open a stream, before any event: the
	// session header for pi, none for the others.
	Begin() ([][]byte, error)
	// Encode returns the lines ev renders as. An error means ev's payload
	// could not be read; the encoder's state is unchanged.
	Encode(ev Event) ([][]byte, error)
}

// NewEncoder returns an encoder of format f; h is used by pi only.
func NewEncoder(f Format, h Header) (Encoder, error) {
	switch f {
	case FormatEvents:
		return events.NewEncoder(), nil
	case FormatWire:
		return pagent.NewEncoder(), nil
	case FormatPi:
		return pi.NewEncoder(h), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownFormat, f)
}
