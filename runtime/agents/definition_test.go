package agents_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agents"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
)

func TestDefinitionsCreateGetListDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agents")
	defs := agents.NewDefinitions(dir)
	in := agents.Definition{Name: "reviewer", Description: `Reviews "diffs": carefully`, Instructions: "Review the change.\n\nBe brief.",
		Tools: []string{"read_file", "grep"}, Model: "m-1"}
	got, err := defs.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != filepath.Join(dir, "reviewer.md") {
		t.Fatalf("path %q", got.Path)
	}
	read, err := defs.Get("reviewer")
	if err != nil {
		t.Fatal(err)
	}
	in.Path = got.Path
	if !reflect.DeepEqual(read, in) {
		t.Fatalf("read back %+v, want %+v", read, in)
	}
	if _, err := defs.Create(in); !errors.Is(err, agents.ErrExists) || errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("second create: %v", err)
	}
	// A stray file is skipped by List.
	if err := os.WriteFile(filepath.Join(dir, "Not_Valid.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := defs.List()
	if err != nil || len(list) != 1 || list[0].Name != "reviewer" {
		t.Fatalf("list %+v, %v", list, err)
	}
	if err := defs.Delete("reviewer"); err != nil {
		t.Fatal(err)
	}
	if err := defs.Delete("reviewer"); !errors.Is(err, agents.ErrNotFound) || errs.CodeOf(err) != errcode.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := defs.Get("reviewer"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestCreateRejects(t *testing.T) {
	defs := agents.NewDefinitions(t.TempDir())
	for _, tc := range []struct {
		name string
		def  agents.Definition
		want error
	}{
		{"empty name", agents.Definition{Description: "d"}, agents.ErrInvalidName},
		{"upper case", agents.Definition{Name: "Bob", Description: "d"}, agents.ErrInvalidName},
		{"path", agents.Definition{Name: "../x", Description: "d"}, agents.ErrInvalidName},
		{"space", agents.Definition{Name: "a b", Description: "d"}, agents.ErrInvalidName},
		{"too long", agents.Definition{Name: strings.Repeat("a", 65), Description: "d"}, agents.ErrInvalidName},
		{"no description", agents.Definition{Name: "ok"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := defs.Create(tc.def)
			if errs.CodeOf(err) != errcode.InvalidParams {
				t.Fatalf("code %q (%v), want invalid_params", errs.CodeOf(err), err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseDefinition(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     agents.Definition
		bad      bool
	}{
		{"no front matter", "Just do it.\n", agents.Definition{Instructions: "Just do it."}, false},
		{"bare values", "---\nname: x\ndescription: Finds bugs\nmodel: gpt\ntools: read_file, grep\n---\nBody\n",
			agents.Definition{Name: "x", Description: "Finds bugs", Model: "gpt", Tools: []string{"read_file", "grep"}, Instructions: "Body"}, false},
		{"quoted and block list", "---\ndescription: 'It''s fine'\ntools:\n  - shell\n  - \"glob\"\nextra: 1\n---\n",
			agents.Definition{Description: "It's fine", Tools: []string{"shell", "glob"}}, false},
		{"flow list", "---\ntools: [a, b]\n---\nx", agents.Definition{Tools: []string{"a", "b"}, Instructions: "x"}, false},
		{"crlf", "---\r\nname: y\r\n---\r\nhi\r\n", agents.Definition{Name: "y", Instructions: "hi"}, false},
		{"empty front matter", "---\n---\nhi", agents.Definition{Instructions: "hi"}, false},
		{"unclosed", "---\nname: x\n", agents.Definition{}, true},
		{"line without key", "---\njust text\n---\n", agents.Definition{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agents.ParseDefinition([]byte(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzDefinitionRoundTrip checks that what Marshal writes parses back, and
// that ParseDefinition never panics.
func FuzzDefinitionRoundTrip(f *testing.F) {
	f.Add("reviewer", "Reviews code", "Be brief.\n---\nstill body", "read_file", "m")
	f.Add("a", "line\nbreak \"q\"", "", "", "")
	f.Add("budgeted", "d", "---\nmaxTokens: 12\nmaxCostMicroUsd: -1\n---\n", "", "")
	f.Fuzz(func(t *testing.T, name, descr, instr, tool, model string) {
		_, _ = agents.ParseDefinition([]byte(instr))
		if agents.ValidName(name) != nil {
			return
		}
		for _, s := range []string{descr, instr, tool, model} {
			if !utf8.ValidString(s) {
				return // the protocol's strings are UTF-8
			}
		}
		d := agents.Definition{Name: name, Description: descr, Instructions: strings.TrimSpace(instr), Model: model}
		if strings.TrimSpace(tool) != "" {
			d.Tools = []string{tool}
		}
		got, err := agents.ParseDefinition(d.Marshal())
		if err != nil {
			t.Fatalf("parse of marshalled %+v: %v", d, err)
		}
		if got.Name != d.Name || got.Description != d.Description || got.Model != d.Model || got.Instructions != d.Instructions || !reflect.DeepEqual(got.Tools, d.Tools) {
			t.Fatalf("round trip: got %+v, want %+v", got, d)
		}
	})
}

func TestDefinitionMCPServers(t *testing.T) {
	d, err := agents.ParseDefinition([]byte("---\nname: helper\nmcpServers: {\"fs\": {\"command\": \"npx\", \"args\": [\"-y\", \"x\"]}}\n---\nHelp.\n"))
	if err != nil || string(d.MCPServers) != `{"fs": {"command": "npx", "args": ["-y", "x"]}}` {
		t.Fatalf("parsed %q, %v", d.MCPServers, err)
	}
	back, err := agents.ParseDefinition(d.Marshal())
	if err != nil || string(back.MCPServers) != string(d.MCPServers) {
		t.Fatalf("round trip %q, %v", back.MCPServers, err)
	}
	if _, err := agents.ParseDefinition([]byte("---\nmcpServers: {not json\n---\n")); err == nil || !strings.Contains(err.Error(), "mcpServers must be a JSON object") {
		t.Fatalf("bad mcpServers: %v", err)
	}
}

// TestDefaultNameIsAuthDefaultAgent: a principal's agent limits name the
// default agent as auth.DefaultAgent, which cannot import this package.
func TestDefaultNameIsAuthDefaultAgent(t *testing.T) {
	if agents.DefaultName != auth.DefaultAgent {
		t.Fatalf("agents.DefaultName %q, auth.DefaultAgent %q", agents.DefaultName, auth.DefaultAgent)
	}
}

// TestDefinitionBudget: the front matter's maxCostMicroUsd and maxTokens
// are whole numbers of at least 0, kept through Marshal; anything else is
// refused naming the key.
func TestDefinitionBudget(t *testing.T) {
	cost, tokens := int64(250_000), int64(0)
	d := agents.Definition{Name: "capped", Description: "d", MaxCostMicroUSD: &cost, MaxTokens: &tokens}
	got, err := agents.ParseDefinition(d.Marshal())
	if err != nil || got.MaxCostMicroUSD == nil || *got.MaxCostMicroUSD != cost || got.MaxTokens == nil || *got.MaxTokens != 0 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct{ line, key string }{
		{"maxTokens: -1", "maxTokens"},
		{"maxCostMicroUsd: lots", "maxCostMicroUsd"},
		{"maxCostMicroUsd: 1.5", "maxCostMicroUsd"},
	} {
		_, err := agents.ParseDefinition([]byte("---\nname: x\n" + tc.line + "\n---\n"))
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: %v, want an error naming %s", tc.line, err, tc.key)
		}
	}
}
