package strict_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/strict"
)

func TestDecode(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		newMsg  func() proto.Message
		params  string
		want    proto.Message // on success
		wantErr string        // exact message on failure
	}{
		{
			name: "absent params are {}", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: "", want: &trellisv1.CreateSessionRequest{},
		},
		{
			name: "null params are {}", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: " null ", want: &trellisv1.CreateSessionRequest{},
		},
		{
			name: "full params", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: `{"workdir":"/w","mode":"plan","provider":null}`,
			want:   &trellisv1.CreateSessionRequest{Workdir: "/w", Mode: proto.String("plan")},
		},
		{
			name: "proto field names are accepted too", method: "session.resume",
			newMsg: func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params: `{"session_id":"s-1","afterSeq":12}`,
			want:   &trellisv1.ResumeSessionRequest{SessionId: "s-1", AfterSeq: proto.Int64(12)},
		},
		{
			name: "json_name options", method: "provider.configure",
			newMsg: func() proto.Message { return &trellisv1.ConfigureProviderRequest{} },
			params: `{"vendor":"openai","config":{"api_key":"k","base_url":"http://x","default":true}}`,
			want: &trellisv1.ConfigureProviderRequest{Vendor: "openai", Config: &trellisv1.ProviderConfig{
				ApiKey: proto.String("k"), BaseUrl: proto.String("http://x"), IsDefault: proto.Bool(true)}},
		},
		{
			name: "free-form object", method: "backend.set",
			newMsg: func() proto.Message { return &trellisv1.SetBackendRequest{} },
			params: `{"sessionId":"s-1","kind":"ssh","config":{"host":"h","port":22,"tags":[1,null,"x"]}}`,
			want: &trellisv1.SetBackendRequest{SessionId: "s-1", Kind: "ssh", Config: mustStruct(map[string]any{
				"host": "h", "port": 22, "tags": []any{1, nil, "x"}})},
		},
		{
			name: "array params", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: `["/w"]`, wantErr: `params of session.create must be an object, got an array`,
		},
		{
			name: "string params", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: `"x"`, wantErr: `params of session.create must be an object, got a string`,
		},
		{
			name: "unknown field", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: `{"workdir":"/w","foo":1}`, wantErr: `unknown field "foo" in params of session.create`,
		},
		{
			name: "a gRPC-only field is unknown", method: "session.resume",
			newMsg: func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params: `{"sessionId":"s-1","typed":true}`, wantErr: `unknown field "typed" in params of session.resume`,
		},
		{
			name: "a misspelt field of an open message", method: "provider.configure",
			newMsg:  func() proto.Message { return &trellisv1.ConfigureProviderRequest{} },
			params:  `{"vendor":"openai","config":{"apiKey":"k"}}`,
			wantErr: `unknown field "config.apiKey" in params of provider.configure`,
		},
		{
			name: "other keys of an open message are dropped", method: "provider.configure",
			newMsg: func() proto.Message { return &trellisv1.ConfigureProviderRequest{} },
			params: `{"vendor":"openai","config":{"organization":"o","api_key":"k","headers":{"a":[1]}}}`,
			want:   &trellisv1.ConfigureProviderRequest{Vendor: "openai", Config: &trellisv1.ProviderConfig{ApiKey: proto.String("k")}},
		},
		{
			name: "an open message's fields are still checked", method: "provider.configure",
			newMsg:  func() proto.Message { return &trellisv1.ConfigureProviderRequest{} },
			params:  `{"vendor":"openai","config":{"organization":"o","default":"yes"}}`,
			wantErr: `field "config.default" in params of provider.configure must be a boolean, got a string`,
		},
		{
			name: "the messages around an open one stay strict", method: "provider.configure",
			newMsg:  func() proto.Message { return &trellisv1.ConfigureProviderRequest{} },
			params:  `{"vendor":"openai","config":{},"organization":"o"}`,
			wantErr: `unknown field "organization" in params of provider.configure`,
		},
		{
			name: "wrong type", method: "session.create",
			newMsg: func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params: `{"workdir":5}`, wantErr: `field "workdir" in params of session.create must be a string, got the number 5`,
		},
		{
			name: "wrong type in a list element", method: "session.prompt",
			newMsg:  func() proto.Message { return &trellisv1.PromptRequest{} },
			params:  `{"sessionId":"s-1","text":"hi","attachments":[{"kind":"file"},{"kind":"text","name":{}}]}`,
			wantErr: `field "attachments[1].name" in params of session.prompt must be a string, got an object`,
		},
		{
			name: "null list element", method: "session.prompt",
			newMsg:  func() proto.Message { return &trellisv1.PromptRequest{} },
			params:  `{"attachments":[null]}`,
			wantErr: `field "attachments[0]" in params of session.prompt must be an object, got null`,
		},
		{
			name: "list expected", method: "session.prompt",
			newMsg:  func() proto.Message { return &trellisv1.PromptRequest{} },
			params:  `{"attachments":{"kind":"file"}}`,
			wantErr: `field "attachments" in params of session.prompt must be an array, got an object`,
		},
		{
			name: "boolean expected", method: "session.list",
			newMsg:  func() proto.Message { return &trellisv1.ListSessionsRequest{} },
			params:  `{"includeClosed":"yes"}`,
			wantErr: `field "includeClosed" in params of session.list must be a boolean, got a string`,
		},
		{
			name: "integer expected", method: "session.resume",
			newMsg:  func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params:  `{"sessionId":"s-1","afterSeq":1.5}`,
			wantErr: `field "afterSeq" in params of session.resume must be an integer, got 1.5`,
		},
		{
			name: "integer out of range", method: "session.resume",
			newMsg:  func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params:  `{"afterSeq":99999999999999999999}`,
			wantErr: `field "afterSeq" in params of session.resume must be an integer between -9223372036854775808 and 9223372036854775807, got 99999999999999999999`,
		},
		{
			name: "integer written with an exponent", method: "session.resume",
			newMsg: func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params: `{"afterSeq":1e2}`, want: &trellisv1.ResumeSessionRequest{AfterSeq: proto.Int64(100)},
		},
		{
			name: "object expected", method: "backend.set",
			newMsg:  func() proto.Message { return &trellisv1.SetBackendRequest{} },
			params:  `{"config":[1]}`,
			wantErr: `field "config" in params of backend.set must be an object, got an array`,
		},
		{
			name: "duplicate field under both names", method: "session.resume",
			newMsg:  func() proto.Message { return &trellisv1.ResumeSessionRequest{} },
			params:  `{"sessionId":"a","session_id":"b"}`,
			wantErr: `duplicate field "session_id" in params of session.resume`,
		},
		{
			name: "oneof members are exclusive", method: "gateway.bind",
			newMsg:  func() proto.Message { return &trellisv1.BindRequest{} },
			params:  `{"platform":"slack","target":{"agent":"a","session":"s-1"}}`,
			wantErr: `fields "target.agent" and "target.session" in params of gateway.bind are mutually exclusive`,
		},
		{
			name: "value outside its one_of set", method: "session.create",
			newMsg:  func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params:  `{"workdir":"/w","mode":"fast"}`,
			wantErr: `field "mode" in params of session.create must be one of "plan", "accept", "auto", got "fast"`,
		},
		{
			name: "one_of checked in list elements", method: "session.prompt",
			newMsg:  func() proto.Message { return &trellisv1.PromptRequest{} },
			params:  `{"attachments":[{"kind":"video"}]}`,
			wantErr: `field "attachments[0].kind" in params of session.prompt must be one of "file", "image", "text", got "video"`,
		},
		{
			name: "invalid UTF-8 falls back to the decoder's message", method: "session.create",
			newMsg:  func() proto.Message { return &trellisv1.CreateSessionRequest{} },
			params:  "{\"workdir\":\"\xff\"}",
			wantErr: `invalid params of session.create: syntax error (line 1:12): invalid UTF-8 in string`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.newMsg()
			err := strict.Decode(tc.method, json.RawMessage(tc.params), msg)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("no error; decoded %v", msg)
				}
				if err.Code != -32602 || err.StringCode() != "invalid_params" {
					t.Fatalf("code = %d/%s", err.Code, err.StringCode())
				}
				if err.Message != tc.wantErr {
					t.Fatalf("message\n got  %s\n want %s", err.Message, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if !proto.Equal(msg, tc.want) {
				t.Fatalf("decoded %v, want %v", msg, tc.want)
			}
		})
	}
}

// TestDecodeResult: a client's answer to a server → client request is
// tolerant of fields it adds (snowpea 1.7 answers approval.request with
// "remember"), and strict about the fields the result has.
func TestDecodeResult(t *testing.T) {
	cases := []struct {
		name, result string
		want         *trellisv1.ApprovalReply // on success
		wantErr      string                   // a part of the message on failure
	}{
		{name: "plain", result: `{"decision":"allow","scope":"session"}`,
			want: &trellisv1.ApprovalReply{Decision: "allow", Scope: proto.String("session")}},
		{name: "an unknown field is left out", result: `{"decision":"allow","scope":"once","remember":true}`,
			want: &trellisv1.ApprovalReply{Decision: "allow", Scope: proto.String("once")}},
		{name: "unknown nested values are skipped whole", result: `{"extra":{"a":[1,{"b":2}]},"decision":"deny"}`,
			want: &trellisv1.ApprovalReply{Decision: "deny"}},
		{name: "a value outside the set", result: `{"decision":"maybe"}`,
			wantErr: `field "decision" in result of approval.request must be one of "allow", "deny"`},
		{name: "a wrong type beside an unknown field", result: `{"remember":true,"decision":1}`,
			wantErr: `field "decision" in result of approval.request`},
		{name: "not an object", result: `["allow"]`,
			wantErr: `result of approval.request must be an object, got an array`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reply trellisv1.ApprovalReply
			err := strict.DecodeResult("approval.request", json.RawMessage(tc.result), &reply)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Message, tc.wantErr) {
					t.Fatalf("DecodeResult(%s) = %v, want an error containing %q", tc.result, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeResult(%s): %v", tc.result, err)
			}
			if !proto.Equal(&reply, tc.want) {
				t.Fatalf("DecodeResult(%s) = %v, want %v", tc.result, &reply, tc.want)
			}
		})
	}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// fuzzTargets are params messages of different shapes: optional scalars,
// lists of messages, free-form Struct, oneofs, json_name options, int64s.
var fuzzTargets = []struct {
	method string
	newMsg func() proto.Message
}{
	{"session.create", func() proto.Message { return &trellisv1.CreateSessionRequest{} }},
	{"session.prompt", func() proto.Message { return &trellisv1.PromptRequest{} }},
	{"session.resume", func() proto.Message { return &trellisv1.ResumeSessionRequest{} }},
	{"backend.set", func() proto.Message { return &trellisv1.SetBackendRequest{} }},
	{"gateway.bind", func() proto.Message { return &trellisv1.BindRequest{} }},
	{"provider.configure", func() proto.Message { return &trellisv1.ConfigureProviderRequest{} }},
	{"system.hello", func() proto.Message { return &trellisv1.HelloRequest{} }},
}

// FuzzDecode: decoding never panics, every failure is invalid_params
// with a message naming the method, and what decodes re-encodes to JSON that
// decodes to the same message.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		``, `null`, `{}`, `[]`, `"x"`, `1`, `{"workdir":"/w"}`, `{"workdir":5}`, `{"foo":1}`,
		`{"sessionId":"s","attachments":[{"kind":"file","name":"a"}]}`, `{"attachments":[null]}`,
		`{"afterSeq":1e2}`, `{"afterSeq":"12"}`, `{"afterSeq":1.5}`, `{"afterSeq":99999999999999999999}`,
		`{"config":{"a":[1,{"b":null}],"n":1e400}}`, `{"target":{"agent":"a","session":"s"}}`,
		`{"target":{"newSession":{"workdir":"/w","mode":"plan"}}}`, `{"config":{"api_key":"k","default":true}}`,
		`{"workdir":"\ud800"}`, "{\"workdir\":\"\xff\"}", `{"sessionId":"a","session_id":"b"}`,
		`{"mode":"fast"}`, `{"keepAlive":null,"clientId":"c"}`, `{"config":{"tags":[[[[[]]]]]}}`,
	}
	for i, s := range seeds {
		f.Add(s, uint8(i))
	}
	f.Fuzz(func(t *testing.T, params string, which uint8) {
		target := fuzzTargets[int(which)%len(fuzzTargets)]
		msg := target.newMsg()
		err := strict.Decode(target.method, json.RawMessage(params), msg)
		if err != nil {
			if err.Code != -32602 || err.StringCode() != "invalid_params" {
				t.Fatalf("error %d/%s for %q", err.Code, err.StringCode(), params)
			}
			if !strings.Contains(err.Message, "params of "+target.method) {
				t.Fatalf("message %q does not name the method", err.Message)
			}
			return
		}
		again := target.newMsg()
		if err := codec.Unmarshal(codec.Marshal(msg), again); err != nil {
			t.Fatalf("re-decoding %s: %v", codec.Marshal(msg), err)
		}
		if !proto.Equal(msg, again) {
			t.Fatalf("round trip changed the message:\n %v\n %v", msg, again)
		}
	})
}
