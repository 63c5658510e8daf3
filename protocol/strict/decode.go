package strict

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// maxDepth bounds the nesting the error walker follows, as protojson's
// recursion limit bounds the decoder.
const maxDepth = 10000

// Decode decodes the params of a client → server call of method into
// msg, which must be empty. Absent or null params mean {}. Every failure is an
// invalid_params error whose message names the offending field, e.g.
// `unknown field "foo" in params of session.create`.
func Decode(method string, raw json.RawMessage, msg proto.Message) *errcode.Error {
	return decode("params of "+method, raw, msg, false)
}

// DecodeResult decodes a client's result of a server → client request (such
// as approval.request) into msg, with the rules of Decode but one: a field
// msg does not have (or has for gRPC only) is left out, not refused. A
// client's answer is tolerant of what it adds — snowpea clients answer
// approval.request with {"decision","scope","remember"} — so that an extra
// field never turns an allow into a deny; a field it has must still be right.
func DecodeResult(method string, raw json.RawMessage, msg proto.Message) *errcode.Error {
	return decode("result of "+method, raw, msg, true)
}

// decode decodes raw into msg; tolerant leaves out the fields msg does not
// declare for the protocol's JSON.
func decode(where string, raw json.RawMessage, msg proto.Message, tolerant bool) *errcode.Error {
	raw = bytes.Trim(raw, " \t\r\n") // JSON's whitespace, not Unicode's
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] != '{' {
		return errcode.NewInvalidParams(fmt.Sprintf("%s must be an object, got %s", where, DescribeJSON(raw)))
	}
	md := msg.ProtoReflect().Descriptor()
	open := !tolerant && holdsOpen(md)
	if !tolerant && (codec.GRPCOnly(md.FullName()) != nil || open) {
		// protojson knows the gRPC-only fields, and would take the keys of
		// an (open) message only by taking every unknown key: the walk
		// refuses those first.
		if e := explain(where, raw, md, false); e != nil {
			return e
		}
	}
	err := protojson.UnmarshalOptions{DiscardUnknown: tolerant || open}.Unmarshal(raw, msg)
	if err == nil {
		if tolerant {
			for num := range codec.GRPCOnly(md.FullName()) {
				msg.ProtoReflect().Clear(md.Fields().ByNumber(num))
			}
		}
		return checkOneOf(where, msg.ProtoReflect(), "")
	}
	proto.Reset(msg)
	// protojson's messages carry no field path and no expected type: walk the
	// JSON again along the descriptor to say precisely what is wrong.
	if e := explain(where, raw, md, tolerant); e != nil {
		return e
	}
	return errcode.NewInvalidParams(fmt.Sprintf("invalid %s: %s", where, cleanProtoError(err)))
}

// isOpen reports whether md is marked (trellis.v1.open): keys it does not
// declare are dropped, not refused.
func isOpen(md protoreflect.MessageDescriptor) bool {
	open, _ := proto.GetExtension(md.Options(), trellisv1.E_Open).(bool)
	return open
}

// nearMiss returns the field of fields that name misspells by case,
// '_' or '-' (apiKey for api_key), or nil: an (open) message still refuses
// such a key, which is a mistake rather than a setting of another client.
func nearMiss(fields protoreflect.FieldDescriptors, name string) protoreflect.FieldDescriptor {
	fold := func(s string) string { return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s)) }
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); fold(fd.JSONName()) == fold(name) || fold(string(fd.Name())) == fold(name) {
			return fd
		}
	}
	return nil
}

// opens caches holdsOpen by message.
var opens sync.Map // protoreflect.FullName → bool

// holdsOpen reports whether md or a message under it is (open).
func holdsOpen(md protoreflect.MessageDescriptor) bool {
	if v, ok := opens.Load(md.FullName()); ok {
		return v.(bool)
	}
	var walk func(protoreflect.MessageDescriptor, map[protoreflect.FullName]bool) bool
	walk = func(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
		if seen[md.FullName()] {
			return false
		}
		seen[md.FullName()] = true
		if isOpen(md) {
			return true
		}
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if sub := fd.Message(); sub != nil && walk(sub, seen) {
				return true
			}
		}
		return false
	}
	v := walk(md, map[protoreflect.FullName]bool{})
	opens.Store(md.FullName(), v)
	return v
}

// cleanProtoError drops protojson's "proto:" prefix, whose separator is
// randomly a space or a no-break space.
func cleanProtoError(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "proto:"); ok {
		msg = strings.TrimLeft(rest, " \u00a0")
	}
	return msg
}

// DescribeJSON names the type of a JSON value that is not an object, for
// the invalid_params messages that ask for one: "an array", "a string",
// "a boolean", "null" or "a number".
func DescribeJSON(raw []byte) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// explain finds the first problem in raw as the message md sees it, in
// document order, with the rules protojson applies. It returns nil when it
// finds none (then the caller falls back to protojson's own message).
func explain(where string, raw []byte, md protoreflect.MessageDescriptor, tolerant bool) *errcode.Error {
	w := &walker{dec: json.NewDecoder(bytes.NewReader(raw)), where: where, tolerant: tolerant}
	w.dec.UseNumber()
	tok, err := w.token()
	if err == nil {
		err = w.message(md, "", tok)
	}
	var e *errcode.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

type walker struct {
	dec      *json.Decoder
	where    string
	depth    int
	tolerant bool // unknown fields are skipped, not refused
}

// errSyntax stops the walk on malformed JSON; the caller then reports
// protojson's message.
var errSyntax = errors.New("syntax")

func (w *walker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, errSyntax
	}
	return tok, nil
}

func (w *walker) fail(format string, args ...any) error {
	return errcode.NewInvalidParams(fmt.Sprintf(format, args...))
}

// wrongType reports a value of the wrong JSON type at path.
func (w *walker) wrongType(path, want string, got json.Token) error {
	if path == "" {
		return w.fail("%s must be %s, got %s", w.where, want, describe(got))
	}
	return w.fail("field %q in %s must be %s, got %s", path, w.where, want, describe(got))
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "the number " + v.String()
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "something else"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (w *walker) enter() error {
	w.depth++
	if w.depth > maxDepth {
		return w.fail("%s are nested too deeply", w.where)
	}
	return nil
}

func (w *walker) message(md protoreflect.MessageDescriptor, path string, tok json.Token) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer func() { w.depth-- }()
	switch md.FullName() {
	case "google.protobuf.Value":
		return w.anyValue(path, tok)
	case "google.protobuf.Struct":
		return w.structValue(path, tok)
	case "google.protobuf.ListValue":
		return w.listValue(path, tok)
	}
	if md.ParentFile().Package() == "google.protobuf" {
		// Other well-known types have their own JSON forms; protojson's
		// message describes those.
		return w.skip(tok)
	}
	if tok != json.Delim('{') {
		return w.wrongType(path, "an object", tok)
	}
	fields := md.Fields()
	seen := map[protoreflect.FieldNumber]bool{}
	oneofs := map[int]string{}
	return w.members(func(name string) error {
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByTextName(name)
		}
		p := join(path, name)
		if fd == nil || codec.GRPCOnly(md.FullName())[fd.Number()] {
			if w.tolerant || fd == nil && isOpen(md) && nearMiss(fields, name) == nil {
				vt, err := w.token()
				if err != nil {
					return err
				}
				return w.skip(vt)
			}
			return w.fail("unknown field %q in %s", p, w.where)
		}
		if seen[fd.Number()] {
			return w.fail("duplicate field %q in %s", p, w.where)
		}
		seen[fd.Number()] = true
		vt, err := w.token()
		if err != nil {
			return err
		}
		if vt == nil && !acceptsNull(fd) {
			return nil
		}
		switch {
		case fd.IsList():
			return w.list(fd, p, vt)
		case fd.IsMap():
			return w.mapField(fd, p, vt)
		}
		if od := fd.ContainingOneof(); od != nil {
			if prev, ok := oneofs[od.Index()]; ok {
				return w.fail("fields %q and %q in %s are mutually exclusive", join(path, prev), p, w.where)
			}
			oneofs[od.Index()] = name
		}
		return w.singular(fd, p, vt)
	})
}

// members reads the keys of an object whose '{' is read, up to its '}',
// handing each to member, which reads the value.
func (w *walker) members(member func(key string) error) error {
	for {
		t, err := w.token()
		if err != nil {
			return err
		}
		if t == json.Delim('}') {
			return nil
		}
		key, _ := t.(string)
		if err := member(key); err != nil {
			return err
		}
	}
}

// acceptsNull reports whether JSON null is a value of fd rather than "unset".
func acceptsNull(fd protoreflect.FieldDescriptor) bool {
	if md := fd.Message(); md != nil && md.FullName() == "google.protobuf.Value" {
		return true
	}
	ed := fd.Enum()
	return ed != nil && ed.FullName() == "google.protobuf.NullValue"
}

// array walks the array whose first token is tok, handing each element's
// path and first token to elem.
func (w *walker) array(path string, tok json.Token, elem func(path string, tok json.Token) error) error {
	if tok != json.Delim('[') {
		return w.wrongType(path, "an array", tok)
	}
	if err := w.enter(); err != nil {
		return err
	}
	defer func() { w.depth-- }()
	for i := 0; ; i++ {
		t, err := w.token()
		if err != nil {
			return err
		}
		if t == json.Delim(']') {
			return nil
		}
		if err := elem(fmt.Sprintf("%s[%d]", path, i), t); err != nil {
			return err
		}
	}
}

// object walks the object whose first token is tok, refusing a key seen
// before or one checkKey (when not nil) refuses, and hands each key and
// its value's first token to member.
func (w *walker) object(path string, tok json.Token, checkKey func(key string) error, member func(key string, tok json.Token) error) error {
	if tok != json.Delim('{') {
		return w.wrongType(path, "an object", tok)
	}
	if err := w.enter(); err != nil {
		return err
	}
	defer func() { w.depth-- }()
	seen := map[string]bool{}
	return w.members(func(key string) error {
		if checkKey != nil {
			if err := checkKey(key); err != nil {
				return err
			}
		}
		if seen[key] {
			return w.fail("duplicate key %q of field %q in %s", key, path, w.where)
		}
		seen[key] = true
		vt, err := w.token()
		if err != nil {
			return err
		}
		return member(key, vt)
	})
}

func (w *walker) list(fd protoreflect.FieldDescriptor, path string, tok json.Token) error {
	return w.array(path, tok, func(p string, t json.Token) error { return w.singular(fd, p, t) })
}

func (w *walker) mapField(fd protoreflect.FieldDescriptor, path string, tok json.Token) error {
	checkKey := func(key string) error {
		if err := checkMapKey(fd.MapKey().Kind(), key); err != nil {
			return w.fail("key %q of field %q in %s must be %s", key, path, w.where, err.Error())
		}
		return nil
	}
	return w.object(path, tok, checkKey, func(key string, t json.Token) error {
		return w.singular(fd.MapValue(), fmt.Sprintf("%s[%q]", path, key), t)
	})
}

// checkMapKey checks a map key, always a JSON string, against the key
// kind: a string, a bool or an integer.
func checkMapKey(kind protoreflect.Kind, key string) error {
	switch kind {
	case protoreflect.StringKind:
		return nil
	case protoreflect.BoolKind:
		if key == "true" || key == "false" {
			return nil
		}
	default:
		if isValidInt(kind, key) {
			return nil
		}
	}
	return fmt.Errorf("%s", kindName(kind))
}

// singular checks one value (a field, a list element or a map value).
func (w *walker) singular(fd protoreflect.FieldDescriptor, path string, tok json.Token) error {
	kind := fd.Kind()
	switch kind {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return w.message(fd.Message(), path, tok)
	case protoreflect.BoolKind:
		if _, ok := tok.(bool); ok {
			return nil
		}
		return w.wrongType(path, "a boolean", tok)
	case protoreflect.StringKind:
		if _, ok := tok.(string); ok {
			return nil
		}
		return w.wrongType(path, "a string", tok)
	case protoreflect.BytesKind:
		if s, ok := tok.(string); ok && validBase64(s) {
			return nil
		}
		return w.wrongType(path, "a base64 string", tok)
	case protoreflect.EnumKind:
		return w.enum(fd, path, tok)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		bits := 64
		if kind == protoreflect.FloatKind {
			bits = 32
		}
		switch tok {
		case "NaN", "Infinity", "-Infinity":
			return nil
		}
		if s, ok := numberText(tok); ok {
			if _, err := strconv.ParseFloat(s, bits); err == nil {
				return nil
			}
			return w.fail("field %q in %s is out of range for a %d-bit float: %s", path, w.where, bits, s)
		}
		return w.wrongType(path, "a number", tok)
	default:
		return w.integer(kind, path, tok)
	}
}

// numberText returns the text of a number, or of a string holding one (which
// protojson also accepts for numeric fields).
func numberText(tok json.Token) (string, bool) {
	switch v := tok.(type) {
	case json.Number:
		return v.String(), true
	case string:
		if v != "" && v == strings.TrimSpace(v) && (v[0] == '-' || '0' <= v[0] && v[0] <= '9') && json.Valid([]byte(v)) {
			return v, true
		}
	}
	return "", false
}

func (w *walker) integer(kind protoreflect.Kind, path string, tok json.Token) error {
	s, ok := numberText(tok)
	if !ok {
		return w.wrongType(path, "an integer", tok)
	}
	if isValidInt(kind, s) {
		return nil
	}
	lo, hi := intRange(kind)
	outOfRange := w.fail("field %q in %s must be an integer between %s and %s, got %s", path, w.where, lo, hi, s)
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return outOfRange
	case err != nil:
		return w.wrongType(path, "an integer", tok)
	case f != math.Trunc(f):
		return w.fail("field %q in %s must be an integer, got %s", path, w.where, s)
	}
	// Integral, written with a fraction or an exponent (1e2, 3.0): protojson
	// takes it when it fits.
	if b := boundsOf(kind); float64(b.lo) <= f && f <= float64(b.hi) {
		return nil
	}
	return outOfRange
}

// intBounds is the range of an integer kind and how strconv parses it.
type intBounds struct {
	signed bool
	bits   int
	lo     int64
	hi     uint64
}

func boundsOf(kind protoreflect.Kind) intBounds {
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return intBounds{true, 32, math.MinInt32, math.MaxInt32}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return intBounds{true, 64, math.MinInt64, math.MaxInt64}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return intBounds{false, 32, 0, math.MaxUint32}
	}
	return intBounds{false, 64, 0, math.MaxUint64}
}

func isValidInt(kind protoreflect.Kind, s string) bool {
	var err error
	if b := boundsOf(kind); b.signed {
		_, err = strconv.ParseInt(s, 10, b.bits)
	} else {
		_, err = strconv.ParseUint(s, 10, b.bits)
	}
	return err == nil
}

func intRange(kind protoreflect.Kind) (string, string) {
	b := boundsOf(kind)
	return strconv.FormatInt(b.lo, 10), strconv.FormatUint(b.hi, 10)
}

func kindName(kind protoreflect.Kind) string {
	switch kind {
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind:
		return "a string"
	default:
		lo, hi := intRange(kind)
		return "an integer between " + lo + " and " + hi
	}
}

func (w *walker) enum(fd protoreflect.FieldDescriptor, path string, tok json.Token) error {
	values := fd.Enum().Values()
	switch v := tok.(type) {
	case string:
		if values.ByName(protoreflect.Name(v)) != nil {
			return nil
		}
	case json.Number:
		if isValidInt(protoreflect.Int32Kind, v.String()) {
			return nil
		}
	case nil:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return nil
		}
	}
	names := make([]string, 0, values.Len())
	for i := 0; i < values.Len(); i++ {
		names = append(names, strconv.Quote(string(values.Get(i).Name())))
	}
	return w.fail("field %q in %s must be one of %s, got %s", path, w.where, strings.Join(names, ", "), describe(tok))
}

func validBase64(s string) bool {
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	_, err := enc.DecodeString(s)
	return err == nil
}

// anyValue checks a google.protobuf.Value: any JSON whose numbers fit a double.
func (w *walker) anyValue(path string, tok json.Token) error {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return w.structValue(path, tok)
		}
		return w.listValue(path, tok)
	case json.Number:
		if _, err := strconv.ParseFloat(v.String(), 64); err != nil {
			return w.fail("field %q in %s is out of range for a number: %s", path, w.where, v)
		}
	}
	return nil
}

func (w *walker) structValue(path string, tok json.Token) error {
	return w.object(path, tok, nil, func(key string, t json.Token) error { return w.anyValue(join(path, key), t) })
}

func (w *walker) listValue(path string, tok json.Token) error {
	return w.array(path, tok, w.anyValue)
}

// skip consumes the rest of a value whose first token is tok.
func (w *walker) skip(tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || d == '}' || d == ']' {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := w.token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// checkOneOf enforces the (trellis.v1.one_of) option: a string field whose
// value is one of a fixed set. Unset and empty values are left to the
// runtime, which knows the defaults.
func checkOneOf(where string, m protoreflect.Message, path string) *errcode.Error {
	var bad *errcode.Error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := join(path, fd.JSONName())
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsMap():
			allowed, _ := proto.GetExtension(fd.Options(), trellisv1.E_OneOf).(string)
			if allowed == "" {
				return true
			}
			check := func(p, s string) bool {
				if s == "" || isOneOf(allowed, s) {
					return true
				}
				quoted := strings.Split(allowed, "|")
				for i := range quoted {
					quoted[i] = strconv.Quote(quoted[i])
				}
				bad = errcode.NewInvalidParams(fmt.Sprintf("field %q in %s must be one of %s, got %q",
					p, where, strings.Join(quoted, ", "), s))
				return false
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					if !check(fmt.Sprintf("%s[%d]", p, i), l.Get(i).String()) {
						return false
					}
				}
				return true
			}
			return check(p, v.String())
		case fd.Message() != nil && fd.Message().ParentFile().Package() != "google.protobuf":
			switch {
			case fd.IsList():
				l := v.List()
				for i := 0; i < l.Len() && bad == nil; i++ {
					bad = checkOneOf(where, l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))
				}
			case fd.IsMap():
				if fd.MapValue().Message() == nil {
					return true
				}
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					bad = checkOneOf(where, mv.Message(), fmt.Sprintf("%s[%q]", p, k.String()))
					return bad == nil
				})
			default:
				bad = checkOneOf(where, v.Message(), p)
			}
			return bad == nil
		}
		return true
	})
	return bad
}

func isOneOf(allowed, s string) bool {
	for _, a := range strings.Split(allowed, "|") {
		if a == s {
			return true
		}
	}
	return false
}
