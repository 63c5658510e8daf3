package main

import (
	"bytes"
	"encoding/json"
	"sort"
)

// object is a JSON object that keeps its keys in insertion order, so that
// schemas read naturally (type, description, properties in field order, …).
type object struct {
	keys []string
	vals map[string]any
}

func obj() *object { return &object{vals: map[string]any{}} }

// set adds or replaces key; it returns o for chaining.
func (o *object) set(key string, v any) *object {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
	return o
}

func (o *object) get(key string) (any, bool) {
	v, ok := o.vals[key]
	return v, ok
}

// MarshalJSON writes the keys in insertion order, without HTML escaping.
func (o *object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, err := marshalRaw(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		vb, err := marshalRaw(o.vals[k])
		if err != nil {
			return nil, err
		}
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// marshalRaw is json.Marshal without HTML escaping (comments mention <home>).
func marshalRaw(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// defsPointer is where nested message schemas live in protocol.json.
const defsPointer = "#/$defs/"

// messageSchema is the JSON Schema of a view, inline. Messages referenced
// from fields are $refs into the document's $defs.
func messageSchema(v *view, withSummary bool) *object {
	s := obj().set("type", "object")
	if withSummary && v.Summary != "" {
		s.set("description", v.Summary)
	}
	props := obj()
	var required []string
	for _, f := range v.Fields {
		props.set(f.JSONName, fieldSchema(f))
		if f.Required {
			required = append(required, f.JSONName)
		}
		if env := v.Envelope; env != nil && f == env.KindField {
			props.set("payload", payloadSchema())
			required = append(required, "payload")
		}
	}
	if env := v.Envelope; env != nil && env.KindField == nil {
		props.set("kind", obj().set("type", "string").set("enum", env.kindNames()))
		props.set("payload", payloadSchema())
		required = append(required, "kind", "payload")
	}
	s.set("properties", props)
	if len(required) > 0 {
		s.set("required", required)
	}
	if v.Flavor == input {
		// The daemon rejects unknown fields in anything a client sends,
		// but in a message marked (open).
		if !v.Open {
			s.set("additionalProperties", false)
		}
		// A oneof sent by a client must have exactly one member set.
		for _, o := range v.oneofs() {
			var alts []any
			for _, f := range v.Fields {
				if f.Oneof == o {
					alts = append(alts, obj().set("required", []string{f.JSONName}))
				}
			}
			s.set("oneOf", alts)
		}
	}
	return s
}

func payloadSchema() *object {
	return obj().set("type", "object").
		set("description", "The event's payload; its schema depends on kind (see sessionEventKinds).")
}

// fieldSchema is the JSON Schema of one field.
func fieldSchema(f *field) *object {
	s := valueSchema(f.Elem)
	if len(f.Allowed) > 0 {
		s.set("enum", f.Allowed)
	}
	switch {
	case f.Repeated:
		s = obj().set("type", "array").set("items", s)
	case f.Map:
		s = obj().set("type", "object").set("additionalProperties", s)
	}
	if f.Nullable {
		s = nullable(s)
	}
	if f.Summary != "" {
		s.set("description", f.Summary)
	}
	if f.HasDefault {
		s.set("default", f.Default)
	}
	return reorder(s, "$ref", "anyOf", "type", "description")
}

func valueSchema(vt valueType) *object {
	switch {
	case vt.Ref != nil:
		return obj().set("$ref", defsPointer+vt.Ref.Name)
	case vt.JSON == "any":
		return obj()
	}
	s := obj().set("type", vt.JSON)
	if len(vt.Enum) > 0 {
		s.set("enum", vt.Enum)
	}
	switch vt.Format {
	case "int64":
		// protojson would write a string; the facade writes 64-bit integers as numbers.
	case "base64":
		s.set("contentEncoding", "base64")
	case "date-time":
		s.set("format", "date-time")
	}
	return s
}

// nullable lets s also be null.
func nullable(s *object) *object {
	t, ok := s.get("type")
	if str, isStr := t.(string); ok && isStr {
		s.set("type", []string{str, "null"})
		if e, ok := s.get("enum"); ok {
			if list, ok := e.([]string); ok {
				withNull := make([]any, 0, len(list)+1)
				for _, x := range list {
					withNull = append(withNull, x)
				}
				s.set("enum", append(withNull, nil))
			}
		}
		return s
	}
	if _, isRef := s.get("$ref"); isRef {
		return obj().set("anyOf", []any{s, obj().set("type", "null")})
	}
	return s // "any" already admits null
}

// transport lists the daemon's surfaces (PROTOCOL.md §1). They are not in the
// .proto files; they live here so that every output shows the same table.
var httpSurfaces = []struct {
	Key, Method, Path, Auth, Purpose string
}{
	{"health", "GET", "/health", "none", "liveness probe: 200 while the daemon serves"},
	{"ready", "GET", "/ready", "none", "readiness probe: 200 {status: ready}, or 503 {status: unavailable, reason} while the store does not answer or the daemon is stopping"},
	{"version", "GET", "/version", "none", "daemon and protocol versions"},
	{"protocol", "GET", "/protocol.json", "none", "this document: the protocol as JSON Schema"},
	{"openapi", "GET", "/openapi.json", "none", "the REST mapping as an OpenAPI 3.1 document (the schemas of this one)"},
	{"rest", "GET, POST", "/v1/", "bearer", "every method at /v1/ + its name with dots as slashes (GET with query params for reads, else POST with the params as body); the body is the JSON-RPC result or error object"},
	{"events", "GET", "/v1/sessions/{id}/events", "bearer", "a session's events as NDJSON or SSE (query: afterSeq, format, follow)"},
	{"export", "GET", "/v1/sessions/{id}/export", "bearer", "the session's portable file (docs/export.md), streamed; viewer with access to the session"},
	{"import", "POST", "/v1/sessions/import", "bearer", "creates a session from a portable file sent as the body (query: sessionId, a new id); member"},
	{"metrics", "GET", "/metrics", "none from loopback, else bearer", "Prometheus metrics: to loopback clients, and to others with an API key of any role"},
}

const wsPath = "/ws"

// operationIDDoc describes the operationId param of a mutating method
// ((access).mutating) wherever the params are shown.
const operationIDDoc = "The call's operation id (1 to 128 printable ASCII characters): a repeat with the same id within the dedupe window answers the first call's outcome without acting again (docs/protocol.md, Operation ids)."

// protocolJSON renders the /protocol.json document (PROTOCOL.md §8).
// serverVersion is left empty: the daemon fills it in when serving.
func protocolJSON(p *protocol) ([]byte, error) {
	type named struct {
		name string
		val  *object
	}
	var entries []named
	for _, m := range p.Methods {
		params := messageSchema(m.Params, false)
		e := obj().set("direction", "c2s").set("summary", m.Summary)
		if m.Access.Mutating {
			e.set("mutating", true)
			props, _ := params.get("properties")
			props.(*object).set("operationId", obj().set("type", "string").set("description", operationIDDoc))
		}
		entries = append(entries, named{m.Name, e.set("params", params).set("result", messageSchema(m.Result, false))})
	}
	for _, r := range p.ServerRequests {
		entries = append(entries, named{r.Name, obj().
			set("direction", "s2c").
			set("summary", r.Summary).
			set("params", messageSchema(r.Params, false)).
			set("result", messageSchema(r.Result, false))})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	methods := obj()
	for _, e := range entries {
		methods.set(e.name, e.val)
	}

	notifications := obj()
	for _, n := range p.Notifications {
		notifications.set(n.Name, messageSchema(n.Params, true))
	}
	kinds := obj()
	for _, k := range p.EventKinds {
		s := messageSchema(k.Payload, false)
		if k.Summary != "" {
			s.set("description", k.Summary)
		}
		kinds.set(k.Kind, reorder(s, "type", "description"))
	}
	codes := []any{}
	for _, c := range p.ErrorCodes {
		codes = append(codes, obj().set("code", c.Code).set("numeric", c.Numeric).set("summary", c.Summary))
	}
	http := obj()
	for _, h := range httpSurfaces {
		http.set(h.Key, obj().set("method", h.Method).set("path", h.Path).set("auth", h.Auth).set("purpose", h.Purpose))
	}
	defs := obj()
	for _, v := range p.types.nested() {
		defs.set(v.Name, messageSchema(v, true))
	}

	doc := obj().
		set("protocolVersion", p.Version).
		set("serverVersion", "").
		set("methods", methods).
		set("notifications", notifications).
		set("sessionEventKinds", kinds).
		set("errorCodes", codes).
		set("capabilities", nonNil(p.Capabilities)).
		set("transport", obj().set("ws", wsPath).set("http", http)).
		set("$defs", defs)

	raw, err := marshalRaw(doc)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// reorder moves the given keys to the front of o, in that order.
func reorder(o *object, first ...string) *object {
	out := obj()
	for _, k := range first {
		if v, ok := o.get(k); ok {
			out.set(k, v)
		}
	}
	for _, k := range o.keys {
		out.set(k, o.vals[k])
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
