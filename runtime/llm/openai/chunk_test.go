package openai

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/trellis-run/trellis/runtime/llm"
)

// leanCases are chunks as servers send them, and the odd shapes decodeLean
// must either decode exactly like encoding/json or leave to it.
var leanCases = []struct {
	data string
	fast bool // decodeLean takes it
}{
	{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"xyz"}`, true},
	{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}]}`, true},
	{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`, true},
	{`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}}`, true},
	{`{"choices":[{"index":0,"delta":{"reasoning_content":"think"}},{"index":1,"delta":{"content":"other"}}]}`, true},
	{`{"choices":[{"index":0,"delta":{"reasoning":"r","content":null}}]}`, true},
	{` { "choices" : [ { "index" : 0 , "delta" : { "content" : "a\nb \"q\" \\ \/ \b\f\r\t \u00e9 \ud83d\ude00 \ud800 x \udc00" } } ] } `, true},
	{`{"choices":[{"index":0,"delta":{"content":"ünïcødé ✓ 😀"}}]}`, true},
	{"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bad \xff utf8 \xe2\x82\"}}]}", true},
	{`{"choices":[null,{"index":-0,"delta":null,"finish_reason":null}]}`, true},
	{`{"choices":null,"usage":{}}`, true},
	{`{"choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":[{"token":"x","logprob":-0.5e-3,"bytes":[120],"top_logprobs":[]}]}}],"x":[true,false,null,1.5E+2,-0,"s",{}]}`, true},
	{`{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"index":1}]}`, false}, // duplicate choices
	{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"ls","arguments":"{}"}}]}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"tool_calls":null,"content":"t"}}]}`, true},
	{`{"Choices":[{"index":0,"delta":{"content":"case"}}]}`, false},
	{`{"choices":[{"INDEX":1,"delta":{"Content":"case"}}]}`, false},
	{`{"choi\u0063es":[]}`, false},
	{`{"error":{"message":"boom","type":"server_error"}}`, false},
	{`{"choices":[{"index":0.0}]}`, false},
	{`{"choices":[{"index":"0"}]}`, false},
	{`{"choices":[{"index":99999999999999999999}]}`, false},
	{`{"choices":[{"index":0,"delta":{"content":5}}]}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"x"}}],}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"x"}}]} trailing`, false},
	{`{"choices":[{"index":01}]}`, false},
	{`{"x":"bad \q escape"}`, false},
	{"{\"x\":\"raw \n newline\"}", false},
	{`null`, false},
	{`[]`, false},
	{``, false},
	{`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, true},
	{`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20,"completion_tokens_details":{"reasoning_tokens":12,"audio_tokens":0}}}`, true},
	{`{"usage":{"completion_tokens_details":null}}`, true},
	{`{"usage":{"completion_tokens_details":{"Reasoning_Tokens":3}}}`, false},
	{`{"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0}}}`, true},
	{`{"usage":{"prompt_tokens_details":null}}`, true},
	{`{"usage":{"prompt_tokens_details":{"Cached_Tokens":3}}}`, false},
	{`{"choices":[{"index":0,"delta":{"content":"a"},"delta":{"refusal":"b"}}]}`, true},
}

func TestDecodeLeanMatchesEncodingJSON(t *testing.T) {
	for _, tc := range leanCases {
		var fast leanChunk
		ok := decodeLean([]byte(tc.data), &fast)
		if ok != tc.fast {
			t.Errorf("decodeLean(%s) took it: %v, want %v", tc.data, ok, tc.fast)
		}
		checkLean(t, []byte(tc.data), ok, fast)
	}
}

// checkLean: whatever decodeLean takes, encoding/json decodes without an
// error into the same value.
func checkLean(t *testing.T, data []byte, ok bool, fast leanChunk) {
	t.Helper()
	if !ok {
		return
	}
	var want leanChunk
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("decodeLean took %q, which encoding/json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("decodeLean(%q)\n= %+v\nencoding/json\n= %+v", data, fast, want)
	}
}

func FuzzDecodeLean(f *testing.F) {
	for _, tc := range leanCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast leanChunk
		checkLean(t, data, decodeLean(data, &fast), fast)
	})
}

// TestReasoningTokens: the usage's completion_tokens_details.reasoning_tokens
// is the Usage's ReasoningTokens.
func TestReasoningTokens(t *testing.T) {
	s := &stream{}
	var c leanChunk
	if !decodeLean([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":40,"completion_tokens_details":{"reasoning_tokens":32}}}`), &c) {
		t.Fatal("decodeLean refused a usage chunk")
	}
	s.absorb(c)
	if *s.usage != (llm.Usage{InputTokens: 3, OutputTokens: 40, ReasoningTokens: 32}) {
		t.Fatalf("usage %+v", *s.usage)
	}
}

// TestCachedTokens: the usage's prompt_tokens_details.cached_tokens is the
// Usage's CacheReadTokens, whichever decoder takes the chunk.
func TestCachedTokens(t *testing.T) {
	data := []byte(`{"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":100}}}`)
	want := llm.Usage{InputTokens: 2006, OutputTokens: 300, ReasoningTokens: 100, CacheReadTokens: 1920}
	var lean, general leanChunk
	if !decodeLean(data, &lean) {
		t.Fatal("decodeLean refused a usage chunk")
	}
	if err := json.Unmarshal(data, &general); err != nil {
		t.Fatal(err)
	}
	for _, c := range []leanChunk{lean, general} {
		s := &stream{}
		s.absorb(c)
		if *s.usage != want {
			t.Fatalf("usage %+v, want %+v", *s.usage, want)
		}
	}
}
