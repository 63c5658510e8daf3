package main

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Full names of the custom options declared in trellis/v1/options.proto.
const (
	optJSONRPC      protoreflect.FullName = "trellis.v1.jsonrpc"
	optNotification protoreflect.FullName = "trellis.v1.notification"
	optS2CRequest   protoreflect.FullName = "trellis.v1.s2c_request"
	optS2CResult    protoreflect.FullName = "trellis.v1.s2c_result"
	optEventKind    protoreflect.FullName = "trellis.v1.event_kind"
	optOneOf        protoreflect.FullName = "trellis.v1.one_of"
	optDefaultValue protoreflect.FullName = "trellis.v1.default_value"
	optError        protoreflect.FullName = "trellis.v1.error"
	optCapability   protoreflect.FullName = "trellis.v1.capability"
	optAccess       protoreflect.FullName = "trellis.v1.access"
	optWatch        protoreflect.FullName = "trellis.v1.watch"
	optJSONArrayOf  protoreflect.FullName = "trellis.v1.json_array_of"
	optGRPCOnly     protoreflect.FullName = "trellis.v1.grpc_only"
	optOmitUnset    protoreflect.FullName = "trellis.v1.omit_unset"
	optOpen         protoreflect.FullName = "trellis.v1.open"
)

// optionReader reads custom options through extension types built from the
// request's own descriptors. Options are re-decoded with that resolver, so the
// result is the same whether or not the Go code of options.proto is linked in
// (it is in tests, it is not in the plugin binary).
type optionReader struct {
	types *protoregistry.Types
}

func newOptionReader(files []*protogen.File) (*optionReader, error) {
	types := new(protoregistry.Types)
	register := func(xds protoreflect.ExtensionDescriptors) error {
		for i := 0; i < xds.Len(); i++ {
			xd := xds.Get(i)
			if _, err := types.FindExtensionByName(xd.FullName()); err == nil {
				continue
			}
			if err := types.RegisterExtension(dynamicpb.NewExtensionType(xd)); err != nil {
				return fmt.Errorf("register option %s: %w", xd.FullName(), err)
			}
		}
		return nil
	}
	for _, f := range files {
		if err := register(f.Desc.Extensions()); err != nil {
			return nil, err
		}
	}
	for _, name := range []protoreflect.FullName{optJSONRPC, optNotification, optS2CRequest, optS2CResult,
		optEventKind, optOneOf, optDefaultValue, optError, optCapability, optAccess, optWatch, optJSONArrayOf, optGRPCOnly, optOmitUnset, optOpen} {
		if _, err := types.FindExtensionByName(name); err != nil {
			return nil, fmt.Errorf("option %s is not declared in the request (is trellis/v1/options.proto imported?)", name)
		}
	}
	return &optionReader{types: types}, nil
}

// get returns the value of the option name on the options message opts of a
// descriptor (d.Options()), and whether it is set.
func (r *optionReader) get(opts proto.Message, name protoreflect.FullName) (protoreflect.Value, bool) {
	if opts == nil || !opts.ProtoReflect().IsValid() {
		return protoreflect.Value{}, false
	}
	xt, err := r.types.FindExtensionByName(name)
	if err != nil {
		return protoreflect.Value{}, false
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil {
		return protoreflect.Value{}, false
	}
	fresh := opts.ProtoReflect().Type().New()
	if err := (proto.UnmarshalOptions{Resolver: r.types}).Unmarshal(b, fresh.Interface()); err != nil {
		return protoreflect.Value{}, false
	}
	xd := xt.TypeDescriptor()
	if !fresh.Has(xd) {
		return protoreflect.Value{}, false
	}
	return fresh.Get(xd), true
}

// str returns a string option, or "" when it is unset.
func (r *optionReader) str(d protoreflect.Descriptor, name protoreflect.FullName) string {
	v, ok := r.get(d.Options(), name)
	if !ok {
		return ""
	}
	return v.String()
}

// has reports whether the option name is set on d.
func (r *optionReader) has(d protoreflect.Descriptor, name protoreflect.FullName) bool {
	_, ok := r.get(d.Options(), name)
	return ok
}

// flag returns a bool option (false when unset).
func (r *optionReader) flag(d protoreflect.Descriptor, name protoreflect.FullName) bool {
	v, ok := r.get(d.Options(), name)
	return ok && v.Bool()
}

// strings returns a repeated string option.
func (r *optionReader) strings(d protoreflect.Descriptor, name protoreflect.FullName) []string {
	v, ok := r.get(d.Options(), name)
	if !ok {
		return nil
	}
	l := v.List()
	out := make([]string, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		out = append(out, l.Get(i).String())
	}
	return out
}

// errorInfo returns the (error) option of an ErrorCode value: its string,
// numeric and gRPC codes and the gRPC codes that fall back to it.
func (r *optionReader) errorInfo(d protoreflect.Descriptor) (info errorOption, ok bool) {
	v, ok := r.get(d.Options(), optError)
	if !ok {
		return info, false
	}
	m := v.Message()
	fields := m.Descriptor().Fields()
	codeFD, numFD, grpcFD, fbFD := fields.ByName("code"), fields.ByName("numeric"), fields.ByName("grpc"), fields.ByName("grpc_fallback")
	if codeFD == nil || numFD == nil || grpcFD == nil || fbFD == nil {
		return info, false
	}
	info = errorOption{Code: m.Get(codeFD).String(), Numeric: int32(m.Get(numFD).Int()), GRPC: m.Get(grpcFD).String()}
	l := m.Get(fbFD).List()
	for i := 0; i < l.Len(); i++ {
		info.Fallback = append(info.Fallback, l.Get(i).String())
	}
	return info, true
}

// errorOption is the content of an (error) option.
type errorOption struct {
	Code     string
	Numeric  int32
	GRPC     string   // google.rpc.Code name
	Fallback []string // google.rpc.Code names
}

// roles are the roles (access).min_role may name, least powerful first
// (runtime/store.Roles lists them most powerful first).
var roles = []string{"viewer", "approver", "member", "operator", "admin"}

// accessOption is the content of an (access) option.
type accessOption struct {
	MinRole string
	Session bool
	Audit   bool
	Owner   bool // runs on the session's owner (forwarded there)
	// Mutating: the call takes an operation id and its outcome is kept as
	// a receipt (a retry answers it).
	Mutating bool
}

// access returns the (access) option of a method, checked: its role is one
// of roles, and a session-scoped method's request has a session_id string.
func (r *optionReader) access(m *protogen.Method) (accessOption, error) {
	v, ok := r.get(m.Desc.Options(), optAccess)
	if !ok {
		return accessOption{}, fmt.Errorf("%s has no (access) option: every RPC says who may call it (docs/security.md)", m.Desc.FullName())
	}
	msg := v.Message()
	fields := msg.Descriptor().Fields()
	roleFD, sessFD, auditFD, ownerFD := fields.ByName("min_role"), fields.ByName("session"), fields.ByName("audit"), fields.ByName("owner")
	mutFD := fields.ByName("mutating")
	if roleFD == nil || sessFD == nil || auditFD == nil || ownerFD == nil || mutFD == nil {
		return accessOption{}, fmt.Errorf("(access) lacks min_role, session, audit, owner or mutating")
	}
	a := accessOption{MinRole: msg.Get(roleFD).String(), Session: msg.Get(sessFD).Bool(), Audit: msg.Get(auditFD).Bool(),
		Owner: msg.Get(ownerFD).Bool(), Mutating: msg.Get(mutFD).Bool()}
	if !slices.Contains(roles, a.MinRole) {
		return a, fmt.Errorf("%s: (access).min_role %q is not a role (%s)", m.Desc.FullName(), a.MinRole, strings.Join(roles, ", "))
	}
	if a.Mutating && (m.Desc.IsStreamingClient() || m.Desc.IsStreamingServer()) {
		return a, fmt.Errorf("%s: (access).mutating applies to unary RPCs: a stream has no one outcome to keep", m.Desc.FullName())
	}
	for _, o := range []struct {
		set  bool
		name string
	}{{a.Session, "session"}, {a.Owner, "owner"}} {
		fd := m.Input.Desc.Fields().ByName("session_id")
		if o.set && (fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated) {
			return a, fmt.Errorf("%s: (access).%s needs a string session_id in %s", m.Desc.FullName(), o.name, m.Input.Desc.FullName())
		}
	}
	return a, nil
}

// watchModes are the values of (watch).
var watchModes = []string{"before", "after"}

// watch returns the (watch) option of a method ("" when absent), checked:
// one of watchModes, on a unary method with a JSON-RPC name.
func (r *optionReader) watch(m *protogen.Method) (string, error) {
	w := r.str(m.Desc, optWatch)
	if w == "" {
		return "", nil
	}
	if !slices.Contains(watchModes, w) {
		return "", fmt.Errorf("%s: (watch) %q is not one of %s", m.Desc.FullName(), w, strings.Join(watchModes, ", "))
	}
	if r.str(m.Desc, optJSONRPC) == "" {
		return "", fmt.Errorf("%s: (watch) applies to JSON-RPC methods: it has no (jsonrpc) name", m.Desc.FullName())
	}
	return w, nil
}
