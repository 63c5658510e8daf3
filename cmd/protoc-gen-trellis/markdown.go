package main

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// markdown renders docs/protocol.md, the reference for client authors.
func markdown(p *protocol) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("<!-- %s -->\n\n", generatedHeader)
	w("# Trellis protocol reference (version %s)\n\n", p.Version)
	w("Generated from `proto/trellis/v1/*.proto`, the protocol's single source of truth, together with\n")
	w("`/protocol.json` (the same data as JSON Schema) and `sdk/src/protocol.ts` (TypeScript types).\n")
	w("Do not edit by hand: change the `.proto` files and run `buf generate`.\n\n")

	w("## Overview\n\n")
	w("- **Transport.** JSON-RPC 2.0 over a WebSocket at `%s` (text frames, one message or one batch per\n", wsPath)
	w("  frame). The daemon binds to loopback by default.\n")
	w("- **Handshake.** The first call on a connection must be `system.hello`; any other method before it\n")
	w("  fails with `unauthorized`. A client whose protocol major version differs is refused with\n")
	w("  `protocol_incompatible`.\n")
	w("- **Params** are always an object; absent or `null` means `{}`. Unknown fields and wrong types fail\n")
	w("  with `invalid_params` naming the field, except in an object whose type says it takes other keys\n")
	w("  (`provider.configure`'s `config`): there they are ignored. Fields marked optional may be omitted;\n")
	w("  defaults apply.\n")
	w("- **A client's answer to a server request** (the result of `approval.request` or `question.request`)\n")
	w("  may carry fields the protocol does not define: they are ignored. The fields it defines are checked\n")
	w("  as params are, and an answer that fails the check is a deny (a question: declined).\n")
	w("- **Results, notifications and server requests** always carry every field of their type: nullable\n")
	w("  fields are `null` when unset, defaulted fields carry their default. 64-bit integers are JSON numbers.\n")
	w("- **Errors** are `{code, message, data: {code: <string code>, ...}}`; see [Error codes](#error-codes).\n")
	w("- **Compatibility.** Additive changes bump the minor version and are negotiated through the\n")
	w("  `capabilities` of `system.hello`. Clients must ignore event kinds and fields they do not know.\n\n")

	w("### HTTP surfaces\n\n")
	w("| Surface | Method | Path | Auth | Purpose |\n|---|---|---|---|---|\n")
	w("| ws | GET (upgrade) | `%s` | `system.hello` token | JSON-RPC 2.0, both directions |\n", wsPath)
	for _, h := range httpSurfaces {
		w("| %s | %s | `%s` | %s | %s |\n", h.Key, h.Method, h.Path, h.Auth, mdCell(h.Purpose))
	}
	w("\nAuthenticated HTTP surfaces take `Authorization: Bearer <token>`.\n\n")
	w("**REST.** Every method below is also `POST /v1/<name with dots as slashes>` with its params object\n")
	w("as the JSON body (an empty body is `{}`), or `GET` with the params as query parameters for the reads\n")
	w("(`a.b=1` sets a nested field, a repeated key fills an array); `/openapi.json` lists each route (OpenAPI\n")
	w("3.1, these schemas). A 200 body is the method's JSON-RPC `result` and an error body its JSON-RPC\n")
	w("`error` object, the same JSON as over the WebSocket: the same params rules and messages, 64-bit\n")
	w("integers as numbers, events as `{sessionId, seq, kind, payload, ts}`. The HTTP status follows the\n")
	w("error code: 400 `invalid_params`, 401 `unauthorized`, 404 `not_found` (and a path with no route),\n")
	w("405 a route asked with the other verb, 413 `payload_too_large`, 429 or 503 `overloaded`, 500 `internal`.\n")
	w("REST has no connection: `session.resume` answers the stored events without subscribing, and events\n")
	w("are read from `/v1/sessions/{id}/events`.\n\n")
	writeOperationIDs(&b)

	w("### Contents\n\n")
	for _, s := range p.Services {
		w("- [%s](#%s):", serviceTitle(s), slug(serviceTitle(s)))
		for i, m := range s.Methods {
			sep := ","
			if i == 0 {
				sep = ""
			}
			w("%s [`%s`](#%s)", sep, m.Name, slug(m.Name))
		}
		w("\n")
	}
	w("- [Server → client requests](#server--client-requests), [Notifications](#notifications),\n")
	w("  [Session events](#session-events), [Error codes](#error-codes), [Capabilities](#capabilities),\n")
	w("  [gRPC streams](#grpc-streams), [Types](#types)\n\n")

	w("## Methods (client → server)\n\n")
	for _, s := range p.Services {
		w("### %s\n\n", serviceTitle(s))
		if s.Summary != "" {
			w("%s\n\n", s.Summary)
		}
		if len(s.Capabilities) > 0 {
			w("Capabilities: %s.\n\n", codeList(s.Capabilities))
		}
		for _, m := range s.Methods {
			w("#### `%s`\n\n", m.Name)
			if m.Summary != "" {
				w("%s\n\n", m.Summary)
			}
			w("gRPC: `%s`\n\n", m.FullMethod)
			for _, f := range append(append([]*protogen.Field(nil), m.Params.GRPCOnly...), m.Result.GRPCOnly...) {
				w("gRPC only, `%s` in `%s`: %s\n\n", f.Desc.JSONName(), f.Parent.Desc.Name(), comment(f.Comments))
			}
			w("Least role: `%s`%s ([roles](roles.md))\n\n", m.Access.MinRole, sessionNote(m.Access))
			w("**Params** (`%s`)\n\n", m.Params.Name)
			writeMDTable(&b, m.Params)
			if m.Access.Mutating {
				w("Retry-safe: also takes `operationId` (string, optional; see [Operation ids](#operation-ids)).\n\n")
			}
			w("**Result** (`%s`)\n\n", m.Result.Name)
			writeMDTable(&b, m.Result)
		}
	}

	w("## Server → client requests\n\n")
	w("The daemon sends these as JSON-RPC requests (with an `id`) to a session's origin connection,\n")
	w("which answers with a result or an error.\n\n")
	for _, r := range p.ServerRequests {
		w("#### `%s`\n\n", r.Name)
		if r.Summary != "" {
			w("%s\n\n", r.Summary)
		}
		w("**Params** (`%s`, sent by the daemon)\n\n", r.Params.Name)
		writeMDTable(&b, r.Params)
		w("**Result** (`%s`, sent by the client)\n\n", r.Result.Name)
		writeMDTable(&b, r.Result)
	}

	w("## Notifications\n\n")
	w("Server → client notifications (no `id`).\n\n")
	for _, n := range p.Notifications {
		w("#### `%s`\n\n", n.Name)
		if n.Summary != "" {
			w("%s\n\n", n.Summary)
		}
		writeMDTable(&b, n.Params)
	}

	w("## Session events\n\n")
	w("Each `session.event` carries one event: `seq` starts at 1 per session and rises by exactly 1;\n")
	w("`kind` names the event and `payload` has the shape below. Clients must ignore kinds they do not know.\n\n")
	w("| Kind | Payload | Description |\n|---|---|---|\n")
	for _, k := range p.EventKinds {
		w("| [`%s`](#%s) | `{%s}` | %s |\n", k.Kind, slug(k.Kind), mdCell(fieldNames(k.Payload)), mdCell(k.Summary))
	}
	w("\n")
	for _, k := range p.EventKinds {
		w("#### `%s`\n\n", k.Kind)
		if k.Summary != "" {
			w("%s\n\n", k.Summary)
		}
		w("Payload (`%s`):\n\n", k.Payload.Name)
		writeMDTable(&b, k.Payload)
	}

	w("## Error codes\n\n")
	w("Every error is `{\"code\": <numeric>, \"message\": <text>, \"data\": {\"code\": <string code>, ...}}`.\n")
	w("Frames that are not JSON (-32700) and invalid requests (-32600) carry `data.code` = `invalid_params`.\n\n")
	w("| Code | Numeric | Meaning |\n|---|---|---|\n")
	for _, c := range p.ErrorCodes {
		w("| `%s` | %d | %s |\n", c.Code, c.Numeric, mdCell(c.Summary))
	}
	w("\n")

	w("## Capabilities\n\n")
	w("`system.hello` lists what the daemon supports. This version defines: %s.\n\n", codeList(p.Capabilities))

	writeStreams(&b, p)

	w("## Types\n\n")
	w("Message types used inside params, results and events. Types sent by the daemon always carry\n")
	w("every field; types sent by a client (suffix `Input` when both exist) may omit optional fields.\n\n")
	for _, v := range p.types.nested() {
		w("### %s\n\n", v.Name)
		if v.Summary != "" {
			w("%s\n\n", v.Summary)
		}
		writeMDTable(&b, v)
	}
	return []byte(strings.TrimRight(b.String(), "\n") + "\n")
}

func serviceTitle(s *service) string {
	return strings.TrimSuffix(s.GoName, "Service") + " (" + s.GoName + ")"
}

// mdRow is one row of a field table.
type mdRow struct {
	name, typ, required, def, allowed, desc string
}

// mdRows lists v's wire fields, the event envelope's {kind, payload} included.
func mdRows(v *view) []mdRow {
	payload := mdRow{name: "payload", typ: "object", required: "yes",
		desc: "The event's payload; its shape depends on `kind` (see [Session events](#session-events))."}
	kind := func(f *field) mdRow {
		r := mdRow{name: "kind", typ: "string", required: "yes", allowed: "see [Session events](#session-events)"}
		if f != nil {
			r.desc = f.Summary
		}
		return r
	}
	var rows []mdRow
	for _, f := range v.Fields {
		if v.Envelope != nil && f == v.Envelope.KindField {
			rows = append(rows, kind(f), payload)
			continue
		}
		r := mdRow{name: f.JSONName, typ: mdType(f), desc: f.Summary}
		switch {
		case f.Oneof != nil && v.Flavor == input:
			r.required = "exactly one of `" + string(f.Oneof.Desc.Name()) + "`"
		case f.Oneof != nil:
			r.required = "if set"
		case f.Required:
			r.required = "yes"
		default:
			r.required = "no"
		}
		if f.Nullable {
			r.typ += " \\| null"
		}
		if f.HasDefault {
			def, _ := marshalRaw(f.Default)
			r.def = "`" + string(def) + "`"
		}
		if len(f.Allowed) > 0 {
			r.allowed = codeList(f.Allowed)
		}
		rows = append(rows, r)
	}
	if v.Envelope != nil && v.Envelope.KindField == nil {
		rows = append(rows, kind(nil), payload)
	}
	return rows
}

func writeMDTable(b *strings.Builder, v *view) {
	rows := mdRows(v)
	if len(rows) == 0 {
		if v.Flavor == input {
			b.WriteString("No fields: send `{}`.\n\n")
		} else {
			b.WriteString("No fields: `{}`.\n\n")
		}
		return
	}
	if v.Flavor == input {
		b.WriteString("| Field | Type | Required | Default | Allowed values | Description |\n|---|---|---|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s |\n", r.name, r.typ, r.required, r.def, r.allowed, mdCell(r.desc))
		}
	} else {
		b.WriteString("| Field | Type | Allowed values | Description |\n|---|---|---|---|\n")
		for _, r := range rows {
			desc := r.desc
			if r.def != "" {
				desc = strings.TrimSpace(desc + " Default " + r.def + ".")
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", r.name, r.typ, r.allowed, mdCell(desc))
		}
	}
	b.WriteString("\n")
}

func mdType(f *field) string {
	var t string
	switch {
	case f.Elem.Ref != nil:
		t = fmt.Sprintf("[%s](#%s)", f.Elem.Ref.Name, slug(f.Elem.Ref.Name))
	case len(f.Elem.Enum) > 0:
		t = "string (enum)"
	case f.Elem.Format == "int64":
		t = "integer"
	default:
		t = f.Elem.JSON
	}
	switch {
	case f.Repeated:
		t += "[]"
	case f.Map:
		t = "map<string, " + t + ">"
	}
	return t
}

// fieldNames is the brace-less field list of a view, for the events table.
func fieldNames(v *view) string {
	var names []string
	for _, r := range mdRows(v) {
		names = append(names, r.name)
	}
	return strings.Join(names, ", ")
}

func codeList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "`" + s + "`"
	}
	return strings.Join(q, ", ")
}

// mdCell escapes text for a table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

// slug is the anchor GitHub gives a heading with this text.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// writeStreams documents the gRPC-only streaming RPCs and the messages they
// carry that the Types section does not show, with their proto3 JSON field
// names (what grpcurl sends and prints).
func writeStreams(b *strings.Builder, p *protocol) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## gRPC streams\n\n")
	w("The runtime's gRPC port (`system.info` `grpcPort`; metadata `authorization: Bearer <token>`) serves\n")
	w("every method above as a unary RPC (named under each), and these streams, which have no JSON-RPC\n")
	w("method: the facade uses them, and gRPC clients (grpcurl) may too. Messages are shown with their\n")
	w("proto3 JSON field names; a `oneof` takes exactly one of its fields.\n\n")
	documented := map[protoreflect.FullName]string{} // message → anchor
	for _, v := range p.types.nested() {
		documented[v.Msg.Desc.FullName()] = slug(v.Name)
	}
	var queue []*protogen.Message
	link := func(m *protogen.Message) string {
		name := m.Desc.FullName()
		if a, ok := documented[name]; ok {
			return fmt.Sprintf("[%s](#%s)", m.Desc.Name(), a)
		}
		if name.Parent() != "trellis.v1" {
			return "`" + string(name) + "`"
		}
		// The heading says (gRPC): a message can share its name with a
		// method's heading (ApprovalResolved, approval.resolved).
		documented[name] = slug(string(m.Desc.Name()) + " (gRPC)")
		queue = append(queue, m)
		return fmt.Sprintf("[%s](#%s)", m.Desc.Name(), documented[name])
	}
	for _, st := range p.Streams {
		w("#### `%s`\n\n", st.FullMethod)
		w("A %s: the client sends %s, the server sends %s.", st.Kind, link(st.Input), link(st.Output))
		if st.Summary != "" {
			w(" %s", st.Summary)
		}
		w("\n\n")
	}
	w("### Stream messages\n\n")
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		w("#### %s (gRPC)\n\n", m.Desc.Name())
		if c := comment(m.Comments); c != "" {
			w("%s\n\n", c)
		}
		if len(m.Fields) == 0 {
			w("No fields: `{}`.\n\n")
			continue
		}
		w("| Field | Type | Description |\n|---|---|---|\n")
		for _, f := range m.Fields {
			d := f.Desc
			var typ string
			switch {
			case f.Message != nil && d.IsMap():
				typ = "map<" + d.MapKey().Kind().String() + ", " + streamType(d.MapValue(), f.Message.Fields[1], link) + ">"
			default:
				typ = streamType(d, f, link)
				if d.IsList() {
					typ += "[]"
				}
			}
			desc := comment(f.Comments)
			switch {
			case f.Oneof != nil && !f.Oneof.Desc.IsSynthetic():
				desc = strings.TrimSpace("oneof `" + string(f.Oneof.Desc.Name()) + "`. " + desc)
			case d.HasOptionalKeyword():
				desc = strings.TrimSpace("Optional. " + desc)
			}
			w("| `%s` | %s | %s |\n", d.JSONName(), typ, mdCell(desc))
		}
		w("\n")
	}
}

// streamType is a field's type for the stream messages' tables.
func streamType(d protoreflect.FieldDescriptor, f *protogen.Field, link func(*protogen.Message) string) string {
	switch d.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return link(f.Message)
	case protoreflect.EnumKind:
		return "`" + string(d.Enum().FullName()) + "`"
	}
	return d.Kind().String()
}

// sessionNote says that a method acts on the session its request names.
func sessionNote(a accessOption) string {
	if a.Session {
		return ", on the session named by `sessionId`"
	}
	return ""
}

// rolesMarkdown renders docs/roles.md: which role may call each method and
// stream, from the (access) options (the table the runtime enforces).
func rolesMarkdown(p *protocol) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- %s Edit the (access) options in proto/trellis/v1, then run buf generate. -->\n\n", generatedHeader)
	w("# Roles: who may call what\n\n")
	w("Every call is made by a principal: the daemon token's built-in admin, or the principal of the API key\n")
	w("the caller sent (hello `token`, REST `Authorization: Bearer`, gRPC `authorization: Bearer` metadata).\n")
	w("Roles are ordered `viewer` < `approver` < `member` < `operator` < `admin`; a principal may call a\n")
	w("method when its role is the method's least role or above. Any other call answers `forbidden`\n")
	w("(JSON-RPC error with `data.code` `forbidden`, gRPC `PERMISSION_DENIED`, HTTP 403). The runtime checks\n")
	w("this table in one gRPC interceptor that the WebSocket, REST and gRPC transports all pass through.\n")
	w("See [security.md](security.md) for keys and principals.\n\n")
	w("✓ = allowed. \"Session\" marks the methods that act on the one session their request names (see\n")
	w("security.md for owners and grants); \"Audit\" the methods whose every call, allowed or refused, is\n")
	w("recorded in the security audit log (`audit.list`).\n\n")
	w("| Method | gRPC | Least role | Session | Audit |")
	for i := len(roles) - 1; i >= 0; i-- {
		w(" %s |", roles[i])
	}
	w("\n|---|---|---|---|---|")
	for range roles {
		w("---|")
	}
	w("\n")
	rank := map[string]int{}
	for i, r := range roles {
		rank[r] = i
	}
	for _, a := range p.Access {
		name := "(stream)"
		if a.JSONRPC != "" {
			name = "`" + a.JSONRPC + "`"
		}
		sess := ""
		if a.Session {
			sess = "yes"
		}
		audit := ""
		if a.Audit {
			audit = "yes"
		}
		w("| %s | `%s` | `%s` | %s | %s |", name, a.FullMethod, a.MinRole, sess, audit)
		for i := len(roles) - 1; i >= 0; i-- {
			mark := ""
			if i >= rank[a.MinRole] {
				mark = "✓"
			}
			w(" %s |", mark)
		}
		w("\n")
	}
	return []byte(b.String())
}

// writeOperationIDs writes the section on operation ids and receipts
// ((access).mutating).
func writeOperationIDs(b *strings.Builder) {
	b.WriteString(`### Operation ids

A client that lost the answer to a call cannot know whether it acted. Every method marked
**Retry-safe** below (the ones that change state) therefore takes an operation id, chosen by the
client (1 to 128 printable ASCII characters, e.g. a UUID), one per logical operation and the same on
every retry of it:

- WebSocket: the param ` + "`operationId`" + ` (accepted by those methods only; elsewhere it is an unknown field);
- REST: the header ` + "`Idempotency-Key`" + `;
- gRPC: the metadata ` + "`idempotency-key`" + ` (every transport reaches the same interceptor).

The daemon keeps a **receipt** per (principal, operation id): the method, a hash of the params, and
the outcome (the result, or the error with its code and message). A receipt is written before the call
acts and completed after it, in the store, so every daemon of a cluster sees it. It is kept by the
daemon where the call acts: a call on a session by the session's owner, also when another daemon
received it and forwarded it there, so that the death of a daemon that only forwarded a call loses
nothing. A repeat with the same id:

- with the same params, once the first call answered: answers the stored outcome, without acting again;
- while the first call is still running (on this daemon or another): waits for it and answers its outcome;
- with other params (or another method): ` + "`invalid_params`" + ` naming the conflict; nothing is done;
- when the daemon that acted on the first call stopped between beginning to act and storing the outcome:
  ` + "`operation_outcome_unknown`" + ` with what is known (` + "`data.operationId`, `data.method`, `data.startedAt`" + `,
  ` + "`data.sessionId`" + `, and for a call that may start a turn ` + "`data.turnId`" + `, the id the daemon gave that turn
  before acting: the session's events show whether it was announced and how it ended): the action may or
  may not have happened, and it is never done a second time under that id.

Receipts live for the **dedupe window** (default 24 h, ` + "`trellisd --operation-window`" + `,
advertised as ` + "`system.hello`" + ` ` + "`limits.operationWindowMs`" + `), counted from the first call; then they are swept,
and a call with the same id acts again as a new operation. A call without an operation id is not deduplicated.
An error that says nothing was done and to try again (` + "`overloaded`, `rate_limited`, `session_busy`" + `,
` + "`store_busy`, `store_unavailable`" + `) is not kept as the outcome: a retry with the same id acts.

A result that shows a credential once (` + "`key.create`'s `secret`" + `) is kept sealed (AES-256-GCM, under a key
derived from the caller's own key or token and the operation id): the store never holds it readable, and
a repeat must be made with the key or token of the first call (another one, even of the same principal,
gets ` + "`invalid_params`" + ` and nothing is done). ` + "`system.shutdown`" + ` takes no operation id: a daemon whose store
cannot write (a full disk) must still stop, and a receipt is a write.

`)
}
