package jsonrpc

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeFrame: decoding any frame never panics; a frame that is not JSON
// is a parse error; every error is -32700/-32600/-32602 with data.code
// invalid_params; requests carry a string method and object params; ids are
// kept byte for byte from the frame; every reply built from an entry is
// valid JSON.
func FuzzDecodeFrame(f *testing.F) {
	seeds := []string{
		``, ` `, `{`, `[]`, `[ ]`, `null`, `1`, `"x"`, `{}`, `[1,2]`, `[[]]`,
		`{"jsonrpc":"2.0","id":1,"method":"m"}`,
		`{"jsonrpc":"2.0","id":1.0,"method":"m","params":{"a":[1,{"b":null}]}}`,
		`{"jsonrpc":"2.0","id":"\u0041","method":"m","params":null}`,
		`{"jsonrpc":"2.0","id":null,"method":"m","params":[1]}`,
		`{"jsonrpc":"2.0","method":"m"}`, `{"jsonrpc":"2.0","method":null}`, `{"jsonrpc":"2.0","method":5}`,
		`{"jsonrpc":"1.0","id":1,"method":"m"}`, `{"jsonrpc":"2.0","id":{},"method":"m"}`, `{"jsonrpc":"2.0","id":true}`,
		`{"jsonrpc":"2.0","id":"s1","result":{}}`, `{"jsonrpc":"2.0","id":"s1","error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":"s1","error":null}`, `{"jsonrpc":"2.0","id":4}`,
		`[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","method":"n"},3,{"jsonrpc":"2.0","id":"s2","result":1}]`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", `{"JSONRPC":"2.0","ID":1,"METHOD":"m"}`,
		`{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"m"}`, `{"jsonrpc":"2\u002e0","id":-0,"method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=b"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","traceparent":7,"tracestate":[]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	const maxBatch = 5
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, batch, ferr := decodeFrame(data, maxBatch)
		if ferr != nil {
			if ferr.StringCode() != "invalid_params" || (ferr.Code != -32700 && ferr.Code != -32600) {
				t.Fatalf("frame error %d/%s", ferr.Code, ferr.StringCode())
			}
			if !json.Valid(responseFrame(nullID, nil, ferr)) {
				t.Fatal("invalid error frame")
			}
			if (!json.Valid(data) || !utf8.Valid(data)) && ferr.Code != -32700 {
				t.Fatalf("non-JSON frame gave %d", ferr.Code)
			}
			return
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("non-JSON or non-UTF-8 frame accepted: %q", data)
		}
		if batch && (len(msgs) == 0 || len(msgs) > maxBatch) || !batch && len(msgs) != 1 {
			t.Fatalf("batch=%v with %d messages", batch, len(msgs))
		}
		for _, m := range msgs {
			if m.id != nil {
				if !bytes.Contains(data, m.id) {
					t.Fatalf("id %s is not the frame's bytes", m.id)
				}
				switch m.id[0] {
				case '{', '[', 't', 'f':
					t.Fatalf("id of kind %c accepted", m.id[0])
				}
			}
			switch {
			case m.invalid != nil:
				if m.invalid.StringCode() != "invalid_params" || (m.invalid.Code != -32600 && m.invalid.Code != -32602) {
					t.Fatalf("entry error %d/%s", m.invalid.Code, m.invalid.StringCode())
				}
				if !json.Valid(responseFrame(m.id, nil, m.invalid)) {
					t.Fatalf("invalid reply frame for id %s", m.id)
				}
			case m.isResponse:
				if m.method != "" || m.params != nil {
					t.Fatal("response with a method")
				}
			default:
				if m.params != nil && m.params[0] != '{' {
					t.Fatalf("params %s accepted", m.params)
				}
				if !json.Valid(responseFrame(m.id, []byte(`{"ok":true}`), nil)) {
					t.Fatalf("invalid result frame for id %s", m.id)
				}
				if !utf8.Valid(responseFrame(m.id, []byte(`{}`), nil)) {
					t.Fatalf("reply frame is not UTF-8 for id %q", m.id)
				}
			}
		}
	})
}

func TestDecodeFrameKeepsIDBytes(t *testing.T) {
	for _, id := range []string{`1`, `1.0`, `-0`, `1e3`, `1E+3`, `123456789012345678901234567890`, `"a\u0062"`, `""`, `null`} {
		msgs, _, err := decodeFrame([]byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"m"}`), 100)
		if err != nil || msgs[0].invalid != nil {
			t.Fatalf("%s: %v %v", id, err, msgs[0].invalid)
		}
		if string(msgs[0].id) != id {
			t.Fatalf("id %s decoded as %s", id, msgs[0].id)
		}
	}
}

func TestDecodeFrameKeysAreCaseSensitive(t *testing.T) {
	msgs, _, err := decodeFrame([]byte(`{"jsonrpc":"2.0","id":1,"METHOD":"m"}`), 100)
	if err != nil || msgs[0].invalid == nil || msgs[0].invalid.Code != -32600 {
		t.Fatalf("METHOD taken for method: %+v %v", msgs[0], err)
	}
}

func TestDecodeFrameRejectsInvalidUTF8AndNonJSONSpace(t *testing.T) {
	for _, frame := range []string{"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"m\"}", "\"0\"\v", "\v{}"} {
		_, _, err := decodeFrame([]byte(frame), 100)
		if err == nil || err.Code != -32700 {
			t.Fatalf("%q: got %v, want a parse error", frame, err)
		}
	}
	if _, _, err := decodeFrame([]byte(" \t\r\n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n"), 100); err != nil {
		t.Fatalf("JSON whitespace refused: %v", err)
	}
}
