package codec_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
)

func TestMarshal(t *testing.T) {
	cases := []struct {
		name string
		msg  proto.Message
		want string
	}{
		{
			name: "defaults present, unset optionals null",
			msg:  &trellisv1.SessionSummary{SessionId: "s-1", Seq: 9007199254740993, Provider: proto.String("fake")},
			want: `{"sessionId":"s-1","workdir":"","mode":"","provider":"fake","model":null,"createdAt":"","seq":9007199254740993,` +
				`"kind":"","parentSessionId":null,"jobId":null,"agent":null,"status":"","running":false,"title":null,` +
				`"lastPrompt":null,"lastActivityAt":null,"pendingApprovals":0,"workspace":""}`,
		},
		{
			name: "nil message renders its empty value",
			msg:  (*trellisv1.CreateSessionResponse)(nil),
			want: `{"sessionId":""}`,
		},
		{
			name: "unset message field is null, empty repeated is []",
			msg:  &trellisv1.HelloResponse{ProtocolVersion: "1.0.0"},
			want: `{"protocolVersion":"1.0.0","serverVersion":"","capabilities":[],"limits":null,"connectionId":"","principal":null}`,
		},
		{
			name: "int64 as numbers",
			msg: &trellisv1.HelloResponse{Capabilities: []string{"sessions", "tools"},
				Limits: &trellisv1.Limits{MaxFrameBytes: 33554432, MaxInFlight: 1024, MaxBatch: 100}},
			want: `{"protocolVersion":"","serverVersion":"","capabilities":["sessions","tools"],` +
				`"limits":{"maxFrameBytes":33554432,"maxInFlight":1024,"maxBatch":100,"maxConnections":0,"maxWatchedSessions":0,"helloTimeoutMs":0,"maxUnauthenticated":0,"keyRatePerSecond":0,"keyMaxRunningSessions":0,"operationWindowMs":0},"connectionId":"","principal":null}`,
		},
		{
			name: "json_name options",
			msg:  &trellisv1.ProviderConfig{ApiKey: proto.String("k"), IsDefault: proto.Bool(false)},
			want: `{"api_key":"k","base_url":null,"model":null,"models":[],"default":false,"context_window":null,"token":null,"access_token":null,"prices":{},"clear_prices":null}`,
		},
		{
			name: "json_name on a plain field",
			msg:  &trellisv1.Provider{Vendor: "openai", IsDefault: true},
			want: `{"vendor":"openai","label":"","defaultModel":"","models":[],"configured":false,"default":true,"baseUrl":"","authMethods":[]}`,
		},
		{
			name: "Struct is plain JSON with sorted keys",
			msg: &trellisv1.ToolCallEvent{CallId: "c1", Name: "shell", Args: mustStruct(map[string]any{
				"cmd": "ls <dir> & echo", "n": 1.5, "big": 1e21, "list": []any{true, nil, map[string]any{}}})},
			want: `{"callId":"c1","name":"shell","args":{"big":1e+21,"cmd":"ls <dir> & echo","list":[true,null,{}],"n":1.5}}`,
		},
		{
			name: "unset Struct is null",
			msg:  &trellisv1.ToolCallEvent{},
			want: `{"callId":"","name":"","args":null}`,
		},
		{
			name: "Value without a kind and non-finite numbers are null",
			msg: &trellisv1.ToolCallEvent{Args: &structpb.Struct{Fields: map[string]*structpb.Value{
				"a": {}, "b": structpb.NewNumberValue(math.NaN()), "c": structpb.NewNumberValue(math.Inf(1))}}},
			want: `{"callId":"","name":"","args":{"a":null,"b":null,"c":null}}`,
		},
		{
			name: "optional double",
			msg:  &trellisv1.ContextEvent{Used: 1200, Window: proto.Int64(200000), Percent: proto.Float64(0.6)},
			want: `{"used":1200,"window":200000,"percent":0.6}`,
		},
		{
			name: "optional unset",
			msg:  &trellisv1.ContextEvent{Used: 1},
			want: `{"used":1,"window":null,"percent":null}`,
		},
		{
			name: "optional NaN is null",
			msg:  &trellisv1.ContextEvent{Percent: proto.Float64(math.NaN())},
			want: `{"used":0,"window":null,"percent":null}`,
		},
		{
			name: "oneof: only the set member",
			msg:  &trellisv1.BindingTarget{Target: &trellisv1.BindingTarget_Agent{Agent: "helper"}},
			want: `{"agent":"helper"}`,
		},
		{
			name: "oneof: message member",
			msg: &trellisv1.BindingTarget{Target: &trellisv1.BindingTarget_NewSession{
				NewSession: &trellisv1.NewSessionTarget{Workdir: "/w"}}},
			want: `{"newSession":{"workdir":"/w","mode":""}}`,
		},
		{
			name: "oneof: none set",
			msg:  &trellisv1.BindingTarget{},
			want: `{}`,
		},
		{
			name: "string escaping",
			msg:  &trellisv1.MessageDeltaEvent{Text: "a\"b\\c\n\t\x01<>&\u2028é\xff"},
			want: `{"text":"a\"b\\c\n\t\u0001<>&\u2028é\ufffd"}`,
		},
		{
			name: "enum as its name",
			msg:  &trellisv1.ErrorCodeInfo{Code: "x", Numeric: -32000},
			want: `{"code":"x","numeric":-32000,"grpc":"","grpcFallback":[]}`,
		},
		{
			name: "well-known types",
			msg:  &structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("x"), structpb.NewNumberValue(0.000001)}},
			want: `["x",0.000001]`,
		},
		{
			name: "wrapper is its value",
			msg:  wrapperspb.Int64(1 << 60),
			want: `1152921504606846976`,
		},
		{
			name: "timestamp uses protojson's form",
			msg:  timestamppb.New(mustTime("2026-01-02T03:04:05.678Z")),
			want: `"2026-01-02T03:04:05.678Z"`,
		},
		{
			name: "session event",
			msg: &trellisv1.SessionEvent{SessionId: "s-1", Seq: 7, Kind: "ignored", Ts: "2026-01-02T03:04:05.678Z",
				Payload: &trellisv1.SessionEvent_ToolResult{ToolResult: &trellisv1.ToolResultEvent{CallId: "c1", Name: "shell", Ok: true, Output: "ok"}}},
			want: `{"sessionId":"s-1","seq":7,"kind":"tool.result","payload":{"callId":"c1","name":"shell","ok":true,"output":"ok","error":null},"ts":"2026-01-02T03:04:05.678Z"}`,
		},
		{
			name: "session event without payload keeps its kind",
			msg:  &trellisv1.SessionEvent{SessionId: "s-1", Seq: 8, Kind: "future.kind"},
			want: `{"sessionId":"s-1","seq":8,"kind":"future.kind","payload":null,"ts":""}`,
		},
		{
			name: "an event page is the array of its objects; gRPC-only fields are left out",
			msg: &trellisv1.ResumeSessionResponse{SessionId: "s-1", Mode: "accept",
				Events:      &trellisv1.EventPage{Json: []byte(`{"seq":1},{"seq":2}`), Ends: []uint32{9, 19}, Seqs: []int64{1, 2}},
				TypedEvents: []*trellisv1.SessionEvent{{SessionId: "s-1", Seq: 1}}},
			want: `{"sessionId":"s-1","mode":"accept","provider":"","model":"","events":[{"seq":1},{"seq":2}],"more":false}`,
		},
		{
			name: "no event page is an empty array",
			msg:  &trellisv1.ResumeSessionResponse{SessionId: "s-1", More: true},
			want: `{"sessionId":"s-1","mode":"","provider":"","model":"","events":[],"more":true}`,
		},
		{
			name: "a session event inside a message",
			msg: &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Event{Event: &trellisv1.SessionEvent{
				SessionId: "s-1", Seq: 1, Payload: &trellisv1.SessionEvent_TurnStarted{TurnStarted: &trellisv1.TurnStartedEvent{TurnId: "t-1", Prompt: "hi"}}}}},
			want: `{"event":{"sessionId":"s-1","seq":1,"kind":"turn.started","payload":{"turnId":"t-1","prompt":"hi","queued":false},"ts":""}}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := codec.Marshal(tc.msg)
			if string(got) != tc.want {
				t.Fatalf("\n got  %s\n want %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON: %s", got)
			}
		})
	}
}

// TestEveryEventKind renders an event for each member of the payload oneof:
// kind is the member's (trellis.v1.event_kind), payload carries every field of
// the member, and DecodeEvent gives the same event back.
func TestEveryEventKind(t *testing.T) {
	md := (&trellisv1.SessionEvent{}).ProtoReflect().Descriptor()
	members := md.Oneofs().ByName("payload").Fields()
	seen := map[string]bool{}
	for i := 0; i < members.Len(); i++ {
		fd := members.Get(i)
		kind := proto.GetExtension(fd.Options(), trellisv1.E_EventKind).(string)
		t.Run(kind, func(t *testing.T) {
			if seen[kind] {
				t.Fatalf("kind %q declared twice", kind)
			}
			seen[kind] = true
			ev := &trellisv1.SessionEvent{SessionId: "s-1", Seq: int64(i + 1), Ts: "2026-01-02T03:04:05.678Z"}
			m := ev.ProtoReflect()
			payload := m.NewField(fd).Message()
			fillScalars(payload)
			m.Set(fd, protoreflect.ValueOfMessage(payload))

			var wire struct {
				SessionID string                     `json:"sessionId"`
				Seq       int64                      `json:"seq"`
				Kind      string                     `json:"kind"`
				Payload   map[string]json.RawMessage `json:"payload"`
				Ts        string                     `json:"ts"`
			}
			b := codec.Marshal(ev)
			if err := json.Unmarshal(b, &wire); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if wire.Kind != kind || wire.Seq != int64(i+1) || wire.SessionID != "s-1" || wire.Ts != ev.Ts {
				t.Fatalf("header wrong: %s", b)
			}
			if got, want := len(wire.Payload), payload.Descriptor().Fields().Len(); got != want {
				t.Fatalf("payload has %d fields, its message %d: %s", got, want, b)
			}
			back, err := codec.DecodeEvent(b)
			if err != nil {
				t.Fatal(err)
			}
			ev.Kind = kind // the wire carries the kind; the proto kind field gets it back
			if !proto.Equal(back, ev) {
				t.Fatalf("round trip:\n got  %v\n want %v", back, ev)
			}
			if codec.EventKind(back) != kind {
				t.Fatalf("EventKind = %q", codec.EventKind(back))
			}
		})
	}
}

// fillScalars sets every scalar field of m to a non-default value, and
// Struct fields to a small object.
func fillScalars(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var v protoreflect.Value
		switch fd.Kind() {
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString("v-" + string(fd.Name()))
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.Int32Kind:
			v = protoreflect.ValueOfInt32(int32(fd.Number()) + 40)
		case protoreflect.Int64Kind:
			v = protoreflect.ValueOfInt64(int64(fd.Number()) + 1<<40)
		case protoreflect.DoubleKind:
			v = protoreflect.ValueOfFloat64(0.25)
		case protoreflect.MessageKind:
			if fd.Message().FullName() == "google.protobuf.Struct" {
				s, _ := structpb.NewStruct(map[string]any{"k": "v", "n": 2.0})
				v = protoreflect.ValueOfMessage(s.ProtoReflect())
			} else if fd.IsList() {
				l := m.Mutable(fd).List()
				e := l.NewElement()
				fillScalars(e.Message())
				l.Append(e)
				continue
			} else {
				sub := m.NewField(fd).Message()
				fillScalars(sub)
				v = protoreflect.ValueOfMessage(sub)
			}
		default:
			continue
		}
		if fd.IsList() {
			m.Mutable(fd).List().Append(v)
			continue
		}
		m.Set(fd, v)
	}
}

func TestDecodeEventUnknownKindAndFields(t *testing.T) {
	ev, err := codec.DecodeEvent([]byte(`{"sessionId":"s-1","seq":3,"kind":"hologram.shown","payload":{"x":1},"ts":"t","extra":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetKind() != "hologram.shown" || ev.GetPayload() != nil || ev.GetSeq() != 3 {
		t.Fatalf("got %v", ev)
	}
	ev, err = codec.DecodeEvent([]byte(`{"sessionId":"s-1","seq":4,"kind":"message.delta","payload":{"text":"hi","newField":1},"ts":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetMessageDelta().GetText() != "hi" {
		t.Fatalf("got %v", ev)
	}
	for _, bad := range []string{`{"seq":"x"}`, `{} {}`, `[`} {
		if _, err := codec.DecodeEvent([]byte(bad)); err == nil {
			t.Fatalf("DecodeEvent(%s) succeeded", bad)
		}
	}
}

func TestUnmarshalResult(t *testing.T) {
	for _, ev := range []*trellisv1.SessionEvent{
		{SessionId: "s-1", Seq: 1, Kind: "message.done", Payload: &trellisv1.SessionEvent_MessageDone{MessageDone: &trellisv1.MessageDoneEvent{Text: "x", Role: "assistant"}}},
		{SessionId: "s-1", Seq: 2, Kind: "context", Payload: &trellisv1.SessionEvent_Context{Context: &trellisv1.ContextEvent{Used: 5, Window: proto.Int64(10)}}},
	} {
		in := &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Event{Event: ev}}
		var out trellisv1.SubscribeResponse
		if err := codec.Unmarshal(codec.Marshal(in), &out); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(in, &out) {
			t.Fatalf("got %v", &out)
		}
	}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}
