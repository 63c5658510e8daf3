package main

import (
	"strconv"
	"strings"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/compiler/protogen"
)

// Output paths of the Go tables generated from errors.proto, events.proto
// and the (access) options. The error codes have one package, as the event
// kinds have: protocol/errcode, which the runtime (its domain packages too:
// the package links no gRPC), the facade and the client all import.
const (
	errcodeCodesPath = "protocol/errcode/codes.gen.go"
	eventKindsGoPath = "proto/trellis/v1/eventkind/eventkind.gen.go"
	rpcAuthzPath     = "runtime/rpc/authz.gen.go"
)

// isGRPCCodeName reports whether name is a google.rpc.Code name other than
// OK (what an (error) option's grpc and grpc_fallback hold).
func isGRPCCodeName(name string) bool {
	n, ok := rpccode.Code_value[name]
	return ok && n != int32(rpccode.Code_OK)
}

// enumGoName turns ERROR_CODE_INVALID_PARAMS (of enum ErrorCode) into
// InvalidParams: the enum's prefix dropped, the rest in CamelCase.
func enumGoName(value, enum string) string {
	var prefix strings.Builder
	for i, r := range enum {
		if i > 0 && r >= 'A' && r <= 'Z' {
			prefix.WriteByte('_')
		}
		prefix.WriteRune(r)
	}
	rest := strings.TrimPrefix(value, strings.ToUpper(prefix.String())+"_")
	var out strings.Builder
	for _, part := range strings.Split(rest, "_") {
		if part == "" {
			continue
		}
		out.WriteString(part[:1] + strings.ToLower(part[1:]))
	}
	return out.String()
}

// summaryComment writes s as a Go comment, one line per line of s.
func summaryComment(g *protogen.GeneratedFile, s string) {
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		g.P("// ", strings.TrimSpace(line))
	}
}

// genErrcodeGo writes protocol/errcode's constants and its tables: the
// JSON-RPC numeric code and the gRPC code of each, and the gRPC codes that
// fall back to one.
func genErrcodeGo(g *protogen.GeneratedFile, p *protocol) {
	g.P("// ", generatedHeader)
	g.P()
	g.P("package errcode")
	g.P()
	g.P(`import rpccode "google.golang.org/genproto/googleapis/rpc/code"`)
	g.P()
	g.P("// The protocol's string codes (errors.proto, PROTOCOL.md §2), as carried in")
	g.P("// error.data.code and in google.rpc.ErrorInfo.reason.")
	g.P("const (")
	for _, c := range p.ErrorCodes {
		summaryComment(g, c.Summary)
		g.P(c.GoName, " = ", strconv.Quote(c.Code))
	}
	g.P(")")
	g.P()
	g.P("// numeric is the table: string code → JSON-RPC numeric code (errors.proto,")
	g.P("// (error).numeric).")
	g.P("var numeric = map[string]int{")
	for _, c := range p.ErrorCodes {
		g.P(c.GoName, ": ", c.Numeric, ",")
	}
	g.P("}")
	g.P()
	g.P("// grpcCodes is the table: string code → the gRPC code of the status that")
	g.P("// carries it (errors.proto, (error).grpc), as a google.rpc.Code so that")
	g.P("// this package links no gRPC; the string code itself travels as")
	g.P("// ErrorInfo.reason.")
	g.P("var grpcCodes = map[string]rpccode.Code{")
	for _, c := range p.ErrorCodes {
		g.P(c.GoName, ": rpccode.Code_", c.GRPC, ",")
	}
	g.P("}")
	g.P()
	g.P("// byGRPCCode maps a gRPC status that carries no Trellis ErrorInfo (raised by")
	g.P("// gRPC itself, an interceptor, or a proxy) to a string code (errors.proto,")
	g.P("// (error).grpc_fallback). Codes absent here are internal. The runtime always")
	g.P("// attaches ErrorInfo to its own errors, so these are the fallbacks.")
	g.P("var byGRPCCode = map[rpccode.Code]string{")
	for _, c := range p.ErrorCodes {
		for _, f := range c.Fallback {
			g.P("rpccode.Code_", f, ": ", c.GoName, ",")
		}
	}
	g.P("}")
}

// genEventKindsGo writes the event kinds of SessionEvent's payload oneof.
func genEventKindsGo(g *protogen.GeneratedFile, p *protocol) {
	g.P("// ", generatedHeader)
	g.P()
	g.P("// Package eventkind names the session event kinds declared in events.proto")
	g.P("// (the (event_kind) of each member of SessionEvent.payload). The runtime")
	g.P("// appends and the facade renders events by these names; the event log")
	g.P("// refuses any other kind.")
	g.P("package eventkind")
	g.P()
	g.P("// The event kinds, in declaration order.")
	g.P("const (")
	for _, k := range p.EventKinds {
		summaryComment(g, k.Summary)
		g.P(k.GoName, " = ", strconv.Quote(k.Kind))
	}
	g.P(")")
	g.P()
	g.P("// All lists every event kind, in declaration order.")
	g.P("var All = []string{")
	for _, k := range p.EventKinds {
		g.P(k.GoName, ",")
	}
	g.P("}")
}

// genAuthzGo writes runtime/rpc's authorization table: every RPC of every
// Trellis service with its (access) option. The auth interceptor refuses a
// call to a method missing from it.
func genAuthzGo(g *protogen.GeneratedFile, p *protocol) {
	g.P("// ", generatedHeader)
	g.P()
	g.P("package rpc")
	g.P()
	g.P("// authzTable is the authorization table: for every RPC of the Trellis")
	g.P("// services (full gRPC method), the least role that may call it and whether")
	g.P("// it acts on the session its request names ((access) in the protos;")
	g.P("// name is the JSON-RPC name, \"\" for a gRPC-only stream; audit: every")
	g.P("// call is recorded in the security audit log; owner: the call runs on")
	g.P("// the daemon holding the session's lease, forwarded there by another;")
	g.P("// mutating: the call takes an operation id and keeps a receipt;")
	g.P("// docs/roles.md renders the same table).")
	g.P("var authzTable = map[string]methodAccess{")
	for _, a := range p.Access {
		g.P(strconv.Quote(a.FullMethod), ": {name: ", strconv.Quote(a.JSONRPC), ", minRole: ", strconv.Quote(a.MinRole), ", session: ", a.Session, ", audit: ", a.Audit, ", owner: ", a.Owner, ", mutating: ", a.Mutating, "},")
	}
	g.P("}")
}
