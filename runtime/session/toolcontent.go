package session

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
)

// toolContentWindow is how many of a session's latest events ToolResult
// looks through.
const toolContentWindow = 10_000

// toolContentPage is how many events ToolResult reads at once.
const toolContentPage = 256

// ToolResult returns the tool.result of call callID among the session's
// latest toolContentWindow events; not_found when it is not there.
func (s *Service) ToolResult(ctx context.Context, id, callID string) (events.ToolResultEvent, error) {
	if strings.TrimSpace(callID) == "" {
		return events.ToolResultEvent{}, errs.New(errcode.InvalidParams, "callId is empty: give a tool.result's callId")
	}
	if _, err := s.row(ctx, id); err != nil {
		return events.ToolResultEvent{}, err
	}
	last, err := s.deps.Store.LastSeq(ctx, id)
	if err != nil {
		return events.ToolResultEvent{}, err
	}
	// Read in pages, so that a session of large tool outputs is never held
	// in memory at once; the last result with the id wins.
	var found *events.ToolResultEvent
	want := []byte(`"` + callID + `"`)
	for after := max(0, last-toolContentWindow); after < last; {
		evs, err := s.deps.Store.ReadEvents(ctx, id, after, toolContentPage)
		if err != nil {
			return events.ToolResultEvent{}, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Kind != eventkind.ToolResult || !bytes.Contains(e.Payload, want) {
				continue
			}
			var res events.ToolResultEvent
			if json.Unmarshal(e.Payload, &res) == nil && res.CallID == callID {
				found = &res
			}
		}
		after = evs[len(evs)-1].Seq
	}
	if found != nil {
		return *found, nil
	}
	return events.ToolResultEvent{}, errs.New(errcode.NotFound, "no result of tool call %s among the last %d events of session %s", callID, toolContentWindow, id)
}
