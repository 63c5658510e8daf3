package jsonrpc_test

import (
	"fmt"

	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// A notification's params are already JSON (a stored event, say): the frame
// wraps them without decoding or re-encoding them.
func ExampleNotificationFrame() {
	event := []byte(`{"sessionId":"s-1","seq":1,"kind":"turn.started","payload":{"turnId":"t-1"},"ts":"2026-12-05T10:00:00.000Z"}`)
	fmt.Println(string(jsonrpc.NotificationFrame("session.event", event)))
	// Output: {"jsonrpc":"2.0","method":"session.event","params":{"sessionId":"s-1","seq":1,"kind":"turn.started","payload":{"turnId":"t-1"},"ts":"2026-12-05T10:00:00.000Z"}}
}
