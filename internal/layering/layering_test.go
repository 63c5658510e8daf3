package layering

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/trellis-run/trellis"

// deps lists the packages pattern links (go list -deps: transitive,
// without test files), keyed by import path, each with whether it is in
// the standard library.
func deps(t *testing.T, patterns ...string) map[string]bool {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	m := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, _ := strings.Cut(line, " ")
		m[path] = std == "true"
	}
	return m
}

// importers names, for each package pattern links that matches bad, the
// package among them importing it directly (for the failure message).
func importers(t *testing.T, bad func(string) bool, patterns ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if bad(imp) {
				found = append(found, f[0]+" imports "+imp)
			}
		}
	}
	return found
}

func TestClientDoesNotLinkTheDaemon(t *testing.T) {
	isDaemon := func(p string) bool { return p == module+"/daemon" || strings.HasPrefix(p, module+"/daemon/") }
	if d := deps(t, module+"/client"); !hasAny(d, isDaemon) {
		return
	}
	t.Errorf("package client links the daemon (daemon.json's type is in package daemonfile): %s",
		strings.Join(importers(t, isDaemon, module+"/client"), "; "))
}

func TestFacadeImportsNoRuntimePackage(t *testing.T) {
	isRuntime := func(p string) bool { return strings.HasPrefix(p, module+"/runtime/") }
	d := deps(t, module+"/facade/...")
	if len(d) < 10 {
		t.Fatalf("go list found %d packages under facade/: the pattern is wrong", len(d))
	}
	if hasAny(d, isRuntime) {
		t.Errorf("the facade links runtime packages (it talks to the runtime over gRPC only): %s",
			strings.Join(importers(t, isRuntime, module+"/facade/..."), "; "))
	}
}

// TestRuntimeAndClientImportNoFacade: the wire (protocol/) sits below the
// edge and the services; neither the runtime nor the Go client links the
// edge's packages.
func TestRuntimeAndClientImportNoFacade(t *testing.T) {
	isFacade := func(p string) bool { return p == module+"/facade" || strings.HasPrefix(p, module+"/facade/") }
	for _, pattern := range []string{module + "/runtime/...", module + "/client/..."} {
		d := deps(t, pattern)
		if len(d) < 10 {
			t.Fatalf("go list found %d packages for %s: the pattern is wrong", len(d), pattern)
		}
		if hasAny(d, isFacade) {
			t.Errorf("%s links the facade: %s", pattern, strings.Join(importers(t, isFacade, pattern), "; "))
		}
	}
}

// TestRuntimeDomainLinksNoGRPC: the runtime's domain packages are plain Go;
// gRPC lives in runtime/rpc (and telemetry's gRPC half in
// telemetry/instrument, which daemon/ wires).
func TestRuntimeDomainLinksNoGRPC(t *testing.T) {
	isGRPC := func(p string) bool {
		return p == "google.golang.org/grpc" || strings.HasPrefix(p, "google.golang.org/grpc/")
	}
	out, err := exec.Command("go", "list", module+"/runtime/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	var domain []string
	for _, p := range strings.Fields(string(out)) {
		if p != module+"/runtime/rpc" && !strings.HasPrefix(p, module+"/runtime/rpc/") {
			domain = append(domain, p)
		}
	}
	if len(domain) < 10 {
		t.Fatalf("go list found %d runtime domain packages: the pattern is wrong", len(domain))
	}
	for _, p := range domain {
		if hasAny(deps(t, p), isGRPC) {
			t.Errorf("%s links gRPC: %s", p, strings.Join(importers(t, isGRPC, p), "; "))
		}
	}
}

// TestProtocolImportsOnlyProto: protocol/ is the wire shared by the edge,
// the runtime and the clients; of this module it may link only proto/ and
// itself.
func TestProtocolImportsOnlyProto(t *testing.T) {
	own := func(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }
	ok := func(p string) bool {
		return strings.HasPrefix(p, module+"/protocol/") || strings.HasPrefix(p, module+"/proto/")
	}
	d := deps(t, module+"/protocol/...")
	if len(d) < 5 {
		t.Fatalf("go list found %d packages under protocol/: the pattern is wrong", len(d))
	}
	bad := func(p string) bool { return own(p) && !ok(p) }
	if hasAny(d, bad) {
		t.Errorf("protocol/ links more of this module than proto/: %s", strings.Join(importers(t, bad, module+"/protocol/..."), "; "))
	}
}

func TestLeavesImportOnlyTheStandardLibrary(t *testing.T) {
	for _, leaf := range []struct {
		pkg     string
		allowed []string
	}{
		{module + "/internal/atomicfile", nil},
		{module + "/internal/broadcast", nil},
		{module + "/daemonfile", []string{module + "/internal/atomicfile"}},
	} {
		for p, std := range deps(t, leaf.pkg) {
			if std || p == leaf.pkg || contains(leaf.allowed, p) {
				continue
			}
			t.Errorf("%s is a leaf but links %s", leaf.pkg, p)
		}
	}
}

// TestDaemonWiresNoSetters: daemon/ builds each service with what it needs
// (constructor arguments, in dependency order: TestDaemonBuildsBottomUp)
// instead of calling SetX on a built service.
func TestDaemonWiresNoSetters(t *testing.T) {
	allowed := map[string]bool{
		"SetServingStatus": true, // grpc health: a status change, not wiring
		"SetOutput":        true, // flag.FlagSet: where its messages go, not wiring
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../daemon/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no daemon sources: %v", err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if ok && isSetter(sel.Sel.Name) && !allowed[sel.Sel.Name] {
				t.Errorf("%s: %s after construction: pass it to the constructor instead", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

// isSetter reports whether name is SetX (X upper case).
func isSetter(name string) bool {
	return len(name) > 3 && strings.HasPrefix(name, "Set") && name[3] >= 'A' && name[3] <= 'Z'
}

func hasAny(m map[string]bool, f func(string) bool) bool {
	for p := range m {
		if f(p) {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
