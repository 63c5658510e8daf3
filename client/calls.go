package client

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/protocol/codec"
)

// Calls are the protocol's methods as typed Go calls, generated from the
// protos (calls.gen.go): each takes its params and returns its result as
// the RPC's messages, sent and read as the protocol renders them. Errors
// are those of Call. Get them with Client.Calls.
type Calls struct{ c *Client }

// Calls returns the typed calls of c.
func (c *Client) Calls() Calls { return Calls{c: c} }

// call sends params (nil: none) and decodes the result into result; fields a
// newer daemon adds are skipped.
func (x Calls) call(ctx context.Context, method string, params, result proto.Message) error {
	raw := json.RawMessage("{}")
	if params != nil && params.ProtoReflect().IsValid() {
		raw = codec.Marshal(params)
	}
	var answer json.RawMessage
	if err := x.c.Call(ctx, method, raw, &answer); err != nil {
		return err
	}
	if len(answer) == 0 || string(answer) == "null" {
		return nil
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(answer, result)
}
