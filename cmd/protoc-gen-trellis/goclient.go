package main

import (
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/compiler/protogen"
)

// clientCallsPath is the Go client's typed calls.
const clientCallsPath = "client/calls.gen.go"

// genClientGo writes a typed call of the Go client (client.Calls) for each
// JSON-RPC method whose params and result are its RPC's messages as they
// are: session.resume, whose result carries pre-rendered events in bytes,
// keeps its hand-written call (Client.Resume).
func genClientGo(g *protogen.GeneratedFile, p *protocol) {
	g.P("// ", generatedHeader)
	g.P()
	g.P("package client")
	g.P()
	g.P("import (")
	g.P(`"context"`)
	g.P()
	g.P(`trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"`)
	g.P(")")
	g.P()
	g.P("// mutating names the methods that take an operation id ((access).mutating):")
	g.P("// Client.Call sends one with each, and a reconnecting client repeats the")
	g.P("// call with it when the connection dropped before the answer.")
	g.P("var mutating = map[string]bool{")
	for _, m := range p.Methods {
		if m.Access.Mutating {
			g.P(strconv.Quote(m.Name), ": true,")
		}
	}
	g.P("}")
	for _, m := range p.Methods {
		if !plainResult(m.Result) {
			continue
		}
		in, out := m.Proto.Input.GoIdent.GoName, m.Proto.Output.GoIdent.GoName
		g.P()
		g.P("// ", goCallName(m.Name), " calls ", m.Name, ".")
		for _, line := range strings.Split(strings.TrimSpace(m.Summary), "\n") {
			if line != "" {
				g.P("// ", line)
			}
		}
		g.P("func (x Calls) ", goCallName(m.Name), "(ctx context.Context, params *trellisv1.", in, ") (*trellisv1.", out, ", error) {")
		g.P("result := new(trellisv1.", out, ")")
		g.P("if err := x.call(ctx, ", strconv.Quote(m.Name), ", params, result); err != nil {")
		g.P("return nil, err")
		g.P("}")
		g.P("return result, nil")
		g.P("}")
	}
}

// plainResult reports whether a result decodes as its message does in
// protojson: no field is a (json_array_of) message, an array on the wire.
func plainResult(v *view) bool {
	for _, f := range v.Fields {
		if f.Repeated && !f.Proto.Desc.IsList() {
			return false
		}
	}
	return true
}

// goCallName is a JSON-RPC method's name as a Go method: session.create is
// SessionCreate, permission.allowlist.add PermissionAllowlistAdd.
func goCallName(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, ".") {
		r := []rune(part)
		if len(r) == 0 {
			continue
		}
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}
