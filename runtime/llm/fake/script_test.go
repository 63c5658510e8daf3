package fake_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, wantMsg string
	}{
		{"unknown top-level field", `{"steps":[{"default":true}],"loop":true}`, `unknown field "loop"`},
		{"unknown step field", `{"steps":[{"default":true},{"mach":"hi"}]}`, `step 2: unknown field "mach"`},
		{"unknown tool call field", `{"steps":[{"match":"x","tool_calls":[{"name":"a","args":{}}]}]}`, `step 1: tool_calls[0]: unknown field "args"`},
		{"field names are case-sensitive", `{"steps":[{"MATCH":"x"}]}`, `step 1: unknown field "MATCH"`},
		{"case-sensitive top level", `{"Steps":[{"default":true}]}`, `unknown field "Steps"`},
		{"unknown usage field", `{"steps":[{"default":true,"usage":{"in":1}}]}`, `step 1: usage: unknown field "in"`},
		{"wrong type", `{"steps":[{"match":"x","delaySec":"1"}]}`, `step 1: json: cannot unmarshal string`},
		{"not an object", `[1]`, `cannot unmarshal array`},
		{"trailing data", `{"steps":[{"default":true}]} {}`, `unexpected data after the JSON value`},
		{"no steps", `{"steps":[]}`, `at least one step`},
		{"missing steps", `{}`, `at least one step`},
		{"null step", `{"steps":[null]}`, `step 1: needs one of`},
		{"no condition", `{"steps":[{"text":"hi"}]}`, `step 1: needs one of "match", "after_tool" or "default"`},
		{"default with match", `{"steps":[{"default":true,"match":"x"}]}`, `cannot be combined`},
		{"negative delay", `{"steps":[{"default":true,"delaySec":-1}]}`, `"delaySec" must be between 0 and 3600`},
		{"huge delay", `{"steps":[{"default":true,"delaySec":1e9}]}`, `"delaySec" must be between`},
		{"bad stop reason", `{"steps":[{"default":true,"stopReason":"done"}]}`, `"stopReason" "done" must be`},
		{"negative repeat", `{"steps":[{"default":true,"repeat":-2}]}`, `"repeat" must not be negative`},
		{"repeat a string", `{"steps":[{"default":true,"repeat":"yes"}]}`, `"repeat" must be true, false or a count`},
		{"thinking and reasoning", `{"steps":[{"default":true,"thinking":"a","reasoning":"b"}]}`, `"thinking" and "reasoning"`},
		{"negative reasoning tokens", `{"steps":[{"default":true,"reasoningTokens":-1}]}`, `"reasoningTokens" must not be negative`},
		{"reasoning tokens above the output", `{"steps":[{"default":true,"reasoningTokens":9,"usage":{"output":3}}]}`, `cannot be fewer`},
		{"negative usage", `{"steps":[{"default":true,"usage":{"input":-1}}]}`, `"usage" counts`},
		{"negative cache read", `{"steps":[{"default":true,"usage":{"cacheRead":-1}}]}`, `"usage" counts`},
		{"cached tokens above the input", `{"steps":[{"default":true,"usage":{"input":10,"cacheRead":8,"cacheWrite":3}}]}`, `cannot be fewer than their sum`},
		{"error with tool calls", `{"steps":[{"default":true,"error":"x","tool_calls":[{"name":"a"}]}]}`, `a step with "error"`},
		{"tool call without name", `{"steps":[{"default":true,"tool_calls":[{"arguments":{}}]}]}`, `tool_calls[0]: "name" is required`},
		{"arguments not an object", `{"steps":[{"default":true,"tool_calls":[{"name":"a","arguments":[1]}]}]}`, `"arguments" must be a JSON object`},
		{"negative window", `{"steps":[{"default":true}],"contextWindow":-5}`, `"contextWindow"`},
		{"default not an object", `{"default":"hi"}`, `default: must be an object`},
		{"default with match", `{"default":{"match":"x","text":"y"}}`, `cannot have "match"`},
		{"default with repeat", `{"default":{"text":"y","repeat":2}}`, `cannot have "repeat"`},
		{"default unknown field", `{"default":{"txt":"y"}}`, `default: unknown field "txt"`},
		{"top-level repeat is a bool", `{"steps":[{"default":true}],"repeat":3}`, `cannot unmarshal number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fake.Parse([]byte(tt.in))
			if !errors.Is(err, fake.ErrInvalidScript) || errs.CodeOf(err) != errcode.InvalidParams {
				t.Fatalf("Parse error = %v (code %q), want ErrInvalidScript / invalid_params", err, errs.CodeOf(err))
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Parse error = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestParseNormalizes(t *testing.T) {
	s, err := fake.Parse([]byte(`{"steps":[{"match":"x","tool_calls":[
		{"name":"a","arguments":{ "k" : [1, 2] }},
		{"name":"b","arguments":null},
		{"name":"c"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	calls := s.Steps[0].ToolCalls
	if string(calls[0].Arguments) != `{"k":[1,2]}` || calls[1].Arguments != nil || calls[2].Arguments != nil {
		t.Errorf("arguments = %s, %s, %s", calls[0].Arguments, calls[1].Arguments, calls[2].Arguments)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"steps":[{"default":true,"text":"ok"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"steps":[{"default":true,"txt":"ok"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := fake.Load(good); err != nil || s.Steps[0].Text != "ok" {
		t.Fatalf("Load(good) = %+v, %v", s, err)
	}
	_, err := fake.Load(bad)
	if !errors.Is(err, fake.ErrInvalidScript) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `"txt"`) {
		t.Errorf("Load(bad) error = %v, want ErrInvalidScript naming the file and the field", err)
	}
	_, err = fake.Load(filepath.Join(dir, "missing.json"))
	if !errors.Is(err, fs.ErrNotExist) || errs.CodeOf(err) != errcode.InvalidParams {
		t.Errorf("Load(missing) error = %v, want fs.ErrNotExist / invalid_params", err)
	}
}

func TestDemoParses(t *testing.T) {
	s := fake.Demo()
	if len(s.Steps) == 0 {
		t.Fatal("demo has no steps")
	}
	s.Steps[0].Text = "changed"
	if fake.Demo().Steps[0].Text == "changed" {
		t.Error("Demo returns a shared script")
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// survives a JSON round trip unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"steps":[{"match":"hello","text":"Hi!","reasoning":"r","tool_calls":[{"name":"shell","arguments":{"command":"ls"}}],"delaySec":0.5,"stopReason":"stop","usage":{"input":10,"output":5},"repeat":2}]}`))
	f.Add([]byte(`{"steps":[{"after_tool":"shell","match":"x","text":"done"},{"default":true,"error":"boom"}],"repeat":true,"contextWindow":10}`))
	f.Add([]byte(`{"steps":[{"default":true,"tool_calls":[{"id":"c","name":"a","arguments":null}]}]}`))
	f.Add([]byte(`{"steps":[null]}`))
	f.Add([]byte(`{"default":{"text":"fallback"},"repeat":true}`))
	f.Add([]byte(`{"steps":[{"match":"a"}],"default":{"reasoning":"r","error":"e"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fake.Parse(data)
		if err != nil {
			if !errors.Is(err, fake.ErrInvalidScript) {
				t.Fatalf("error %v does not wrap ErrInvalidScript", err)
			}
			return
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // keep "&" in arguments byte-identical
		err = enc.Encode(s)
		out := buf.Bytes()
		if err != nil {
			t.Fatalf("marshal accepted script: %v", err)
		}
		again, err := fake.Parse(out)
		if err != nil {
			t.Fatalf("reparse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip changed the script:\n%+v\n%+v", s, again)
		}
	})
}
