package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/facade/wire"
	"github.com/trellis-run/trellis/protocol/events"
)

// The output formats of trellis run --output (WIRE-FORMATS.md "Where they are
// served").
const (
	modeText   = "text"   // the answer only
	modeJSON   = "json"   // pi's JSON event lines
	modeWire   = "wire"   // pagent's JSON-RPC notification lines
	modeEvents = "events" // session.event objects, one per line
)

var modes = []string{modeText, modeJSON, modeWire, modeEvents}

// output writes the events of one run to stdout in one mode.
type output interface {
	// event renders one event of the run.
	event(ev client.Event) error
	// end is called once after the run's last event.
	end() error
}

// sessionInfo is what a format needs to know of the session up front.
type sessionInfo struct {
	ID        string
	Workdir   string
	CreatedAt string // RFC3339
	Provider  string
	Model     string
}

func sessionInfoOf(s client.SessionSummary) sessionInfo {
	return sessionInfo{ID: s.SessionID, Workdir: s.Workdir, CreatedAt: s.CreatedAt, Provider: deref(s.Provider), Model: deref(s.Model)}
}

// newOutput returns the output of a mode.
func newOutput(mode string, w io.Writer, s sessionInfo) (output, error) {
	switch mode {
	case modeText:
		return newTranscript(w, io.Discard, false), nil
	case modeJSON, modeWire, modeEvents:
		enc, err := newWireEncoder(mode, s)
		if err != nil {
			return nil, err
		}
		return newLineOutput(w, enc)
	}
	if slices.Contains(permissionModes, mode) {
		return nil, usageError{fmt.Errorf("--output %q: %s is a permission mode, give it with --permission-mode %s (--output takes %s)", mode, mode, mode, strings.Join(modes, ", "))}
	}
	return nil, usageError{fmt.Errorf("--output %q: want one of %s", mode, strings.Join(modes, ", "))}
}

// newWireEncoder returns the facade/wire encoder of the json (pi), wire
// (pagent) or events mode.
func newWireEncoder(mode string, s sessionInfo) (wire.Encoder, error) {
	f, err := wire.ParseFormat(mode)
	if err != nil {
		return nil, err
	}
	created, _ := time.Parse(time.RFC3339Nano, s.CreatedAt)
	return wire.NewEncoder(f, wire.Header{
		SessionID: s.ID, Timestamp: created, Cwd: s.Workdir, Provider: s.Provider, Model: s.Model,
	})
}

// lineOutput writes an encoder's lines.
type lineOutput struct {
	w   io.Writer
	enc wire.Encoder
}

func newLineOutput(w io.Writer, enc wire.Encoder) (*lineOutput, error) {
	o := &lineOutput{w: w, enc: enc}
	lines, err := enc.Begin()
	if err != nil {
		return nil, err
	}
	return o, o.write(lines)
}

func (o *lineOutput) event(ev client.Event) error {
	var e events.Event
	if err := e.UnmarshalJSON(ev.Raw); err != nil {
		return err
	}
	lines, err := o.enc.Encode(e)
	if err != nil {
		return fmt.Errorf("rendering event %d (%s): %w", ev.Seq, ev.Kind, err)
	}
	return o.write(lines)
}

func (o *lineOutput) write(lines [][]byte) error {
	for _, l := range lines {
		if _, err := o.w.Write(l); err != nil {
			return err
		}
	}
	return nil
}

func (o *lineOutput) end() error { return nil }
