package session

import (
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
	evs, err := s.deps.Store.ReadEvents(ctx, id, max(0, last-toolContentWindow), 0)
	if err != nil {
		return events.ToolResultEvent{}, err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind != eventkind.ToolResult {
			continue
		}
		var res events.ToolResultEvent
		if json.Unmarshal(evs[i].Payload, &res) == nil && res.CallID == callID {
			return res, nil
		}
	}
	return events.ToolResultEvent{}, errs.New(errcode.NotFound, "no result of tool call %s among the last %d events of session %s", callID, toolContentWindow, id)
}
