package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// Marshal renders m as the protocol's JSON (PROTOCOL.md §2 "Results always
// carry every field"):
//   - every field is present, in declaration order, under its JSON name
//     (fd.JSONName(), so json_name options such as "api_key" apply);
//   - scalars without presence carry their value, defaults included;
//     proto3 optional scalars and message fields that are unset are null;
//   - repeated fields are arrays ([] when empty), maps are objects;
//   - 64-bit integers are JSON numbers, not strings;
//   - NaN and ±Infinity, which JSON cannot carry as numbers, are null;
//   - enums are their value names; bytes are standard base64;
//   - of a oneof, only the member that is set appears;
//   - google.protobuf.Struct, Value and ListValue are plain JSON (keys
//     sorted); the wrapper types are their plain value; other well-known
//     types use their protojson form;
//   - trellis.v1.SessionEvent is {sessionId, seq, kind, payload, ts}, see
//     the package's event rendering; a trellis.v1.EventPage is the array of
//     its objects, as they are;
//   - fields marked (trellis.v1.grpc_only) are left out.
//
// A nil message renders as its empty value, every field present.
func Marshal(m proto.Message) []byte {
	return AppendMessage(nil, m)
}

// AppendMessage appends Marshal(m) to b.
func AppendMessage(b []byte, m proto.Message) []byte {
	return appendMessage(b, m.ProtoReflect())
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	md := m.Descriptor()
	if md.FullName() == sessionEventName {
		return appendEvent(b, m)
	}
	if md.ParentFile().Package() == "google.protobuf" {
		return appendWellKnown(b, m)
	}
	b = append(b, '{')
	fields := md.Fields()
	hidden := grpcOnly[md.FullName()]
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != fd || hidden[fd.Number()] {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, fd.JSONName())
		b = append(b, ':')
		b = appendField(b, m, fd)
	}
	return append(b, '}')
}

func appendField(b []byte, m protoreflect.Message, fd protoreflect.FieldDescriptor) []byte {
	switch {
	case fd.IsList():
		l := m.Get(fd).List()
		b = append(b, '[')
		for i := 0; i < l.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendSingular(b, fd, l.Get(i))
		}
		return append(b, ']')
	case fd.IsMap():
		return appendMap(b, fd, m.Get(fd).Map())
	case fd.Message() != nil && fd.Message().FullName() == eventPageName:
		// The page's objects are the protocol's JSON of its events.
		page, _ := m.Get(fd).Message().Interface().(*trellisv1.EventPage)
		b = append(b, '[')
		b = append(b, page.GetJson()...)
		return append(b, ']')
	case fd.HasPresence() && !m.Has(fd):
		return append(b, "null"...)
	default:
		return appendSingular(b, fd, m.Get(fd))
	}
}

const eventPageName protoreflect.FullName = "trellis.v1.EventPage"

// grpcOnly maps each message of trellis.v1 that has fields marked
// (trellis.v1.grpc_only) to their numbers: fields of the gRPC form only,
// which the protocol's JSON leaves out (Marshal) and refuses as unknown
// (protocol/params).
var grpcOnly = func() map[protoreflect.FullName]map[protoreflect.FieldNumber]bool {
	out := map[protoreflect.FullName]map[protoreflect.FieldNumber]bool{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(msgs protoreflect.MessageDescriptors) {
		for i := 0; i < msgs.Len(); i++ {
			md := msgs.Get(i)
			for j := 0; j < md.Fields().Len(); j++ {
				fd := md.Fields().Get(j)
				if only, _ := proto.GetExtension(fd.Options(), trellisv1.E_GrpcOnly).(bool); only {
					if out[md.FullName()] == nil {
						out[md.FullName()] = map[protoreflect.FieldNumber]bool{}
					}
					out[md.FullName()][fd.Number()] = true
				}
			}
			walk(md.Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("trellis.v1", func(fd protoreflect.FileDescriptor) bool {
		walk(fd.Messages())
		return true
	})
	return out
}()

// GRPCOnly returns the numbers of the (trellis.v1.grpc_only) fields of the
// message named name: nil when it has none.
func GRPCOnly(name protoreflect.FullName) map[protoreflect.FieldNumber]bool {
	return grpcOnly[name]
}

func appendMap(b []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) []byte {
	type entry struct {
		key string
		val protoreflect.Value
	}
	entries := make([]entry, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		entries = append(entries, entry{k.String(), v})
		return true
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].key < entries[j].key })
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, e.key)
		b = append(b, ':')
		b = appendSingular(b, fd.MapValue(), e.val)
	}
	return append(b, '}')
}

func appendSingular(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendFloat(b, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(b, v.Float(), 64)
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		return append(b, '"')
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return append(b, "null"...)
		}
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	default: // MessageKind, GroupKind
		return appendMessage(b, v.Message())
	}
}

// appendFloat writes f as encoding/json does (ES6 number formatting), and
// null for NaN and ±Inf, which JSON numbers cannot carry.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// Clean up e-09 to e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: no HTML escaping, invalid UTF-8
// replaced by U+FFFD, U+2028 and U+2029 escaped for JavaScript.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendWellKnown renders the google.protobuf types.
func appendWellKnown(b []byte, m protoreflect.Message) []byte {
	md := m.Descriptor()
	switch md.FullName() {
	case "google.protobuf.Struct":
		return appendMap(b, md.Fields().ByName("fields"), m.Get(md.Fields().ByName("fields")).Map())
	case "google.protobuf.ListValue":
		return appendField(b, m, md.Fields().ByName("values"))
	case "google.protobuf.Value":
		od := md.Oneofs().ByName("kind")
		fd := m.WhichOneof(od)
		if fd == nil {
			// An unset Value has no JSON form; null is the honest one.
			return append(b, "null"...)
		}
		return appendSingular(b, fd, m.Get(fd))
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue",
		"google.protobuf.Int64Value", "google.protobuf.UInt64Value",
		"google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		fd := md.Fields().ByName("value")
		return appendSingular(b, fd, m.Get(fd))
	}
	// Timestamp, Duration, FieldMask, Any, Empty: their protojson form,
	// compacted (protojson varies its whitespace on purpose).
	out, err := protojson.Marshal(m.Interface())
	if err != nil {
		return append(b, "null"...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, out); err != nil {
		return append(b, "null"...)
	}
	return append(b, buf.Bytes()...)
}
