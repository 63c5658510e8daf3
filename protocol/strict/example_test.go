package strict_test

import (
	"encoding/json"
	"fmt"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/strict"
)

// Params are decoded strictly: a field the method does not define, or a
// value of the wrong type, is invalid_params with a message that names it.
func ExampleDecode() {
	var req trellisv1.SetModeRequest
	for _, params := range []string{
		`{"sessionId":"s-1","mode":"plan"}`,
		`{"sessionId":"s-1","mode":"plan","colour":"red"}`,
		`{"sessionId":7,"mode":"plan"}`,
	} {
		if err := strict.Decode("session.setMode", json.RawMessage(params), &req); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("ok:", req.GetSessionId(), req.GetMode())
	}
	// Output:
	// ok: s-1 plan
	// invalid_params: unknown field "colour" in params of session.setMode
	// invalid_params: field "sessionId" in params of session.setMode must be a string, got the number 7
}
