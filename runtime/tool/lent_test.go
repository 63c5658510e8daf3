package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// TestLentRun: a lent tool's call goes to its origin's lender; each way
// of getting no answer is a failed result saying why, never an error.
func TestLentRun(t *testing.T) {
	cases := []struct {
		name    string
		lender  Lender // nil: the origin has none
		timeout time.Duration
		ok      bool
		want    string
	}{
		{name: "answer", lender: func(_ context.Context, c LentCall) (LentReply, error) {
			return LentReply{Output: "got " + c.Name + " " + string(c.Args) + " " + c.TurnID}, nil
		}, ok: true, want: `got note {"k":"v"} t-1`},
		{name: "the client says it failed", lender: func(context.Context, LentCall) (LentReply, error) {
			return LentReply{Output: "no such note", IsError: true}, nil
		}, want: "no such note"},
		{name: "no answer", lender: func(context.Context, LentCall) (LentReply, error) {
			return LentReply{}, errors.New("the client that lent the tool disconnected before it answered")
		}, want: "note: the client that lent the tool disconnected before it answered"},
		{name: "too late", lender: func(ctx context.Context, _ LentCall) (LentReply, error) {
			<-ctx.Done()
			return LentReply{}, ctx.Err()
		}, timeout: time.Millisecond, want: "did not answer within 1ms"},
		{name: "gone", want: "that client is gone"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLent()
			if tc.lender != nil {
				l.Attach("o-1", tc.lender)
			} else {
				// Registered while attached, then the lender went away
				// with a turn still holding the registry.
				defer l.Attach("o-1", nil)()
			}
			if _, err := l.Register("o-1", "s-1", []LentDef{{Name: "note", Tag: approval.TagRead, Timeout: tc.timeout}}, nil); err != nil {
				t.Fatal(err)
			}
			regs := l.Registries("s-1", "")
			if len(regs) != 1 {
				t.Fatalf("%d registries", len(regs))
			}
			if tc.lender == nil {
				l.mu.Lock()
				delete(l.lenders, "o-1")
				l.mu.Unlock()
			}
			res, err := regs[0].Run(context.Background(), "note", Call{ID: "c-1", SessionID: "s-1", TurnID: "t-1", Workdir: "/", Args: json.RawMessage(`{"k":"v"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != tc.ok || !strings.Contains(res.Output, tc.want) {
				t.Errorf("result = %+v, want ok %v and %q", res, tc.ok, tc.want)
			}
		})
	}
}

// TestLentRegister: what Register refuses, and that a lender's detach
// takes its tools away.
func TestLentRegister(t *testing.T) {
	builtins := []Info{{Name: "read_file", Source: "builtin"}, {Name: "gh_issue", Source: "mcp", Server: "github"}}
	cases := []struct {
		name  string
		defs  []LentDef
		field string
	}{
		{"empty", nil, "tools"},
		{"twice", []LentDef{{Name: "a", Tag: approval.TagRead}, {Name: "a", Tag: approval.TagRead}}, "tools[1].name"},
		{"built-in", []LentDef{{Name: "read_file", Tag: approval.TagRead}}, "tools[0].name"},
		{"MCP tool", []LentDef{{Name: "gh_issue", Tag: approval.TagRead}}, "tools[0].name"},
		{"replace an MCP tool", []LentDef{{Name: "gh_issue", Tag: approval.TagRead, Replace: true}}, "tools[0].replace"},
		{"tag", []LentDef{{Name: "a", Tag: approval.TagSecret}}, "tools[0].permission"},
		{"no tag", []LentDef{{Name: "a"}}, "tools[0].permission"},
		{"name", []LentDef{{Name: "a.b", Tag: approval.TagRead}}, "tools[0].name"},
		{"schema type", []LentDef{{Name: "a", Tag: approval.TagRead, Schema: json.RawMessage(`{"type":"array"}`)}}, "tools[0].inputSchema"},
		{"schema JSON", []LentDef{{Name: "a", Tag: approval.TagRead, Schema: json.RawMessage(`[1]`)}}, "tools[0].inputSchema"},
		{"timeout", []LentDef{{Name: "a", Tag: approval.TagRead, Timeout: 2 * MaxLentTimeout}}, "tools[0].timeoutSec"},
	}
	l := NewLent()
	detach := l.Attach("o-1", func(context.Context, LentCall) (LentReply, error) { return LentReply{}, nil })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Register("o-1", "s-1", tc.defs, builtins)
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errcode.InvalidParams || e.Data["field"] != tc.field {
				t.Fatalf("Register = %v, want invalid_params on %s", err, tc.field)
			}
		})
	}
	if _, err := l.Register("o-2", "s-1", []LentDef{{Name: "a", Tag: approval.TagRead}}, builtins); errs.CodeOf(err) != errcode.Unsupported {
		t.Errorf("an origin without a lender: %v, want unsupported", err)
	}
	names, err := l.Register("o-1", "", []LentDef{{Name: "read_file", Tag: approval.TagRead, Replace: true}, {Name: "b", Tag: approval.TagWrite}}, builtins)
	if err != nil || strings.Join(names, ",") != "b,read_file" {
		t.Fatalf("Register = %v, %v", names, err)
	}
	if regs := l.Registries("s-9", "o-1"); len(regs) != 1 || len(regs[0].Names()) != 2 {
		t.Fatalf("a session o-1 originates gets %d registries", len(regs))
	}
	if regs := l.Registries("s-9", "o-3"); len(regs) != 0 {
		t.Fatalf("a session of another origin gets %d registries", len(regs))
	}
	if got := l.Unregister("o-1", "", []string{"b", "zzz"}); strings.Join(got, ",") != "b" {
		t.Errorf("Unregister = %v", got)
	}
	detach()
	if regs := l.Registries("s-9", "o-1"); len(regs) != 0 {
		t.Errorf("after detach: %d registries", len(regs))
	}
}

// FuzzLentSchema: a client's input schema is refused with an error or
// taken as a schema that compiles; nothing panics.
func FuzzLentSchema(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"type":"object"}`, `{"type":"string"}`, `[1]`, `{"properties":{"a":{"type":7}}}`,
		`{"$ref":"#/nope"}`, `{"type":"object","required":["x"],"properties":{"x":{"type":"integer","minimum":1}}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := lentSchema(json.RawMessage(s))
		if err != nil {
			return
		}
		r := &Registry{tools: map[string]*entry{}}
		if err := r.Register(&lentTool{def: LentDef{Name: "x", Tag: approval.TagRead, Schema: out}}); err != nil {
			t.Fatalf("schema %q was taken but does not register: %v", s, err)
		}
	})
}
