package main

import (
	"fmt"
	"regexp"
	"strings"
)

// tsReserved are the names this file declares besides the message types.
var tsReserved = map[string]bool{
	"PROTOCOL_VERSION": true, "Methods": true, "MethodName": true, "MethodParams": true,
	"MethodResult": true, "ServerRequests": true, "ServerRequestName": true, "Notifications": true,
	"NotificationName": true, "SessionEventKind": true, "SessionEventPayloads": true,
	"SessionEventOf": true, "ErrorCode": true, "ERROR_CODES": true, "Capability": true,
	"CAPABILITIES": true,
}

// typescript renders sdk/src/protocol.ts: a type for every message a client
// sends or receives, and maps from method, notification and event names to them.
func typescript(p *protocol) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("// %s\n", generatedHeader)
	w("// Source: proto/trellis/v1/*.proto. Reference: docs/protocol.md.\n")
	w("//\n")
	w("// Types of the Trellis JSON-RPC protocol. Params types (sent by the client) mark\n")
	w("// omittable fields with `?`; result and notification types (sent by the daemon)\n")
	w("// always carry every field, `null` when unset.\n\n")
	w("/** The protocol version these types describe (semver). */\n")
	w("export const PROTOCOL_VERSION = %s;\n", jsString(p.Version))

	for _, v := range p.types.sorted() {
		b.WriteString("\n")
		writeTSView(&b, v)
	}

	w("\n/** Every client → server method: its params and its result. */\n")
	w("export interface Methods {\n")
	for _, m := range p.Methods {
		writeTSDoc(&b, "  ", m.Summary)
		params := m.Params.Name
		if m.Access.Mutating {
			params += " & OperationParams"
		}
		w("  %s: { params: %s; result: %s };\n", jsString(m.Name), params, m.Result.Name)
	}
	w("}\n\n")
	w("/** The params every mutating method takes besides its own. */\n")
	w("export interface OperationParams {\n")
	writeTSDoc(&b, "  ", operationIDDoc)
	w("  operationId?: string;\n")
	w("}\n\n")
	w("/** The methods that take an operation id (retry-safe). */\n")
	w("export const MUTATING_METHODS: ReadonlySet<MethodName> = new Set<MethodName>([%s]);\n\n", mutatingNames(p))
	w("/** A client → server method name. */\n")
	w("export type MethodName = keyof Methods;\n")
	w("/** The params of method M. */\n")
	w("export type MethodParams<M extends MethodName> = Methods[M][\"params\"];\n")
	w("/** The result of method M. */\n")
	w("export type MethodResult<M extends MethodName> = Methods[M][\"result\"];\n\n")

	w("/** Every server → client request: its params and the result the client answers with. */\n")
	w("export interface ServerRequests {\n")
	for _, r := range p.ServerRequests {
		writeTSDoc(&b, "  ", r.Summary)
		w("  %s: { params: %s; result: %s };\n", jsString(r.Name), r.Params.Name, r.Result.Name)
	}
	w("}\n\n")
	w("/** A server → client request name. */\n")
	w("export type ServerRequestName = keyof ServerRequests;\n\n")

	w("/** Every server → client notification and its params. */\n")
	w("export interface Notifications {\n")
	for _, n := range p.Notifications {
		writeTSDoc(&b, "  ", n.Summary)
		w("  %s: %s;\n", jsString(n.Name), n.Params.Name)
	}
	w("}\n\n")
	w("/** A server → client notification name. */\n")
	w("export type NotificationName = keyof Notifications;\n\n")

	w("/** The kinds of session events. Clients must ignore kinds they do not know. */\n")
	w("export type SessionEventKind =%s;\n\n", tsUnionLines(kindNames(p.EventKinds)))
	w("/** The payload of each session event kind. */\n")
	w("export interface SessionEventPayloads {\n")
	for _, k := range p.EventKinds {
		writeTSDoc(&b, "  ", k.Summary)
		w("  %s: %s;\n", jsString(k.Kind), k.Payload.Name)
	}
	w("}\n\n")
	w("/** The session event of kind K. */\n")
	w("export type SessionEventOf<K extends SessionEventKind> = Extract<SessionEvent, { kind: K }>;\n\n")

	var codes []string
	for _, c := range p.ErrorCodes {
		codes = append(codes, c.Code)
	}
	w("/** A protocol error code, carried in error.data.code. */\n")
	w("export type ErrorCode =%s;\n\n", tsUnionLines(codes))
	w("/** Each error code's numeric JSON-RPC code and meaning. */\n")
	w("export const ERROR_CODES: Readonly<Record<ErrorCode, { readonly numeric: number; readonly summary: string }>> = {\n")
	for _, c := range p.ErrorCodes {
		w("  %s: { numeric: %d, summary: %s },\n", tsKey(c.Code), c.Numeric, jsString(c.Summary))
	}
	w("};\n\n")

	w("/** A capability a daemon of this version may list in system.hello. */\n")
	w("export type Capability =%s;\n\n", tsUnionLines(p.Capabilities))
	w("/** Every capability of this protocol version. */\n")
	w("export const CAPABILITIES: readonly Capability[] = [")
	for i, c := range p.Capabilities {
		if i > 0 {
			w(", ")
		}
		w("%s", jsString(c))
	}
	w("];\n")
	return []byte(b.String())
}

func kindNames(kinds []*eventKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Kind
	}
	return out
}

func writeTSView(b *strings.Builder, v *view) {
	writeTSDoc(b, "", v.Summary)
	switch {
	case v.Envelope != nil:
		writeTSEnvelope(b, v)
	case len(v.Fields) == 0:
		fmt.Fprintf(b, "export type %s = Record<string, never>;\n", v.Name)
	case v.Flavor == input && len(v.oneofs()) > 0:
		writeTSExclusive(b, v)
	default:
		fmt.Fprintf(b, "export interface %s {\n", v.Name)
		for _, f := range v.Fields {
			writeTSField(b, "  ", f)
		}
		if v.Open && v.Flavor == input {
			b.WriteString("  /** Other keys are accepted and ignored. */\n  [key: string]: unknown;\n")
		}
		b.WriteString("}\n")
	}
}

// writeTSExclusive renders a client-sent message with oneofs: exactly one
// member of each oneof is set, the others are absent.
func writeTSExclusive(b *strings.Builder, v *view) {
	var base strings.Builder
	for _, f := range v.Fields {
		if f.Oneof == nil {
			writeTSField(&base, "  ", f)
		}
	}
	var parts []string
	if base.Len() > 0 {
		parts = append(parts, "{\n"+base.String()+"}")
	}
	for _, o := range v.oneofs() {
		var members []*field
		for _, f := range v.Fields {
			if f.Oneof == o {
				members = append(members, f)
			}
		}
		var alts strings.Builder
		alts.WriteString("(\n")
		for _, set := range members {
			var props []string
			for _, f := range members {
				if f == set {
					props = append(props, fmt.Sprintf("%s: %s", tsKey(f.JSONName), tsType(f)))
				} else {
					props = append(props, tsKey(f.JSONName)+"?: never")
				}
			}
			fmt.Fprintf(&alts, "  | { %s }\n", strings.Join(props, "; "))
		}
		alts.WriteString(")")
		parts = append(parts, alts.String())
	}
	fmt.Fprintf(b, "export type %s = %s;\n", v.Name, strings.Join(parts, " & "))
}

// writeTSEnvelope renders an event envelope as a union discriminated by kind.
func writeTSEnvelope(b *strings.Builder, v *view) {
	fmt.Fprintf(b, "export type %s =\n", v.Name)
	for _, k := range v.Envelope.Kinds {
		var parts []string
		kindPart := []string{
			"kind: " + jsString(k.Kind),
			"payload: " + k.Payload.Name,
		}
		for _, f := range v.Fields {
			if f == v.Envelope.KindField {
				parts = append(parts, kindPart...)
				continue
			}
			opt := ""
			if !f.Required {
				opt = "?"
			}
			parts = append(parts, fmt.Sprintf("%s%s: %s", tsKey(f.JSONName), opt, tsType(f)))
		}
		if v.Envelope.KindField == nil {
			parts = append(parts, kindPart...)
		}
		fmt.Fprintf(b, "  | { %s }\n", strings.Join(parts, "; "))
	}
	b.WriteString("  ;\n")
}

func writeTSField(b *strings.Builder, indent string, f *field) {
	doc := f.Summary
	if f.HasDefault {
		def, _ := marshalRaw(f.Default)
		doc = strings.TrimSpace(doc + " Default: `" + string(def) + "`.")
	}
	writeTSDoc(b, indent, doc)
	opt := ""
	if !f.Required {
		opt = "?"
	}
	fmt.Fprintf(b, "%s%s%s: %s;\n", indent, tsKey(f.JSONName), opt, tsType(f))
}

func tsType(f *field) string {
	t := tsValue(f.Elem, f.Allowed)
	if f.Repeated {
		if strings.Contains(t, " ") {
			t = "(" + t + ")"
		}
		t += "[]"
	}
	if f.Map {
		t = "Record<string, " + t + ">"
	}
	if f.Nullable {
		t += " | null"
	}
	return t
}

func tsValue(vt valueType, allowed []string) string {
	if len(allowed) > 0 {
		return tsUnion(allowed)
	}
	if len(vt.Enum) > 0 {
		return tsUnion(vt.Enum)
	}
	if vt.Ref != nil {
		return vt.Ref.Name
	}
	switch vt.JSON {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "object":
		return "Record<string, unknown>"
	case "array":
		return "unknown[]"
	}
	return "unknown"
}

func tsUnion(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = jsString(v)
	}
	return strings.Join(q, " | ")
}

// tsUnionLines writes a union one member per line (or never when empty).
func tsUnionLines(values []string) string {
	if len(values) == 0 {
		return " never"
	}
	var b strings.Builder
	for _, v := range values {
		b.WriteString("\n  | " + jsString(v))
	}
	return b.String()
}

var tsIdent = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

func tsKey(name string) string {
	if tsIdent.MatchString(name) {
		return name
	}
	return jsString(name)
}

func writeTSDoc(b *strings.Builder, indent, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "%s/** %s */\n", indent, strings.ReplaceAll(text, "*/", "*\\/"))
}

// jsString is a JavaScript string literal (JSON's, which JavaScript accepts).
func jsString(s string) string {
	b, _ := marshalRaw(s)
	return string(b)
}

// mutatingNames lists the JSON-RPC names of the mutating methods as
// TypeScript strings, comma-separated.
func mutatingNames(p *protocol) string {
	var names []string
	for _, m := range p.Methods {
		if m.Access.Mutating {
			names = append(names, jsString(m.Name))
		}
	}
	return strings.Join(names, ", ")
}
