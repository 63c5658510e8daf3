package testbin

import (
	"testing"
)

func TestEnvironmentNamesAPrebuiltBinary(t *testing.T) {
	t.Setenv("TESTBIN_TEST_BIN", "/opt/prebuilt/x")
	p, err := Path(Binary{Name: "x", Pkg: "github.com/trellis-run/trellis/cmd/nothing-here", Env: "TESTBIN_TEST_BIN"})
	if err != nil || p != "/opt/prebuilt/x" {
		t.Fatalf("Path = %q, %v; want the prebuilt binary", p, err)
	}
}

func TestContentKeyFollowsTheLinkedPackages(t *testing.T) {
	a1, err := contentKey("github.com/trellis-run/trellis/internal/atomicfile")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := contentKey("github.com/trellis-run/trellis/internal/atomicfile")
	if err != nil {
		t.Fatal(err)
	}
	// daemonfile links atomicfile and more: another set, another key.
	b, err := contentKey("github.com/trellis-run/trellis/daemonfile")
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || a1 == b || len(a1) != 16 {
		t.Fatalf("keys %s, %s (same package) and %s (another): want equal, equal, different", a1, a2, b)
	}
	if _, err := contentKey("github.com/trellis-run/trellis/no/such/package"); err == nil {
		t.Fatal("no error for a package that does not exist")
	}
}
