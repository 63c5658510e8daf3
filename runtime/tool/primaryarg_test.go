package tool

import (
	"encoding/json"
	"testing"

	"github.com/trellis-run/trellis/runtime/approval"
)

// TestAllowlistPrimaryArgs pins the argument each built-in's allowlist
// patterns match (approval.PrimaryArg) to a property of the tool's schema,
// so renaming an argument cannot silently break `tool(glob)` patterns.
func TestAllowlistPrimaryArgs(t *testing.T) {
	primary := map[string]string{
		"shell": "command", "read_file": "path", "list_dir": "path", "grep": "path",
		"write_file": "path", "edit_file": "path", "glob": "pattern", "web_fetch": "url",
	}
	for _, tl := range Builtins(Options{}) {
		key, ok := primary[tl.Name()]
		if !ok {
			continue // matched on its compact JSON args
		}
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(tl.InputSchema(), &schema); err != nil {
			t.Fatal(err)
		}
		if _, ok := schema.Properties[key]; !ok {
			t.Errorf("%s has no %q argument, which its allowlist patterns match", tl.Name(), key)
		}
		args, _ := json.Marshal(map[string]string{key: "probe"})
		if got, _ := approval.PrimaryArg(tl.Name(), args, "/w"); got != "probe" {
			t.Errorf("approval.PrimaryArg(%s, %s) = %q, want probe", tl.Name(), args, got)
		}
	}
	if len(primary) != 8 {
		t.Fatal("table changed without the test")
	}
}
