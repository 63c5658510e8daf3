package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/trellis-run/trellis/version"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protocol is everything the outputs are rendered from.
type protocol struct {
	Version        string
	Services       []*service      // services with at least one JSON-RPC method, in documentation order
	Methods        []*method       // client → server methods, sorted by name
	ServerRequests []*s2cRequest   // server → client requests, sorted by name
	Notifications  []*notification // sorted by name
	EventKinds     []*eventKind    // in declaration order of the payload oneof
	ErrorCodes     []*errorCode    // in enum order
	Capabilities   []string        // sorted, unique
	Streams        []*grpcStream   // gRPC-only streaming RPCs, sorted by full method
	Access         []*rpcAccess    // every RPC of every service, sorted by full method

	types *typeSet
}

// grpcStream is a streaming RPC with no JSON-RPC method: served over gRPC
// only, documented for gRPC clients (grpcurl).
type grpcStream struct {
	FullMethod string // e.g. /trellis.v1.ApprovalService/Attach
	Kind       string // server stream, client stream or bidirectional stream
	Summary    string
	Input      *protogen.Message
	Output     *protogen.Message
}

// rpcAccess is who may call one RPC (its (access) option).
type rpcAccess struct {
	FullMethod string // e.g. /trellis.v1.SessionService/Prompt
	JSONRPC    string // "" for a gRPC-only stream
	accessOption
}

type service struct {
	GoName       string                // e.g. SessionService
	GoImportPath protogen.GoImportPath // of the generated client and messages
	GoPackage    protogen.GoPackageName
	FullName     string // e.g. trellis.v1.SessionService
	Summary      string
	Capabilities []string
	Methods      []*method // declaration order
}

type method struct {
	Name       string // JSON-RPC name, e.g. session.create
	FullMethod string // gRPC name, e.g. /trellis.v1.SessionService/CreateSession
	Summary    string
	Service    *service
	Proto      *protogen.Method
	Access     accessOption
	Watch      string // (watch): "", "before" or "after"
	Params     *view  // sent by the client
	Result     *view  // sent by the server
}

type s2cRequest struct {
	Name    string
	Summary string
	Params  *view // sent by the server
	Result  *view // sent by the client
}

type notification struct {
	Name    string
	Summary string
	Params  *view
}

type eventKind struct {
	Kind    string
	GoName  string // of the payload oneof member: TurnStarted for turn_started
	Summary string
	Payload *view
}

type errorCode struct {
	Code     string
	GoName   string // InvalidParams for ERROR_CODE_INVALID_PARAMS
	Numeric  int32
	GRPC     string   // google.rpc.Code name
	Fallback []string // google.rpc.Code names mapped to this code without ErrorInfo
	Summary  string
}

// flavor says who sends a message, which decides what "required" means.
type flavor int

const (
	// output: sent by the server. Every field is present; optional fields are null when unset.
	output flavor = iota
	// input: sent by the client. Optional, defaulted and repeated fields may be omitted.
	input
)

// view is one message as seen on the wire in one direction.
type view struct {
	Msg      *protogen.Message
	Flavor   flavor
	Name     string // type name in $defs, TypeScript and the docs
	Summary  string
	Fields   []*field // every field outside the event payload oneof, declaration order
	Envelope *envelope
	Nested   bool              // referenced from a field of another view
	GRPCOnly []*protogen.Field // (grpc_only) fields: not on the wire of this view, documented for gRPC callers
	Open     bool              // (open): a client may send keys the message does not declare
}

// envelope describes a message like SessionEvent: its payload oneof renders
// as {kind, payload}, the set member becoming payload and its event_kind the kind.
type envelope struct {
	Kinds []*eventKind
	// KindField is the message's own `kind` field, or nil when the
	// generator adds the property.
	KindField *field
}

// oneofs returns the real oneofs of v's fields, in declaration order.
func (v *view) oneofs() []*protogen.Oneof {
	var out []*protogen.Oneof
	seen := map[*protogen.Oneof]bool{}
	for _, f := range v.Fields {
		if f.Oneof != nil && !seen[f.Oneof] {
			seen[f.Oneof] = true
			out = append(out, f.Oneof)
		}
	}
	return out
}

// field is one field of a view.
type field struct {
	Proto      *protogen.Field
	JSONName   string
	Summary    string
	Elem       valueType
	Repeated   bool
	Map        bool            // Elem is then the map's value type; keys are strings on the wire
	Optional   bool            // declared `optional`
	Oneof      *protogen.Oneof // member of this real oneof
	Allowed    []string        // (one_of)
	HasDefault bool
	Default    any // typed (default_value)
	Required   bool
	Nullable   bool
	// OmitUnset: (omit_unset), the Go payload type leaves the field out
	// when unset instead of writing null.
	OmitUnset bool
}

// valueType is the JSON type of a singular value.
type valueType struct {
	JSON string   // string, integer, number, boolean, object, array, any, or "" for Ref
	Enum []string // a proto enum's value names (protojson renders enums by name)
	Ref  *view    // a message of ours
	// Format is a hint for the docs (int64, base64, date-time, ...).
	Format string
}

// wellKnown maps the well-known message types that protojson renders as plain JSON.
var wellKnown = map[protoreflect.FullName]valueType{
	"google.protobuf.Struct":      {JSON: "object"},
	"google.protobuf.Value":       {JSON: "any"},
	"google.protobuf.ListValue":   {JSON: "array"},
	"google.protobuf.Any":         {JSON: "object"},
	"google.protobuf.Empty":       {JSON: "object"},
	"google.protobuf.Timestamp":   {JSON: "string", Format: "date-time"},
	"google.protobuf.Duration":    {JSON: "string", Format: "duration"},
	"google.protobuf.FieldMask":   {JSON: "string"},
	"google.protobuf.StringValue": {JSON: "string"},
	"google.protobuf.BytesValue":  {JSON: "string", Format: "base64"},
	"google.protobuf.BoolValue":   {JSON: "boolean"},
	"google.protobuf.Int32Value":  {JSON: "integer"},
	"google.protobuf.UInt32Value": {JSON: "integer"},
	"google.protobuf.Int64Value":  {JSON: "integer"},
	"google.protobuf.UInt64Value": {JSON: "integer"},
	"google.protobuf.FloatValue":  {JSON: "number"},
	"google.protobuf.DoubleValue": {JSON: "number"},
}

// typeSet builds views on demand, one per (message, flavor).
type typeSet struct {
	opts  *optionReader
	msgs  map[protoreflect.FullName]*protogen.Message // every message of the request, for (json_array_of)
	views map[viewKey]*view
	order []*view // creation order, for deterministic passes
}

type viewKey struct {
	msg    protoreflect.FullName
	flavor flavor
}

// view returns the view of m in flavor fl, building it (and the views it
// references) on first use.
func (ts *typeSet) view(m *protogen.Message, fl flavor) (*view, error) {
	key := viewKey{m.Desc.FullName(), fl}
	if v := ts.views[key]; v != nil {
		return v, nil
	}
	v := &view{Msg: m, Flavor: fl, Summary: comment(m.Comments), Open: ts.opts.flag(m.Desc, optOpen)}
	ts.views[key] = v // before the fields, so recursive messages terminate
	ts.order = append(ts.order, v)

	var payload *protogen.Oneof
	for _, o := range m.Oneofs {
		if o.Desc.IsSynthetic() || len(o.Fields) == 0 {
			continue
		}
		n := 0
		for _, f := range o.Fields {
			if ts.opts.has(f.Desc, optEventKind) {
				n++
			}
		}
		switch {
		case n == 0:
		case n == len(o.Fields) && payload == nil:
			payload = o
		default:
			return nil, fmt.Errorf("%s: oneof %s: (event_kind) must be on every member of exactly one oneof", m.Desc.FullName(), o.Desc.Name())
		}
	}

	for _, f := range m.Fields {
		if payload != nil && f.Oneof == payload {
			continue
		}
		if ts.opts.flag(f.Desc, optGRPCOnly) {
			// Not in the protocol's JSON (codec.Marshal leaves it out).
			v.GRPCOnly = append(v.GRPCOnly, f)
			continue
		}
		fd, err := ts.field(f, fl)
		if err != nil {
			return nil, err
		}
		v.Fields = append(v.Fields, fd)
	}
	if payload != nil {
		env := &envelope{}
		for _, fd := range v.Fields {
			if fd.JSONName == "kind" {
				if fd.Elem.JSON != "string" || fd.Repeated || fd.Map {
					return nil, fmt.Errorf("%s: the kind field of an event envelope must be a string", m.Desc.FullName())
				}
				env.KindField = fd
			}
			if fd.JSONName == "payload" {
				return nil, fmt.Errorf("%s: an event envelope cannot have its own payload field", m.Desc.FullName())
			}
		}
		seen := map[string]bool{}
		for _, f := range payload.Fields {
			if f.Message == nil {
				return nil, fmt.Errorf("%s: event payload %s must be a message", m.Desc.FullName(), f.Desc.Name())
			}
			kind := ts.opts.str(f.Desc, optEventKind)
			if kind == "" || seen[kind] {
				return nil, fmt.Errorf("%s: event kind %q of %s is empty or repeated", m.Desc.FullName(), kind, f.Desc.Name())
			}
			seen[kind] = true
			pv, err := ts.view(f.Message, output)
			if err != nil {
				return nil, err
			}
			summary := comment(f.Comments)
			if summary == "" {
				summary = pv.Summary
			}
			env.Kinds = append(env.Kinds, &eventKind{Kind: kind, GoName: f.GoName, Summary: summary, Payload: pv})
		}
		if env.KindField != nil {
			env.KindField.Allowed = env.kindNames()
		}
		v.Envelope = env
	}
	return v, nil
}

func (e *envelope) kindNames() []string {
	out := make([]string, len(e.Kinds))
	for i, k := range e.Kinds {
		out[i] = k.Kind
	}
	return out
}

// field describes f as seen in a view of flavor fl.
func (ts *typeSet) field(f *protogen.Field, fl flavor) (*field, error) {
	d := f.Desc
	fd := &field{
		Proto:    f,
		JSONName: d.JSONName(),
		Summary:  comment(f.Comments),
		Repeated: d.IsList(),
		Map:      d.IsMap(),
		Optional: d.HasOptionalKeyword(),
	}
	if f.Oneof != nil && !f.Oneof.Desc.IsSynthetic() {
		fd.Oneof = f.Oneof
	}
	elemDesc, elemMsg, elemEnum := d, f.Message, f.Enum
	if fd.Map {
		valField := f.Message.Fields[1]
		elemDesc, elemMsg, elemEnum = valField.Desc, valField.Message, valField.Enum
	}
	var of string // (json_array_of) of a message field
	if elemMsg != nil && !fd.Repeated && !fd.Map {
		of = ts.opts.str(elemMsg.Desc, optJSONArrayOf)
	}
	var vt valueType
	if of != "" {
		// A message carrying other messages' JSON objects (EventPage) is
		// their array in the protocol's JSON.
		target := ts.msgs[protoreflect.FullName(of)]
		if target == nil {
			return nil, fmt.Errorf("%s: (json_array_of) %q names no message", elemMsg.Desc.FullName(), of)
		}
		v, err := ts.view(target, fl)
		if err != nil {
			return nil, err
		}
		v.Nested = true
		vt, fd.Repeated = valueType{Ref: v}, true
	} else {
		var err error
		if vt, err = ts.valueType(elemDesc, elemMsg, elemEnum, fl); err != nil {
			return nil, fmt.Errorf("%s: %w", d.FullName(), err)
		}
	}
	fd.Elem = vt

	if allowed := ts.opts.str(d, optOneOf); allowed != "" {
		if vt.JSON != "string" {
			return nil, fmt.Errorf("%s: (one_of) applies to string fields only", d.FullName())
		}
		for _, a := range strings.Split(allowed, "|") {
			fd.Allowed = append(fd.Allowed, strings.TrimSpace(a))
		}
	}
	if raw, ok := ts.opts.get(d.Options(), optDefaultValue); ok {
		def, err := parseDefault(fd, raw.String())
		if err != nil {
			return nil, fmt.Errorf("%s: (default_value) %q: %w", d.FullName(), raw.String(), err)
		}
		fd.HasDefault, fd.Default = true, def
	}

	if ts.opts.flag(d, optOmitUnset) {
		if !d.HasPresence() || fd.Oneof != nil {
			return nil, fmt.Errorf("%s: (omit_unset) applies to optional and message fields outside a oneof only", d.FullName())
		}
		fd.OmitUnset = true
	}

	switch fl {
	case input:
		fd.Required = !fd.Repeated && !fd.Map && !fd.Optional && !fd.HasDefault && fd.Oneof == nil
	case output:
		fd.Required = fd.Oneof == nil
		fd.Nullable = fd.Optional
	}
	return fd, nil
}

func (ts *typeSet) valueType(d protoreflect.FieldDescriptor, msg *protogen.Message, enum *protogen.Enum, fl flavor) (valueType, error) {
	switch d.Kind() {
	case protoreflect.StringKind:
		return valueType{JSON: "string"}, nil
	case protoreflect.BytesKind:
		return valueType{JSON: "string", Format: "base64"}, nil
	case protoreflect.BoolKind:
		return valueType{JSON: "boolean"}, nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return valueType{JSON: "integer"}, nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return valueType{JSON: "integer", Format: "int64"}, nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return valueType{JSON: "number"}, nil
	case protoreflect.EnumKind:
		vt := valueType{JSON: "string"}
		for _, v := range enum.Values {
			vt.Enum = append(vt.Enum, string(v.Desc.Name()))
		}
		return vt, nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if wk, ok := wellKnown[msg.Desc.FullName()]; ok {
			return wk, nil
		}
		if strings.HasPrefix(string(msg.Desc.FullName()), "google.protobuf.") {
			return valueType{}, fmt.Errorf("well-known type %s has no JSON mapping here", msg.Desc.FullName())
		}
		v, err := ts.view(msg, fl)
		if err != nil {
			return valueType{}, err
		}
		v.Nested = true
		return valueType{Ref: v}, nil
	}
	return valueType{}, fmt.Errorf("unsupported field kind %v", d.Kind())
}

// parseDefault types a (default_value) by the field it is on.
func parseDefault(f *field, s string) (any, error) {
	if f.Repeated || f.Map || f.Elem.Ref != nil || f.Elem.JSON == "object" || f.Elem.JSON == "array" || f.Elem.JSON == "any" {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	switch f.Elem.JSON {
	case "boolean":
		return strconv.ParseBool(s)
	case "integer":
		return strconv.ParseInt(s, 10, 64)
	case "number":
		return strconv.ParseFloat(s, 64)
	}
	if len(f.Allowed) > 0 && !contains(f.Allowed, s) {
		return nil, fmt.Errorf("not one of %s", strings.Join(f.Allowed, "|"))
	}
	return s, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// name assigns type names once every view is known: the message name, with
// "Input" appended to the client-sent view of a message that is also sent by
// the server (the two differ in which fields are required).
func (ts *typeSet) name() error {
	byName := map[string]*view{}
	for _, v := range ts.order {
		v.Name = v.Msg.GoIdent.GoName
		if v.Flavor == input {
			if _, both := ts.views[viewKey{v.Msg.Desc.FullName(), output}]; both {
				v.Name += "Input"
			}
		}
		if tsReserved[v.Name] {
			return fmt.Errorf("type name %s (%s) is reserved by the generated TypeScript", v.Name, v.Msg.Desc.FullName())
		}
		if other := byName[v.Name]; other != nil {
			return fmt.Errorf("type name %s is used by both %s and %s", v.Name, other.Msg.Desc.FullName(), v.Msg.Desc.FullName())
		}
		byName[v.Name] = v
	}
	return nil
}

// sorted returns the views, sorted by name.
func (ts *typeSet) sorted() []*view {
	out := append([]*view(nil), ts.order...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nested returns the views referenced from fields, sorted by name.
func (ts *typeSet) nested() []*view {
	var out []*view
	for _, v := range ts.sorted() {
		if v.Nested {
			out = append(out, v)
		}
	}
	return out
}

// serviceOrder is the order of the documentation's sections (PROTOCOL.md §4);
// services not listed follow, sorted by name.
var serviceOrder = []string{
	"SystemService", "SessionService", "ToolService", "ApprovalService", "ProviderService",
	"AgentService", "JobService", "GatewayService", "MemoryService", "SkillService", "BackendService",
}

// buildProtocol reads the files to generate into a protocol.
func buildProtocol(gen *protogen.Plugin) (*protocol, error) {
	opts, err := newOptionReader(gen.Files)
	if err != nil {
		return nil, err
	}
	ts := &typeSet{opts: opts, views: map[viewKey]*view{}, msgs: map[protoreflect.FullName]*protogen.Message{}}
	var index func([]*protogen.Message)
	index = func(msgs []*protogen.Message) {
		for _, m := range msgs {
			ts.msgs[m.Desc.FullName()] = m
			index(m.Messages)
		}
	}
	for _, f := range gen.Files {
		index(f.Messages)
	}
	p := &protocol{Version: version.Protocol, types: ts}

	var files []*protogen.File
	for _, f := range gen.Files {
		if f.Generate {
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Desc.Path() < files[j].Desc.Path() })

	names := map[string]string{} // method or notification name → what declares it
	claim := func(name, by string) error {
		if name == "" {
			return fmt.Errorf("%s: empty name", by)
		}
		if other, dup := names[name]; dup {
			return fmt.Errorf("%q is declared by both %s and %s", name, other, by)
		}
		names[name] = by
		return nil
	}
	caps := map[string]bool{}
	s2cParams := map[string]*protogen.Message{}
	s2cResults := map[string]*protogen.Message{}

	for _, f := range files {
		for _, s := range f.Services {
			svc := &service{
				GoName:       s.GoName,
				GoImportPath: f.GoImportPath,
				GoPackage:    f.GoPackageName,
				FullName:     string(s.Desc.FullName()),
				Summary:      comment(s.Comments),
				Capabilities: opts.strings(s.Desc, optCapability),
			}
			for _, c := range svc.Capabilities {
				caps[c] = true
			}
			for _, m := range s.Methods {
				name := opts.str(m.Desc, optJSONRPC)
				acc, err := opts.access(m)
				if err != nil {
					return nil, err
				}
				watch, err := opts.watch(m)
				if err != nil {
					return nil, err
				}
				p.Access = append(p.Access, &rpcAccess{FullMethod: fmt.Sprintf("/%s/%s", s.Desc.FullName(), m.Desc.Name()), JSONRPC: name, accessOption: acc})
				if name == "" {
					if cs, ss := m.Desc.IsStreamingClient(), m.Desc.IsStreamingServer(); cs || ss {
						kind := "server stream"
						switch {
						case cs && ss:
							kind = "bidirectional stream"
						case cs:
							kind = "client stream"
						}
						p.Streams = append(p.Streams, &grpcStream{
							FullMethod: fmt.Sprintf("/%s/%s", s.Desc.FullName(), m.Desc.Name()),
							Kind:       kind, Summary: comment(m.Comments), Input: m.Input, Output: m.Output,
						})
					}
					continue
				}
				if m.Desc.IsStreamingClient() || m.Desc.IsStreamingServer() {
					return nil, fmt.Errorf("%s: (jsonrpc) is for unary RPCs only", m.Desc.FullName())
				}
				if err := claim(name, string(m.Desc.FullName())); err != nil {
					return nil, err
				}
				params, err := ts.view(m.Input, input)
				if err != nil {
					return nil, err
				}
				result, err := ts.view(m.Output, output)
				if err != nil {
					return nil, err
				}
				md := &method{
					Name:       name,
					FullMethod: fmt.Sprintf("/%s/%s", s.Desc.FullName(), m.Desc.Name()),
					Summary:    comment(m.Comments),
					Service:    svc,
					Proto:      m,
					Access:     acc,
					Watch:      watch,
					Params:     params,
					Result:     result,
				}
				svc.Methods = append(svc.Methods, md)
				p.Methods = append(p.Methods, md)
			}
			if len(svc.Methods) > 0 {
				p.Services = append(p.Services, svc)
			}
		}

		var walk func([]*protogen.Message) error
		walk = func(msgs []*protogen.Message) error {
			for _, m := range msgs {
				if name := opts.str(m.Desc, optNotification); name != "" {
					if err := claim(name, string(m.Desc.FullName())); err != nil {
						return err
					}
					v, err := ts.view(m, output)
					if err != nil {
						return err
					}
					p.Notifications = append(p.Notifications, &notification{Name: name, Summary: v.Summary, Params: v})
				}
				if name := opts.str(m.Desc, optS2CRequest); name != "" {
					if s2cParams[name] != nil {
						return fmt.Errorf("two (s2c_request) messages for %q", name)
					}
					s2cParams[name] = m
				}
				if name := opts.str(m.Desc, optS2CResult); name != "" {
					if s2cResults[name] != nil {
						return fmt.Errorf("two (s2c_result) messages for %q", name)
					}
					s2cResults[name] = m
				}
				if err := walk(m.Messages); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(f.Messages); err != nil {
			return nil, err
		}

		for _, e := range f.Enums {
			for _, v := range e.Values {
				info, ok := opts.errorInfo(v.Desc)
				if !ok {
					continue
				}
				if info.Code == "" || info.Numeric == 0 {
					return nil, fmt.Errorf("%s: (error) needs a code and a non-zero numeric", v.Desc.FullName())
				}
				for _, g := range append([]string{info.GRPC}, info.Fallback...) {
					if !isGRPCCodeName(g) {
						return nil, fmt.Errorf("%s: (error) grpc %q is not a google.rpc.Code name (e.g. NOT_FOUND)", v.Desc.FullName(), g)
					}
				}
				p.ErrorCodes = append(p.ErrorCodes, &errorCode{
					Code: info.Code, GoName: enumGoName(string(v.Desc.Name()), string(e.Desc.Name())),
					Numeric: info.Numeric, GRPC: info.GRPC, Fallback: info.Fallback, Summary: comment(v.Comments),
				})
			}
		}
	}

	for _, name := range sortedKeys(s2cParams) {
		pm, rm := s2cParams[name], s2cResults[name]
		if rm == nil {
			return nil, fmt.Errorf("server request %q has (s2c_request) %s but no (s2c_result) message", name, pm.Desc.FullName())
		}
		if err := claim(name, string(pm.Desc.FullName())); err != nil {
			return nil, err
		}
		params, err := ts.view(pm, output)
		if err != nil {
			return nil, err
		}
		result, err := ts.view(rm, input)
		if err != nil {
			return nil, err
		}
		p.ServerRequests = append(p.ServerRequests, &s2cRequest{Name: name, Summary: summaryOf(pm), Params: params, Result: result})
	}
	for _, name := range sortedKeys(s2cResults) {
		if s2cParams[name] == nil {
			return nil, fmt.Errorf("server request %q has an (s2c_result) but no (s2c_request) message", name)
		}
	}

	for _, n := range p.Notifications {
		if env := n.Params.Envelope; env != nil {
			if p.EventKinds != nil {
				return nil, fmt.Errorf("more than one notification carries event kinds")
			}
			p.EventKinds = env.Kinds
		}
	}
	seenCodes, fallbackOf := map[string]bool{}, map[string]string{}
	for _, c := range p.ErrorCodes {
		if seenCodes[c.Code] {
			return nil, fmt.Errorf("error code %q is declared twice", c.Code)
		}
		seenCodes[c.Code] = true
		for _, g := range c.Fallback {
			if other, dup := fallbackOf[g]; dup {
				return nil, fmt.Errorf("gRPC code %s is the grpc_fallback of both %s and %s", g, other, c.Code)
			}
			fallbackOf[g] = c.Code
		}
	}

	sort.Slice(p.Methods, func(i, j int) bool { return p.Methods[i].Name < p.Methods[j].Name })
	sort.Slice(p.Notifications, func(i, j int) bool { return p.Notifications[i].Name < p.Notifications[j].Name })
	sort.Slice(p.Streams, func(i, j int) bool { return p.Streams[i].FullMethod < p.Streams[j].FullMethod })
	sort.Slice(p.Access, func(i, j int) bool { return p.Access[i].FullMethod < p.Access[j].FullMethod })
	rank := map[string]int{}
	for i, s := range serviceOrder {
		rank[s] = i + 1
	}
	sort.SliceStable(p.Services, func(i, j int) bool {
		ri, rj := rank[p.Services[i].GoName], rank[p.Services[j].GoName]
		if ri == 0 {
			ri = len(serviceOrder) + 1
		}
		if rj == 0 {
			rj = len(serviceOrder) + 1
		}
		if ri != rj {
			return ri < rj
		}
		return p.Services[i].FullName < p.Services[j].FullName
	})
	for c := range caps {
		p.Capabilities = append(p.Capabilities, c)
	}
	sort.Strings(p.Capabilities)

	if err := ts.name(); err != nil {
		return nil, err
	}
	return p, nil
}

// summaryOf is a message's first comment sentence without the leading Go-doc
// type name: "ApprovalRequest asks a person…" → "Asks a person…".
func summaryOf(m *protogen.Message) string {
	s := comment(m.Comments)
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if rest, ok := strings.CutPrefix(s, m.GoIdent.GoName+" "); ok && rest != "" {
		s = strings.ToUpper(rest[:1]) + rest[1:]
	}
	return s
}

// comment is a leading (else trailing) comment as one line of text.
func comment(c protogen.CommentSet) string {
	text := string(c.Leading)
	if strings.TrimSpace(text) == "" {
		text = string(c.Trailing)
	}
	return strings.Join(strings.Fields(text), " ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
