package gateway

import "github.com/trellis-run/trellis/internal/broadcast"

// Kinds of gateway.event.
const (
	EventMessage = "message"
	EventReply   = "reply"
	EventError   = "error"
)

// Event is one gateway.event notification.
type Event struct {
	BindingID string
	Kind      string // EventMessage, EventReply or EventError
	Payload   map[string]any
}

// Watch is a stream of gateway events (GatewayService.Watch).
type Watch = broadcast.Watch[Event]
