package codec_test

import (
	"fmt"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// A result carries every field, unset ones too: a client never has to
// guess whether a missing field means "zero" or "unknown".
func ExampleMarshal() {
	fmt.Println(string(codec.Marshal(&trellisv1.SteerResponse{Ok: true, TurnId: "t-1"})))
	fmt.Println(string(codec.Marshal(&trellisv1.CreateKeyRequest{PrincipalId: "p-1"})))
	// Output:
	// {"ok":true,"started":false,"turnId":"t-1"}
	// {"principalId":"p-1","name":null,"expiresAt":null,"ratePerSecond":null,"maxRunningSessions":null}
}
