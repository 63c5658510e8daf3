package approval

import "encoding/json"

// Question is one tool call that needs a person's approval, as the agent's
// gate hands it to the broker.
type Question struct {
	SessionID string
	Workdir   string
	Mode      string
	Kind      string // session kind: chat | scheduled | subagent
	JobID     string
	// Origin is the approver the request goes to ("" or detached: the
	// unattended queue).
	Origin string
	// Queued puts the request in the unattended queue whoever the origin
	// is (a paused turn's budget: answered with approval.respond, whose
	// caller's role the answer needs).
	Queued bool
	TurnID string
	CallID string
	Tool   string
	Args   json.RawMessage
	Tag    Tag
}
