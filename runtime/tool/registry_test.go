package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

func TestRegistryList(t *testing.T) {
	r := newTestRegistry(t)
	want := map[string]approval.Tag{
		"edit_file": approval.TagWrite, "glob": approval.TagRead, "grep": approval.TagRead,
		"list_dir": approval.TagRead, "read_file": approval.TagRead, "shell": approval.TagExec,
		"web_fetch": approval.TagNetwork, "web_search": approval.TagNetwork, "write_file": approval.TagWrite,
	}
	infos := r.List()
	if len(infos) != len(want) {
		t.Fatalf("%d tools listed, want %d", len(infos), len(want))
	}
	for i, info := range infos {
		if i > 0 && infos[i-1].Name >= info.Name {
			t.Errorf("not sorted: %s before %s", infos[i-1].Name, info.Name)
		}
		if info.PermissionTag != want[info.Name] {
			t.Errorf("%s tag %q, want %q", info.Name, info.PermissionTag, want[info.Name])
		}
		if info.Source != "builtin" || info.Server != "" || info.Description == "" || !json.Valid(info.InputSchema) {
			t.Errorf("%s: %+v", info.Name, info)
		}
		wantState := "active"
		if info.Name == "web_search" {
			wantState = "inactive"
		}
		if info.State != wantState || (info.Reason == "") == (wantState == "inactive") {
			t.Errorf("%s state %q reason %q", info.Name, info.State, info.Reason)
		}
	}
	// The JSON form has the protocol's field names, every one present.
	b, _ := json.Marshal(infos[0])
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"name", "description", "permissionTag", "state", "reason", "source", "server", "inputSchema"} {
		if _, ok := m[k]; !ok {
			t.Errorf("tool.list entry lacks %q: %s", k, b)
		}
	}
}

func TestRegistryValidate(t *testing.T) {
	r := newTestRegistry(t)
	for _, tc := range []struct {
		tool, args string
		code       string
		is         error
		want       []string
	}{
		{"shell", `{"command":"ls"}`, "", nil, nil},
		{"list_dir", ``, "", nil, nil},
		{"list_dir", `null`, "", nil, nil},
		{"nope", `{}`, errcode.InvalidParams, ErrUnknownTool, []string{`unknown tool "nope"`, "read_file, shell"}},
		{"shell", `{}`, errcode.InvalidParams, ErrInvalidArgs, []string{"invalid arguments for shell", "missing property 'command'"}},
		{"shell", `{"command":"ls","timeoutSec":"5","foo":1}`, errcode.InvalidParams, ErrInvalidArgs,
			[]string{"'foo' not allowed", "timeoutSec: got string, want integer"}},
		{"shell", `[1]`, errcode.InvalidParams, ErrInvalidArgs, []string{"must be a JSON object"}},
		{"shell", `"ls"`, errcode.InvalidParams, ErrInvalidArgs, []string{"must be a JSON object"}},
		{"shell", `{"command":`, errcode.InvalidParams, ErrInvalidArgs, []string{"not valid JSON"}},
		{"web_search", `{"query":"x"}`, errcode.SearchProviderUnavailable, ErrInactive, []string{"web_search is inactive"}},
		// The constraints the arguments types' tags give their schemas.
		{"shell", `{"command":"ls","timeoutSec":2.0}`, "", nil, nil},
		{"shell", `{"command":""}`, errcode.InvalidParams, ErrInvalidArgs, []string{"command: minLength"}},
		{"shell", `{"command":"ls","timeoutSec":601}`, errcode.InvalidParams, ErrInvalidArgs, []string{"timeoutSec: maximum"}},
		{"shell", `{"command":"ls","timeoutSec":1.5}`, errcode.InvalidParams, ErrInvalidArgs, []string{"timeoutSec: got number, want integer"}},
		{"read_file", `{"path":"a","offset":1,"limit":100000}`, "", nil, nil},
		{"read_file", `{"path":"a","limit":0}`, errcode.InvalidParams, ErrInvalidArgs, []string{"limit: minimum"}},
		{"read_file", `{"path":"a","offset":0}`, errcode.InvalidParams, ErrInvalidArgs, []string{"offset: minimum"}},
		{"edit_file", `{"path":"a","old":"x"}`, errcode.InvalidParams, ErrInvalidArgs, []string{"missing property 'new'"}},
		{"edit_file", `{"path":"a","old":"","new":"y"}`, errcode.InvalidParams, ErrInvalidArgs, []string{"old: minLength"}},
		{"write_file", `{"path":"a","content":""}`, "", nil, nil},
		{"write_file", `{"path":"a"}`, errcode.InvalidParams, ErrInvalidArgs, []string{"missing property 'content'"}},
		{"grep", `{"pattern":"x","path":".","glob":"*.go","context":2}`, errcode.InvalidParams, ErrInvalidArgs, []string{"'context' not allowed"}},
		{"glob", `{"pattern":""}`, errcode.InvalidParams, ErrInvalidArgs, []string{"pattern: minLength"}},
		{"web_fetch", `{"url":"http://x","maxBytes":1048577}`, errcode.InvalidParams, ErrInvalidArgs, []string{"maxBytes: maximum"}},
	} {
		err := r.Validate(tc.tool, json.RawMessage(tc.args))
		if tc.code == "" {
			if err != nil {
				t.Errorf("Validate(%s, %s) = %v", tc.tool, tc.args, err)
			}
			continue
		}
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != tc.code || !errors.Is(err, tc.is) {
			t.Errorf("Validate(%s, %s) = %v, want %s wrapping %v", tc.tool, tc.args, err, tc.code, tc.is)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(e.Msg, w) {
				t.Errorf("Validate(%s, %s) message %q lacks %q", tc.tool, tc.args, e.Msg, w)
			}
		}
	}
}

// stubTool is a configurable Tool for registry tests.
type stubTool struct {
	name   string
	tag    approval.Tag
	schema string
	state  *State
}

func (s stubTool) Name() string                 { return s.name }
func (s stubTool) Description() string          { return "stub" }
func (s stubTool) Tag() approval.Tag            { return s.tag }
func (s stubTool) InputSchema() json.RawMessage { return json.RawMessage(s.schema) }
func (s stubTool) Run(context.Context, Call) (Result, error) {
	return Result{OK: true, Output: "ran"}, nil
}

type statefulStub struct{ stubTool }

func (s statefulStub) State() State { return *s.state }

type mcpStub struct{ stubTool }

func (mcpStub) Origin() (string, string) { return "mcp", "github" }

func TestRegistryRegister(t *testing.T) {
	r, err := NewRegistry(stubTool{name: "a", tag: approval.TagRead, schema: `{"type":"object"}`})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(stubTool{name: "a", tag: approval.TagRead, schema: `{}`}); !errors.Is(err, ErrDuplicateTool) {
		t.Errorf("duplicate: %v", err)
	}
	for _, bad := range []stubTool{
		{name: "", tag: approval.TagRead, schema: `{}`},
		{name: "b", tag: "root", schema: `{}`},
		{name: "c", tag: approval.TagRead, schema: `{"type":`},
		{name: "d", tag: approval.TagRead, schema: `{"type":"no-such-type"}`},
	} {
		if err := r.Register(bad); err == nil {
			t.Errorf("Register(%+v) accepted", bad)
		}
	}
	if err := r.Register(mcpStub{stubTool{name: "m", tag: approval.TagSend, schema: `{}`}}); err != nil {
		t.Fatal(err)
	}
	if info := findInfo(t, r, "m"); info.Source != "mcp" || info.Server != "github" {
		t.Errorf("mcp tool listed as %+v", info)
	}

	st := &State{Active: false, Reason: "disabled by the agent definition"}
	if err := r.Register(statefulStub{stubTool{name: "s", tag: approval.TagRead, schema: `{}`, state: st}}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), "s", Call{Workdir: "/"})
	if errs.CodeOf(err) != errcode.ToolInactive || !errors.Is(err, ErrInactive) ||
		err.Error() != "tool s is inactive: disabled by the agent definition" {
		t.Errorf("inactive tool without a code: %v (%q)", err, errs.CodeOf(err))
	}
	st.Active = true
	if res, err := r.Run(context.Background(), "s", Call{Workdir: "/"}); err != nil || res.Output != "ran" {
		t.Errorf("reactivated tool: %+v, %v", res, err)
	}
	if _, err := r.Run(context.Background(), "s", Call{Workdir: "relative"}); errs.CodeOf(err) != errcode.Internal {
		t.Errorf("relative workdir: %v", err)
	}
}
