package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// eventPayloadsPath is the Go types of the session event payloads.
const eventPayloadsPath = "protocol/events/payloads.gen.go"

// goInitialisms are the words a Go name writes in capitals (callId is CallID).
var goInitialisms = map[string]string{"Id": "ID", "Ok": "OK", "Url": "URL", "Uri": "URI", "Api": "API", "Http": "HTTP", "Json": "JSON", "Ip": "IP"}

// goFieldName is a JSON name as an exported Go name: turnId is TurnID, ok OK.
func goFieldName(jsonName string) string {
	var words []string
	start := 0
	r := []rune(jsonName)
	for i := 1; i <= len(r); i++ {
		if i == len(r) || unicode.IsUpper(r[i]) {
			words = append(words, string(r[start:i]))
			start = i
		}
	}
	var b strings.Builder
	for _, w := range words {
		w = strings.ToUpper(w[:1]) + w[1:]
		if up, ok := goInitialisms[w]; ok {
			w = up
		}
		b.WriteString(w)
	}
	return b.String()
}

// goConstWord is a (one_of) value as part of a Go name: tool_use is ToolUse.
func goConstWord(value string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(value, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// payloadViews returns the views of the event payloads, in the declaration
// order of their kinds, then the messages they reference, sorted by name;
// and the kinds each payload view is the payload of.
func payloadViews(p *protocol) ([]*view, map[*view][]string) {
	kinds := map[*view][]string{}
	var out []*view
	seen := map[*view]bool{}
	for _, k := range p.EventKinds {
		if !seen[k.Payload] {
			seen[k.Payload] = true
			out = append(out, k.Payload)
		}
		kinds[k.Payload] = append(kinds[k.Payload], k.Kind)
	}
	var nested []*view
	queue := append([]*view(nil), out...)
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, f := range v.Fields {
			if r := f.Elem.Ref; r != nil && !seen[r] {
				seen[r] = true
				nested = append(nested, r)
				queue = append(queue, r)
			}
		}
	}
	sort.Slice(nested, func(i, j int) bool { return nested[i].Name < nested[j].Name })
	return append(out, nested...), kinds
}

// goPayloadType is the Go type of f in a payload struct: the type
// encoding/json renders as the protocol renders f (codec.Marshal), so that
// a producer's bytes are the stored ones. An unset optional scalar or
// message is a nil pointer (null, or left out with (omit_unset));
// google.protobuf.Struct, Value and ListValue are their JSON, as it is.
func goPayloadType(f *field) (string, error) {
	d := f.Proto.Desc
	if f.Oneof != nil {
		return "", fmt.Errorf("%s: a oneof member has no Go payload type", d.FullName())
	}
	if f.Repeated && !d.IsList() {
		return "", fmt.Errorf("%s: a (json_array_of) field has no Go payload type", d.FullName())
	}
	elemDesc := d
	if f.Map {
		elemDesc = d.MapValue()
	}
	var elem string
	switch {
	case f.Elem.Ref != nil:
		elem = f.Elem.Ref.Name
	case elemDesc.Kind() == protoreflect.MessageKind:
		switch f.Elem.JSON {
		case "object", "any", "array":
			elem = "json.RawMessage"
		default:
			return "", fmt.Errorf("%s: well-known type %s has no Go payload type", d.FullName(), elemDesc.Message().FullName())
		}
	default:
		switch elemDesc.Kind() {
		case protoreflect.StringKind, protoreflect.EnumKind:
			elem = "string"
		case protoreflect.BytesKind:
			elem = "[]byte"
		case protoreflect.BoolKind:
			elem = "bool"
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			elem = "int"
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			elem = "uint"
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			elem = "int64"
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			elem = "uint64"
		case protoreflect.FloatKind:
			elem = "float32"
		case protoreflect.DoubleKind:
			elem = "float64"
		default:
			return "", fmt.Errorf("%s: kind %v has no Go payload type", d.FullName(), elemDesc.Kind())
		}
	}
	switch {
	case f.Repeated:
		return "[]" + elem, nil
	case f.Map:
		return "map[string]" + elem, nil
	case elem == "json.RawMessage":
		return elem, nil // nil renders as null
	case d.HasPresence():
		return "*" + elem, nil
	}
	return elem, nil
}

// genPayloadsGo writes protocol/events' payload types: a struct per event
// payload message and per message they reference, rendering as the
// protocol does, each followed by a constant per (one_of) value of its
// fields.
func genPayloadsGo(g *protogen.GeneratedFile, p *protocol) error {
	views, kinds := payloadViews(p)
	types := map[*field]string{}
	rawJSON := false
	for _, v := range views {
		for _, f := range v.Fields {
			typ, err := goPayloadType(f)
			if err != nil {
				return err
			}
			types[f] = typ
			rawJSON = rawJSON || strings.Contains(typ, "json.RawMessage")
		}
	}
	g.P("// ", generatedHeader)
	g.P()
	g.P("package events")
	if rawJSON {
		g.P()
		g.P(`import "encoding/json"`)
	}
	names := map[string]string{} // Go name → what it stands for
	claim := func(name, by string) error {
		if other, dup := names[name]; dup {
			return fmt.Errorf("the Go payload name %s is used by both %s and %s", name, other, by)
		}
		names[name] = by
		return nil
	}
	for _, v := range views {
		if err := claim(v.Name, string(v.Msg.Desc.FullName())); err != nil {
			return err
		}
		g.P()
		doc := v.Summary
		if ks := kinds[v]; len(ks) > 0 {
			doc = strings.TrimSpace(doc + " The payload of " + strings.Join(ks, ", ") + ".")
		}
		summaryComment(g, doc)
		g.P("type ", v.Name, " struct {")
		var withValues []*field
		for _, f := range v.Fields {
			tag := f.JSONName
			if f.OmitUnset {
				tag += ",omitempty"
			}
			if f.Summary != "" {
				summaryComment(g, f.Summary)
			}
			g.P(goFieldName(f.JSONName), " ", types[f], " `json:", strconv.Quote(tag), "`")
			if len(f.Allowed) > 0 {
				withValues = append(withValues, f)
			}
		}
		g.P("}")
		for _, f := range withValues {
			name := goFieldName(f.JSONName)
			g.P()
			g.P("// The values of ", v.Name, ".", name, ".")
			g.P("const (")
			for _, a := range f.Allowed {
				c := strings.TrimSuffix(v.Name, "Event") + name + goConstWord(a)
				if err := claim(c, string(f.Proto.Desc.FullName())+" "+strconv.Quote(a)); err != nil {
					return err
				}
				g.P(c, " = ", strconv.Quote(a))
			}
			g.P(")")
		}
	}
	return nil
}
