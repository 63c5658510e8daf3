package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/trellis-run/trellis/facade/methods"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/strict"
)

// methodOf maps each request message to its JSON-RPC method name, so that
// a REST decode error names the method as JSON-RPC's does ("params of
// session.compact"). Every method has its own request message (the
// generator's table proves it: a duplicate panics here at start-up).
var methodOf = func() map[protoreflect.FullName]string {
	out := map[protoreflect.FullName]string{}
	for _, name := range methods.Names() {
		full := methods.Lookup(name).NewParams().ProtoReflect().Descriptor().FullName()
		if prev, dup := out[full]; dup {
			panic(fmt.Sprintf("gateway: %s is the params of both %s and %s", full, prev, name))
		}
		out[full] = name
	}
	return out
}()

func methodName(m proto.Message) string {
	if name, ok := methodOf[m.ProtoReflect().Descriptor().FullName()]; ok {
		return name
	}
	return string(m.ProtoReflect().Descriptor().FullName())
}

// Marshaler is the REST gateway's runtime.Marshaler: the facade's codec, so
// that a REST body is byte for byte the JSON-RPC result of the same call
// (every field present, 64-bit integers as numbers, session events as
// {sessionId, seq, kind, payload, ts}) and a request body is decoded with
// JSON-RPC's strict rules and messages.
type Marshaler struct{}

var _ runtime.Marshaler = Marshaler{}

// Marshal renders a proto message with codec.Marshal and anything else with
// encoding/json.
func (Marshaler) Marshal(v any) ([]byte, error) {
	if m, ok := v.(proto.Message); ok {
		return codec.Marshal(m), nil
	}
	return json.Marshal(v)
}

// Unmarshal decodes data into v (a proto message) as JSON-RPC decodes
// params.
func (Marshaler) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return json.Unmarshal(data, v)
	}
	return decodeError(strict.Decode(methodName(m), data, m))
}

// decodeError turns a codec error into an error whose text is the codec's
// message alone: grpc-gateway wraps it as an InvalidArgument status, which
// the facade's error mapper renders as invalid_params with that message —
// the JSON-RPC error of the same params.
func decodeError(e *errcode.Error) error {
	if e == nil {
		return nil
	}
	return errors.New(e.Message)
}

// NewDecoder reads the whole body (LimitBody caps it) and decodes it with
// Unmarshal. An empty body is {}.
func (m Marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			// Over the cap: the error handler answers 413 payload_too_large.
			return err
		}
		return m.Unmarshal(data, v)
	})
}

// NewEncoder writes Marshal(v) to w.
func (m Marshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

// ContentType is application/json.
func (Marshaler) ContentType(any) string { return "application/json" }

// queryParser decodes a GET route's query string as JSON-RPC decodes
// params: the query becomes the params object (a.b=1 is {"a":{"b":1}}, a
// repeated key is an array) and goes through params.Decode, so an
// unknown or ill-typed parameter has the same invalid_params message over
// REST as over JSON-RPC.
type queryParser struct{}

func (queryParser) Parse(msg proto.Message, values url.Values, _ *utilities.DoubleArray) error {
	method := methodName(msg)
	obj := map[string]any{}
	for key, vals := range values {
		if err := setQueryValue(obj, msg.ProtoReflect().Descriptor(), strings.Split(key, "."), key, vals, method); err != nil {
			return decodeError(err)
		}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return decodeError(strict.Decode(method, raw, msg))
}

// setQueryValue puts vals at path in obj, typed by the field they name: a
// number or boolean field takes the value as a JSON literal when it is one
// (else the string, which the codec then refuses naming the field); an
// unknown name is kept as given, for the codec to report.
func setQueryValue(obj map[string]any, md protoreflect.MessageDescriptor, path []string, key string, vals []string, method string) *errcode.Error {
	var fd protoreflect.FieldDescriptor
	if md != nil {
		fields := md.Fields()
		if fd = fields.ByJSONName(path[0]); fd == nil {
			fd = fields.ByTextName(path[0])
		}
	}
	if len(path) > 1 {
		var sub protoreflect.MessageDescriptor
		if fd != nil && !fd.IsList() && !fd.IsMap() {
			sub = fd.Message()
		}
		child, ok := obj[path[0]].(map[string]any)
		if !ok {
			child = map[string]any{}
			obj[path[0]] = child
		}
		return setQueryValue(child, sub, path[1:], key, vals, method)
	}
	if fd != nil && fd.IsList() {
		arr := make([]any, len(vals))
		for i, v := range vals {
			arr[i] = queryScalar(fd, v)
		}
		obj[path[0]] = arr
		return nil
	}
	if len(vals) != 1 {
		return errcode.NewInvalidParams(fmt.Sprintf("query parameter %q of %s takes one value, got %d", key, method, len(vals)))
	}
	obj[path[0]] = queryScalar(fd, vals[0])
	return nil
}

func queryScalar(fd protoreflect.FieldDescriptor, v string) any {
	if fd == nil {
		return v
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		switch v {
		case "true":
			return true
		case "false":
			return false
		}
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.EnumKind,
		protoreflect.MessageKind, protoreflect.GroupKind:
	default: // numbers
		if json.Valid([]byte(v)) && v != "" && (v[0] == '-' || '0' <= v[0] && v[0] <= '9') {
			return json.Number(v)
		}
	}
	return v
}
