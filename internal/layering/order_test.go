package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// construction names the function that builds the runtime's services and
// the type of what it builds (daemon/runtime.go).
const (
	construction = "newRuntimeServices"
	servicesType = "runtimeServices"
)

// cycles are the construction cycles the runtime really has, each a
// context (the key of the composite literal field, the function called, or
// the type holding the services that a func literal is given to) and the
// field of the services its func literal reads although it is assigned
// later. Every other such read fails TestDaemonBuildsBottomUp.
var cycles = map[string]string{
	// The event log tells the sessions when events it held (the store
	// could not write) are stored, and the sessions write to the log.
	"eventlog.WithHeldStored reads sessions": "the event log calls back the sessions that write to it",
	// The cluster node's lease callbacks: the log is fenced by the node's
	// leases and the sessions take leases through the node; a lease taken
	// over (or lost) reloads the session's events, abandons its approvals
	// and recovers (or drops) the session.
	"OnAcquire reads events":   "the event log is fenced by the node's leases",
	"OnAcquire reads broker":   "the broker's requests of a session taken over are abandoned",
	"OnAcquire reads sessions": "the sessions take leases through the node",
	"OnLost reads sessions":    "the sessions take leases through the node",
	"OnLost reads events":      "the event log is fenced by the node's leases",
	// Sessions delegate to sub-agents (/delegate), which run as sessions.
	"subagentsHook reads agents": "the agents service runs sessions",
}

// TestDaemonBuildsBottomUp: newRuntimeServices builds each service after
// what it uses. A func literal made during the construction (in it, or in
// a method of the services it calls) runs later, and a field of the
// services that it reads but that is assigned after it was made is a
// service built later: a construction cycle hidden in a closure, which a
// call in between may find nil. So is a value holding the services (a
// hook such as T{r}) whose methods read such a field. Only the cycles
// listed in cycles may do so.
func TestDaemonBuildsBottomUp(t *testing.T) {
	found := laterReads(t, "../../daemon")
	var bad []string
	seen := map[string]bool{}
	for _, f := range found {
		seen[f.key] = true
		if cycles[f.key] == "" {
			bad = append(bad, f.String())
		}
	}
	for _, b := range bad {
		t.Errorf("%s: pass what it needs to the constructor, made before it (or, for a real cycle, list it in cycles)", b)
	}
	for key := range cycles {
		if !seen[key] {
			t.Errorf("cycles lists %q, which the construction no longer has: remove it", key)
		}
	}
}

// laterRead is a func literal (or a hook) made at made that reads the
// services' field assigned later, at assigned.
type laterRead struct {
	key      string // context + " reads " + field
	made     token.Position
	assigned string
}

func (r laterRead) String() string {
	return r.made.String() + ": " + r.key + ", assigned later (" + r.assigned + ")"
}

// laterReads finds them in the package in dir.
func laterReads(t *testing.T, dir string) []laterRead {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no sources in %s: %v", dir, err)
	}
	var build *ast.FuncDecl
	// late: the services' fields filled after the construction (atomics,
	// stored into by whoever comes later).
	var late map[string]bool
	methods := map[string]*ast.FuncDecl{} // methods of the services, by name
	hooks := map[string][]*ast.FuncDecl{} // methods of other types, by type
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok {
				late = atomicFields(gd, late)
			}
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			switch recv := recvType(fd); {
			case recv == "" && fd.Name.Name == construction:
				build = fd
			case recv == servicesType:
				methods[fd.Name.Name] = fd
			case recv != "":
				hooks[recv] = append(hooks[recv], fd)
			}
		}
	}
	if build == nil {
		t.Fatalf("no func %s in %s", construction, dir)
	}
	// r is the variable holding the services: r := &runtimeServices{...}.
	var r string
	ast.Inspect(build.Body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && r == "" && len(as.Lhs) == 1 && isServicesLit(as.Rhs[0]) {
			if id, ok := as.Lhs[0].(*ast.Ident); ok {
				r = id.Name
			}
		}
		return r == ""
	})
	if r == "" {
		t.Fatalf("%s makes no &%s{...}", construction, servicesType)
	}
	// assigned: where each field of the services is first assigned.
	assigned := map[string]token.Pos{}
	ast.Inspect(build.Body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok {
			return true
		}
		for _, lhs := range as.Lhs {
			if field := fieldOf(lhs, r); field != "" {
				if p, ok := assigned[field]; !ok || as.Pos() < p {
					assigned[field] = as.Pos()
				}
			}
		}
		return true
	})
	var out []laterRead
	check := func(made token.Pos, context string, reads map[string]bool) {
		for field := range reads {
			if at, ok := assigned[field]; ok && at > made {
				out = append(out, laterRead{key: context + " reads " + field, made: fset.Position(made), assigned: fset.Position(at).String()})
			} else if late[field] {
				out = append(out, laterRead{key: context + " reads " + field, made: fset.Position(made), assigned: "an atomic stored into after the construction"})
			}
		}
	}
	// scan finds the func literals and hooks of body, made at made (the
	// body's own positions, or the call of the method holding it), where
	// recv names the services.
	var scan func(body ast.Node, recv string, at func(ast.Node) token.Pos)
	scan = func(body ast.Node, recv string, at func(ast.Node) token.Pos) {
		var stack []ast.Node
		ast.Inspect(body, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			switch n := n.(type) {
			case *ast.FuncLit:
				check(at(n), contextOf(stack), readsOf(n.Body, recv))
				return false // its reads are counted; what it calls runs later
			case *ast.CompositeLit:
				if typ, ok := n.Type.(*ast.Ident); ok && holds(n, recv) {
					reads := map[string]bool{}
					for _, m := range hooks[typ.Name] {
						for f := range hookReads(m) {
							reads[f] = true
						}
					}
					check(at(n), typ.Name, reads)
				}
			case *ast.CallExpr:
				// A method of the services called here: its func literals
				// are made at the call.
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, recv) && methods[sel.Sel.Name] != nil && body == build.Body {
					m := methods[sel.Sel.Name]
					call := n.Pos()
					scan(m.Body, m.Recv.List[0].Names[0].Name, func(ast.Node) token.Pos { return call })
				}
			}
			stack = append(stack, n)
			return true
		})
	}
	scan(build.Body, r, ast.Node.Pos)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// contextOf names where a func literal is: the key of the composite
// literal field it is the value of, else the function whose call it is an
// argument of.
func contextOf(stack []ast.Node) string {
	for i := len(stack) - 1; i >= 0; i-- {
		switch n := stack[i].(type) {
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				return id.Name
			}
		case *ast.CallExpr:
			return exprString(n.Fun)
		}
	}
	return construction
}

// readsOf lists the fields of the services (recv) that body reads.
func readsOf(body ast.Node, recv string) map[string]bool {
	out := map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		if field := fieldOf(n, recv); field != "" {
			out[field] = true
		}
		return true
	})
	return out
}

// hookReads lists the fields of the services that the method m of a hook
// reads through the hook's field holding them (h.r.field).
func hookReads(m *ast.FuncDecl) map[string]bool {
	out := map[string]bool{}
	if len(m.Recv.List[0].Names) == 0 {
		return out
	}
	h := m.Recv.List[0].Names[0].Name
	ast.Inspect(m.Body, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if inner, ok := sel.X.(*ast.SelectorExpr); ok && isIdent(inner.X, h) {
			out[sel.Sel.Name] = true
		}
		return true
	})
	return out
}

// holds reports whether the composite literal is given recv itself.
func holds(c *ast.CompositeLit, recv string) bool {
	for _, e := range c.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			e = kv.Value
		}
		if isIdent(e, recv) {
			return true
		}
	}
	return false
}

// fieldOf returns field when e is recv.field.
func fieldOf(e ast.Node, recv string) string {
	if sel, ok := e.(*ast.SelectorExpr); ok && isIdent(sel.X, recv) {
		return sel.Sel.Name
	}
	return ""
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isServicesLit(e ast.Expr) bool {
	u, ok := e.(*ast.UnaryExpr)
	if !ok || u.Op != token.AND {
		return false
	}
	c, ok := u.X.(*ast.CompositeLit)
	return ok && isIdent(c.Type, servicesType)
}

// recvType is the name of fd's receiver type ("" for a function).
func recvType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return "?"
}

// atomicFields adds to late the fields of the services' type (if gd
// declares it) that are sync/atomic values.
func atomicFields(gd *ast.GenDecl, late map[string]bool) map[string]bool {
	for _, spec := range gd.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != servicesType {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		if late == nil {
			late = map[string]bool{}
		}
		for _, f := range st.Fields.List {
			t := f.Type
			if ix, ok := t.(*ast.IndexExpr); ok {
				t = ix.X
			}
			if sel, ok := t.(*ast.SelectorExpr); ok && isIdent(sel.X, "atomic") {
				for _, n := range f.Names {
					late[n.Name] = true
				}
			}
		}
	}
	return late
}
