package approval

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

func TestDecideEveryModeAndTag(t *testing.T) {
	const (
		A = Allow
		D = Deny
		Q = Ask
	)
	// want[mode][tag] = {without allowlist, with allowlist}; one row per cell
	// of PROTOCOL.md §4 so that the table reads like the spec.
	want := map[Mode]map[Tag][2]Decision{
		ModePlan: {
			TagRead: {A, A}, TagNetwork: {A, A},
			TagWrite: {D, D}, TagSend: {D, D}, TagConfig: {D, D},
			TagExec: {Q, A}, TagDelegate: {Q, A}, TagSecret: {Q, A},
		},
		ModeAccept: {
			TagRead: {A, A}, TagWrite: {A, A},
			TagExec: {Q, A}, TagNetwork: {Q, A}, TagSend: {Q, A},
			TagConfig: {Q, Q}, TagDelegate: {Q, A}, TagSecret: {Q, A},
		},
		ModeAuto: {
			TagRead: {A, A}, TagWrite: {A, A}, TagExec: {A, A}, TagNetwork: {A, A},
			TagSend: {A, A}, TagDelegate: {A, A}, TagSecret: {A, A},
			TagConfig: {Q, Q},
		},
	}
	for _, mode := range []Mode{ModePlan, ModeAccept, ModeAuto} {
		if len(want[mode]) != len(Tags()) {
			t.Fatalf("test table for %s covers %d tags, want %d", mode, len(want[mode]), len(Tags()))
		}
		for _, tag := range Tags() {
			for i, allowlisted := range []bool{false, true} {
				got := Decide(mode, tag, allowlisted)
				if w := want[mode][tag][i]; got != w {
					t.Errorf("Decide(%s, %s, allowlisted=%v) = %s, want %s", mode, tag, allowlisted, got, w)
				}
			}
		}
	}
}

func TestDecideFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		tag  Tag
	}{
		{"", TagRead},
		{"yolo", TagRead},
		{ModeAuto, ""},
		{ModeAuto, "root"},
	} {
		for _, allowlisted := range []bool{false, true} {
			if got := Decide(tc.mode, tc.tag, allowlisted); got != Deny {
				t.Errorf("Decide(%q, %q, %v) = %s, want deny", tc.mode, tc.tag, allowlisted, got)
			}
		}
	}
	var zero Decision
	if zero != Deny {
		t.Errorf("zero Decision is %s, want deny", zero)
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{Allow: "allow", Deny: "deny", Ask: "ask", 7: "invalid"} {
		if got := d.String(); got != want {
			t.Errorf("Decision(%d).String() = %q, want %q", int(d), got, want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"plan", ModePlan, true},
		{"accept", ModeAccept, true},
		{"auto", ModeAuto, true},
		{"", "", false},
		{"Plan", "", false},
		{" auto", "", false},
		{"yolo", "", false},
	} {
		got, err := ParseMode(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseMode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if errs.CodeOf(err) != errcode.InvalidParams || !errors.Is(err, ErrBadMode) {
			t.Errorf("ParseMode(%q) error = %v (code %q), want invalid_params wrapping ErrBadMode", tc.in, err, errs.CodeOf(err))
		}
	}
	if !DefaultMode.Valid() || DefaultMode != ModeAccept {
		t.Errorf("DefaultMode = %q, want accept", DefaultMode)
	}
}

func TestParseTag(t *testing.T) {
	for _, tag := range Tags() {
		if got, err := ParseTag(string(tag)); err != nil || got != tag {
			t.Errorf("ParseTag(%q) = %q, %v", tag, got, err)
		}
	}
	for _, bad := range []string{"", "READ", "admin"} {
		_, err := ParseTag(bad)
		if errs.CodeOf(err) != errcode.InvalidParams || !errors.Is(err, ErrBadTag) {
			t.Errorf("ParseTag(%q) error = %v, want invalid_params wrapping ErrBadTag", bad, err)
		}
	}
}

func TestParsePattern(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Pattern
		ok   bool
	}{
		{"shell", Pattern{Tool: "shell"}, true},
		{"  web_search  ", Pattern{Tool: "web_search"}, true},
		{"shell(git status*)", Pattern{Tool: "shell", Glob: "git status*"}, true},
		{"shell( git status* )", Pattern{Tool: "shell", Glob: "git status*"}, true},
		{"shell(echo (a))", Pattern{Tool: "shell", Glob: "echo (a)"}, true},
		{`shell(echo \*)`, Pattern{Tool: "shell", Glob: `echo \*`}, true},
		{"write_file(src/**)", Pattern{Tool: "write_file", Glob: "src/**"}, true},
		{"web_fetch(https://go.dev/**)", Pattern{Tool: "web_fetch", Glob: "https://go.dev/**"}, true},
		{"mcp.github:create_issue", Pattern{Tool: "mcp.github:create_issue"}, true},
		{"", Pattern{}, false},
		{"   ", Pattern{}, false},
		{"(x)", Pattern{}, false},
		{"shell()", Pattern{}, false},
		{"shell(  )", Pattern{}, false},
		{"shell(git", Pattern{}, false},
		{"shell(git)x", Pattern{}, false},
		{"she ll", Pattern{}, false},
		{"shell/x", Pattern{}, false},
		{"shell(a\nb)", Pattern{}, false},
		{`shell(echo \)`, Pattern{}, false},
		{"write_file(src/[a)", Pattern{}, false},
		{"read_file({a,b)", Pattern{}, false},
	} {
		got, err := ParsePattern(tc.in)
		if !tc.ok {
			if err == nil {
				t.Errorf("ParsePattern(%q) = %+v, want an error", tc.in, got)
			} else if errs.CodeOf(err) != errcode.InvalidParams || !errors.Is(err, ErrBadPattern) {
				t.Errorf("ParsePattern(%q) error = %v, want invalid_params wrapping ErrBadPattern", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePattern(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestPatternMatches(t *testing.T) {
	const wd = "/home/u/proj"
	for _, tc := range []struct {
		pattern string
		tool    string
		args    string
		want    bool
	}{
		// A bare tool name matches every call of that tool, whatever the args.
		{"shell", "shell", `{"command":"rm -rf /"}`, true},
		{"shell", "read_file", `{"path":"a"}`, false},
		{"web_search", "web_search", `{}`, true},
		{"web_search", "web_search", ``, true},

		// shell: * spans spaces and slashes, never control operators.
		{"shell(git status*)", "shell", `{"command":"git status"}`, true},
		{"shell(git status*)", "shell", `{"command":"  git status --short  "}`, true},
		{"shell(git status*)", "shell", `{"command":"git status src/a b/c"}`, true},
		{"shell(git status*)", "shell", `{"command":"git statusx"}`, true},
		{"shell(git status*)", "shell", `{"command":"git stash"}`, false},
		{"shell(git status*)", "shell", `{"command":"git status; rm -rf ~"}`, false},
		{"shell(git status*)", "shell", `{"command":"git status && curl x"}`, false},
		{"shell(git status*)", "shell", `{"command":"git status | sh"}`, false},
		{"shell(git status*)", "shell", `{"command":"git status > /etc/passwd"}`, false},
		{"shell(git status*)", "shell", "{\"command\":\"git status\\nrm -rf ~\"}", false},
		{"shell(git status*)", "shell", "{\"command\":\"git status `rm -rf ~`\"}", false},
		{"shell(git status*)", "shell", `{"command":"git status $(rm -rf ~)"}`, false},
		{"shell(git status*)", "shell", `{"command":"git status $HOME"}`, true},
		{"shell(make; make test)", "shell", `{"command":"make; make test"}`, true},
		{"shell(go test ./...*)", "shell", `{"command":"go test ./... -run X"}`, true},
		{"shell(ls ?)", "shell", `{"command":"ls a"}`, true},
		{"shell(ls ?)", "shell", `{"command":"ls ;"}`, false},
		{`shell(echo \*)`, "shell", `{"command":"echo *"}`, true},
		{`shell(echo \*)`, "shell", `{"command":"echo x"}`, false},
		{"shell(*)", "shell", `{"command":"anything at all"}`, true},
		{"shell(*)", "shell", `{"command":"a & b"}`, false},
		{"shell(git*)", "shell", `{"command":5}`, false},
		{"shell(git*)", "shell", `{}`, false},
		{"shell(git*)", "shell", `[1]`, false},
		{"shell(git*)", "shell", `not json`, false},

		// file tools: doublestar against the path relative to the workdir.
		{"write_file(src/**)", "write_file", `{"path":"src/a/b.go","content":""}`, true},
		{"write_file(src/**)", "write_file", `{"path":"/home/u/proj/src/x.go"}`, true},
		{"write_file(src/**)", "write_file", `{"path":"./src/../src/x.go"}`, true},
		{"write_file(src/**)", "write_file", `{"path":"src/../../etc/passwd"}`, false},
		{"write_file(src/**)", "write_file", `{"path":"/etc/src/x"}`, false},
		{"write_file(src/*)", "write_file", `{"path":"src/a/b.go"}`, false},
		{"write_file(*.md)", "write_file", `{"path":"README.md"}`, true},
		{"edit_file(**/*.go)", "edit_file", `{"path":"a/b/c.go","old":"x","new":"y"}`, true},
		{"read_file(/etc/**)", "read_file", `{"path":"/etc/hosts"}`, true},
		{"list_dir(.)", "list_dir", `{}`, true},
		{"grep(docs/**)", "grep", `{"pattern":"x","path":"docs/a"}`, true},
		{"glob(**/*.go)", "glob", `{"pattern":"**/*.go"}`, true},
		{"write_file(src/**)", "edit_file", `{"path":"src/a"}`, false},

		// web_fetch: doublestar against the URL.
		{"web_fetch(https://go.dev/**)", "web_fetch", `{"url":"https://go.dev/doc/effective_go"}`, true},
		{"web_fetch(https://go.dev/*)", "web_fetch", `{"url":"https://go.dev/doc/effective_go"}`, false},
		{"web_fetch(https://go.dev/**)", "web_fetch", `{"url":"https://go.dev.evil.org/x"}`, false},
		{"web_fetch(https://go.dev/**)", "web_fetch", `{}`, false},

		// other tools: compact JSON with sorted keys.
		{`web_search(*golang*)`, "web_search", `{"query":"golang generics"}`, true},
		{`web_search({"query":"a"})`, "web_search", `{ "query" : "a" }`, true},
		{`mcp:create_issue({"repo":"x",*})`, "mcp:create_issue", `{"title":"t","repo":"x"}`, true},
		{`mcp:create_issue({"repo":"x",*})`, "mcp:create_issue", `{"title":"t","repo":"y"}`, false},
	} {
		p, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tc.pattern, err)
		}
		if got := p.Matches(tc.tool, json.RawMessage(tc.args), wd); got != tc.want {
			t.Errorf("%s .Matches(%s, %s) = %v, want %v", tc.pattern, tc.tool, tc.args, got, tc.want)
		}
	}
}

func TestPrimaryArg(t *testing.T) {
	for _, tc := range []struct {
		tool, args, want string
		ok               bool
	}{
		{"shell", `{"command":" ls -l "}`, "ls -l", true},
		{"read_file", `{"path":"/w/a/../b"}`, "b", true},
		{"read_file", `{"path":"/w"}`, ".", true},
		{"read_file", `{"path":"/wx/a"}`, "/wx/a", true},
		{"read_file", `{"path":"../x"}`, "/x", true},
		{"list_dir", `{}`, ".", true},
		{"web_fetch", `{"url":"http://a/b"}`, "http://a/b", true},
		{"other", `{"b":1,"a":[true]}`, `{"a":[true],"b":1}`, true},
		{"read_file", `{"path":1}`, "", false},
		{"read_file", `"x"`, "", false},
	} {
		got, ok := PrimaryArg(tc.tool, json.RawMessage(tc.args), "/w")
		if got != tc.want || ok != tc.ok {
			t.Errorf("PrimaryArg(%s, %s) = %q, %v; want %q, %v", tc.tool, tc.args, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{
		"shell", "shell(git status*)", "write_file(src/**)", "web_fetch(https://x/**)",
		"x(y)", "shell(\\)", "shell(()", "a(b(c))", "read_file({a,b}/[c-d]*)", "t(**?*\\*)",
	} {
		f.Add(s, `{"command":"git status","path":"src/a","url":"https://x/y"}`)
	}
	f.Fuzz(func(t *testing.T, s, args string) {
		p, err := ParsePattern(s)
		if err != nil {
			if errs.CodeOf(err) != errcode.InvalidParams || !errors.Is(err, ErrBadPattern) {
				t.Fatalf("ParsePattern(%q) error %v is not invalid_params/ErrBadPattern", s, err)
			}
			return
		}
		if p.Tool == "" {
			t.Fatalf("ParsePattern(%q) accepted an empty tool name", s)
		}
		again, err := ParsePattern(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %q -> %+v, %v", s, p.String(), again, err)
		}
		// Matching never panics, and a bare tool name matches any args.
		p.Matches(p.Tool, json.RawMessage(args), "/w")
		if p.Glob == "" && !p.Matches(p.Tool, json.RawMessage(args), "/w") {
			t.Fatalf("bare pattern %q did not match a call of its tool", s)
		}
		if p.Matches(p.Tool+"x", json.RawMessage(args), "/w") {
			t.Fatalf("pattern %q matched another tool", s)
		}
	})
}

func FuzzShellGlobNeverSpansControl(f *testing.F) {
	f.Add("git status*", "git status; rm -rf ~")
	f.Add("*", "a && b")
	f.Fuzz(func(t *testing.T, glob, cmd string) {
		// A glob without literal control characters never matches a command
		// holding one: a wildcard cannot swallow it.
		for _, r := range glob {
			if isShellControl(r) || r == '$' {
				return
			}
		}
		has := false
		for _, r := range cmd {
			if isShellControl(r) {
				has = true
			}
		}
		if has && matchSimple(glob, cmd, true) {
			t.Fatalf("glob %q matched %q across a control character", glob, cmd)
		}
	})
}
