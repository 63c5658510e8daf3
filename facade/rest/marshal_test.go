package rest

import (
	"net/url"
	"strings"
	"testing"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

// TestMarshalerIsTheCodec: a REST body is codec.Marshal of the result (64-bit
// numbers as numbers, events as {sessionId, seq, kind, payload, ts}).
func TestMarshalerIsTheCodec(t *testing.T) {
	ev := &trellisv1.SessionEvent{
		SessionId: "s", Seq: 7, Ts: "2026-01-01T00:00:00.000Z",
		Payload: &trellisv1.SessionEvent_TurnStarted{TurnStarted: &trellisv1.TurnStartedEvent{TurnId: "t"}},
	}
	obj := codec.Marshal(ev)
	resp := &trellisv1.ResumeSessionResponse{SessionId: "s", Events: &trellisv1.EventPage{Json: obj, Ends: []uint32{uint32(len(obj))}, Seqs: []int64{7}}}
	b, err := Marshaler{}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(codec.Marshal(resp)) {
		t.Fatalf("%s\nwant %s", b, codec.Marshal(resp))
	}
	if !strings.Contains(string(b), `"seq":7,"kind":"turn.started","payload":{"turnId":"t"`) {
		t.Fatalf("not the protocol's event rendering: %s", b)
	}
}

// TestDecodeErrorsAreJSONRPCs: a body or a query string is refused with the
// message JSON-RPC gives for the same params (no "proto:" text).
func TestDecodeErrorsAreJSONRPCs(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"sessionId":"s","bogus":1}`, `unknown field "bogus" in params of session.compact`},
		{`{"sessionId":5}`, `field "sessionId" in params of session.compact must be a string, got the number 5`},
		{`[1]`, `params of session.compact must be an object, got an array`},
	} {
		err := Marshaler{}.Unmarshal([]byte(c.body), &trellisv1.CompactRequest{})
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
	if err := (Marshaler{}).NewDecoder(strings.NewReader("")).Decode(&trellisv1.CompactRequest{}); err != nil {
		t.Errorf("an empty body is {}: %v", err)
	}
	for _, c := range []struct{ query, want string }{
		{"bogus=1", `unknown field "bogus" in params of session.list`},
		{"includeClosed=maybe", `field "includeClosed" in params of session.list must be a boolean, got a string`},
		{"includeClosed=true&includeClosed=false", `query parameter "includeClosed" of session.list takes one value, got 2`},
		{"includeClosed=true&workdir=%2Ftmp", ""},
	} {
		values, _ := url.ParseQuery(c.query)
		req := &trellisv1.ListSessionsRequest{}
		err := queryParser{}.Parse(req, values, nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.query, err)
		case c.want == "" && (!req.GetIncludeClosed() || req.GetWorkdir() != "/tmp"):
			t.Errorf("%s decoded as %v", c.query, req)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s: %v, want %q", c.query, err, c.want)
		}
	}
}
