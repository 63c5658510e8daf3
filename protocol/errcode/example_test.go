package errcode_test

import (
	"encoding/json"
	"fmt"

	"github.com/trellis-run/trellis/protocol/errcode"
)

// Every error carries its string code in data.code beside the numeric
// JSON-RPC code; clients branch on the string.
func ExampleNew() {
	e := errcode.New(errcode.NotFound, "no session %q", "s-9").WithData("sessionId", "s-9")
	b, _ := json.Marshal(e)
	fmt.Println(string(b))
	fmt.Println(e.HasCode(errcode.NotFound))
	// Output:
	// {"code":-32004,"message":"no session \"s-9\"","data":{"code":"not_found","sessionId":"s-9"}}
	// true
}
