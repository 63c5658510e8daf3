package rest

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/facade/methods"
)

// TestEveryMethodHasARESTRoute checks proto/trellis/v1/http.yaml: every
// JSON-RPC method has exactly one rule, under /v1/, at the method's name
// with dots as slashes.
func TestEveryMethodHasARESTRoute(t *testing.T) {
	b, err := os.ReadFile("../../proto/trellis/v1/http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`(?m)^\s*- selector: (\S+)\n\s*(get|post): (\S+)`)
	routes := map[string]string{}
	for _, m := range rule.FindAllStringSubmatch(string(b), -1) {
		if _, dup := routes[m[1]]; dup {
			t.Errorf("two rules for %s", m[1])
		}
		routes[m[1]] = m[3]
	}
	for _, name := range methods.Names() {
		m := methods.Lookup(name)
		selector := strings.ReplaceAll(strings.TrimPrefix(m.FullMethod, "/"), "/", ".")
		path, ok := routes[selector]
		if !ok {
			t.Errorf("%s (%s) has no REST route", name, selector)
			continue
		}
		if want := "/v1/" + strings.ReplaceAll(name, ".", "/"); path != want {
			t.Errorf("%s is routed at %s, want %s", name, path, want)
		}
		delete(routes, selector)
	}
	for sel := range routes {
		t.Errorf("rule for %s, which is no JSON-RPC method", sel)
	}
}
