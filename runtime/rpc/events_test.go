package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store"
)

// fill sets every field of m to a value other than its default, nested
// messages, lists and maps included (to depth 3), so that every field shows
// up in every JSON form.
func fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue
		}
		if fd.Message() != nil && (depth <= 0 || fd.Message().ParentFile().Package() == "google.protobuf") {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := 0; j < 2; j++ {
				if fd.Message() != nil {
					e := l.NewElement()
					fill(e.Message(), depth-1)
					l.Append(e)
				} else {
					l.Append(scalar(fd, j))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := protoreflect.ValueOfString("k<&>").MapKey()
			if fd.MapValue().Message() != nil {
				v := mp.NewValue()
				fill(v.Message(), depth-1)
				mp.Set(k, v)
			} else {
				mp.Set(k, scalar(fd.MapValue(), 1))
			}
		case fd.Message() != nil:
			fill(m.Mutable(fd).Message(), depth-1)
		default:
			m.Set(fd, scalar(fd, 0))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, j int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s <é> \"q\" & \u2028 %d", fd.Name(), j))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 1, 2, byte(j)})
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-7 - j))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(7 + j))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(1)<<53 + int64(j))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(1)<<53 + uint64(j))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.25 + float64(j))
	}
	panic(fd.Kind().String())
}

// For every event kind the protocol defines, the payload the event log
// stores (CanonicalPayload of whatever JSON a producer wrote) is exactly
// the codec's rendering of the typed payload, and reading it back through
// the typed path renders the same bytes: serving the stored bytes as they
// are is the same as the proto round trip. Producers' JSON varies (omitted
// defaults, 64-bit numbers as strings, snake_case names, HTML escaping); the
// stored form does not.
func TestStoredPayloadIsTheCodecRendering(t *testing.T) {
	if len(eventkind.All) == 0 {
		t.Fatal("no event kinds found")
	}
	for _, kind := range eventkind.All {
		fd := codec.PayloadMember(kind)
		if fd == nil {
			t.Fatalf("no payload member for %s", kind)
		}
		t.Run(kind, func(t *testing.T) {
			for _, variant := range []struct {
				name string
				fill bool
				opts protojson.MarshalOptions
			}{
				{"empty", false, protojson.MarshalOptions{}},
				{"full", true, protojson.MarshalOptions{}},
				{"full snake_case", true, protojson.MarshalOptions{UseProtoNames: true}},
				{"full with defaults", true, protojson.MarshalOptions{EmitUnpopulated: true}},
			} {
				msg := newPayload(fd)
				if variant.fill {
					fill(msg.ProtoReflect(), 3)
				}
				produced, err := variant.opts.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				stored, err := CanonicalPayload(kind, produced)
				if err != nil {
					t.Fatalf("%s: %v", variant.name, err)
				}
				if want := codec.Marshal(msg); !bytes.Equal(stored, want) {
					t.Errorf("%s: stored\n%s\nwant the codec rendering\n%s", variant.name, stored, want)
				}
				again, err := CanonicalPayload(kind, stored)
				if err != nil || !bytes.Equal(again, stored) {
					t.Errorf("%s: not stable: %s (%v)", variant.name, again, err)
				}
				ev, err := EventToProto(store.Event{SessionID: "s-1", Seq: 1, Kind: kind, Payload: stored, TS: time.Now()})
				if err != nil {
					t.Fatal(err)
				}
				typed := ev.ProtoReflect().Get(fd).Message().Interface()
				if got := codec.Marshal(typed); !bytes.Equal(got, stored) {
					t.Errorf("%s: typed path renders\n%s\nstored bytes are\n%s", variant.name, got, stored)
				}
			}
		})
	}
}

func newPayload(fd protoreflect.FieldDescriptor) proto.Message {
	return (&trellisv1.SessionEvent{}).ProtoReflect().NewField(fd).Message().Interface()
}

// An event the protocol does not define is refused when it is appended: an
// unknown kind, a field its payload message lacks, a value of the wrong
// type. The read path stays lenient (a newer daemon's stored events), so
// the check that catches a producer's mistake is this one.
func TestCanonicalPayloadRefusesWhatEventsProtoDoesNotDeclare(t *testing.T) {
	for _, c := range []struct {
		kind, payload, want string
	}{
		{"turn.finished", `{"turnId":"t-1"}`, `"turn.finished" is not declared`},
		{"turn.done", `{"turnId":"t-1","reason":"complete","bogus":1}`, `bogus`},
		{"usage", `{"inputTokens":"many"}`, `inputTokens`},
	} {
		_, err := CanonicalPayload(c.kind, json.RawMessage(c.payload))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CanonicalPayload(%s, %s) = %v, want an error naming %s", c.kind, c.payload, err, c.want)
		}
	}
	if _, err := CanonicalPayload("turn.done", json.RawMessage(`{"turnId":"t-1","reason":"complete","synthetic":false}`)); err != nil {
		t.Errorf("a declared payload: %v", err)
	}
}
