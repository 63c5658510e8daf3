package rpc

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// SecurityLog is where audited calls are recorded (the store).
type SecurityLog interface {
	AppendSecurityEvent(ctx context.Context, e store.SecurityEvent) (int64, error)
}

// maxAuditString bounds each string recorded of a request.
const maxAuditString = 256

// audit records one call of an audited method with its outcome. The call
// has happened (or been refused) already: a record the store cannot take
// is logged, and the caller's answer stands.
func (i interceptors) audit(ctx context.Context, p auth.Principal, fullMethod string, req any, err error) {
	if i.securityLog == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = errorCodeOf(err)
	}
	e := store.SecurityEvent{
		At: time.Now().UTC(), PrincipalID: p.ID, PrincipalName: p.Name,
		Method: methodName(fullMethod), Request: auditFields(req), Outcome: outcome,
	}
	if _, werr := i.securityLog.AppendSecurityEvent(context.WithoutCancel(ctx), e); werr != nil {
		i.log.Error("the security audit log lost a record", "method", e.Method, "principal", p.ID, "outcome", outcome, "err", werr)
	}
}

// errorCodeOf is the protocol code a call's error answers with.
func errorCodeOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return errs.CodeOf(err)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			return info.GetReason()
		}
	}
	return st.Code().String()
}

// auditFields renders the request's set scalar fields (JSON names; strings
// cut at maxAuditString) as a JSON object. Nested messages, lists and maps
// are left out: they carry payloads (a provider's configuration), not who
// did what to which object.
func auditFields(req any) json.RawMessage {
	out := map[string]any{}
	if m, ok := req.(proto.Message); ok {
		m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.IsList() || fd.IsMap() {
				return true
			}
			switch fd.Kind() {
			case protoreflect.StringKind:
				s := withoutURLSecrets(v.String())
				if len(s) > maxAuditString {
					s = s[:maxAuditString]
				}
				out[fd.JSONName()] = s
			case protoreflect.BoolKind:
				out[fd.JSONName()] = v.Bool()
			case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
				protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
				out[fd.JSONName()] = v.Int()
			case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
				out[fd.JSONName()] = v.Uint()
			case protoreflect.EnumKind:
				if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
					out[fd.JSONName()] = string(ev.Name())
				}
			}
			return true
		})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

// withoutURLSecrets returns s, or when s is a URL (an MCP server's, a
// webhook's) the URL without what may hold a credential: its user
// information left out, its query and fragment replaced by "***".
func withoutURLSecrets(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "***"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "***"
	}
	if u.Fragment != "" {
		u.Fragment = "***"
	}
	return u.String()
}
