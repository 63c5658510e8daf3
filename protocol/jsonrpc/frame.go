package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/strict"
)

// jsonSpace is JSON's whitespace (not Unicode's: \v is not JSON).
const jsonSpace = " \t\r\n"

// nullID is the id of replies to frames whose id cannot be known.
var nullID = json.RawMessage("null")

// message is one decoded entry of a frame: a request, a notification, a
// response to a server → client request, or an invalid entry.
type message struct {
	// id is the raw id as sent (numbers keep their spelling); nil when the
	// entry has no id (a notification).
	id     json.RawMessage
	method string
	params json.RawMessage // nil when absent or null
	// trace is the W3C trace context a client may send with a request
	// (top-level "traceparent" and "tracestate" string members).
	trace TraceContext
	// inBatch: the entry came in a batch, whose replies go out together.
	inBatch bool

	isResponse bool
	result     json.RawMessage
	errObj     json.RawMessage // the response's error member, nil when absent or null

	// invalid says why the entry is not a valid request. An invalid-request
	// error (-32600) is always answered (with id null when unknown); an
	// invalid-params error is answered only when the entry has an id.
	invalid *Error
}

// decodeFrame splits a frame into messages. A frame-level error (not JSON,
// empty or oversized batch) is returned as err and answered with id null.
func decodeFrame(data []byte, maxBatch int) (msgs []*message, batch bool, err *Error) {
	data = bytes.Trim(data, jsonSpace)
	if !utf8.Valid(data) {
		// Frames are text; a reply echoing these bytes would not be.
		return nil, false, errcode.ParseError("the frame is not valid UTF-8")
	}
	if !json.Valid(data) {
		return nil, false, errcode.ParseError(syntaxDetail(data))
	}
	if data[0] != '[' {
		return []*message{decodeMessage(data)}, false, nil
	}
	var entries []json.RawMessage
	if e := json.Unmarshal(data, &entries); e != nil {
		return nil, false, errcode.ParseError(e.Error())
	}
	switch {
	case len(entries) == 0:
		return nil, true, errcode.InvalidRequest("empty batch")
	case len(entries) > maxBatch:
		return nil, true, errcode.InvalidRequest(fmt.Sprintf("batch of %d entries exceeds the limit of %d", len(entries), maxBatch))
	}
	msgs = make([]*message, len(entries))
	for i, raw := range entries {
		msgs[i] = decodeMessage(raw)
	}
	return msgs, true, nil
}

// syntaxDetail describes why data is not JSON.
func syntaxDetail(data []byte) string {
	if len(data) == 0 {
		return "empty frame"
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err.Error()
	}
	return "invalid JSON"
}

// decodeMessage decodes one JSON value (valid JSON) as a message.
func decodeMessage(raw json.RawMessage) *message {
	m := &message{}
	if raw[0] != '{' {
		m.invalid = errcode.InvalidRequest("a request must be a JSON object")
		return m
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		m.invalid = errcode.InvalidRequest("a request must be a JSON object")
		return m
	}
	if id, ok := obj["id"]; ok {
		switch id[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			m.id = id
		default:
			m.invalid = errcode.InvalidRequest("id must be a string, a number or null")
			return m
		}
	}
	var version string
	if v, ok := obj["jsonrpc"]; !ok || json.Unmarshal(v, &version) != nil || version != "2.0" {
		m.invalid = errcode.InvalidRequest(`jsonrpc must be "2.0"`)
		return m
	}
	method, hasMethod := obj["method"]
	if !hasMethod {
		result, hasResult := obj["result"]
		errObj, hasError := obj["error"]
		if !hasResult && !hasError {
			m.invalid = errcode.InvalidRequest("a request must have a method")
			return m
		}
		m.isResponse = true
		m.result = result
		if hasError && string(errObj) != "null" {
			m.errObj = errObj
		}
		return m
	}
	if method[0] != '"' || json.Unmarshal(method, &m.method) != nil {
		m.invalid = errcode.InvalidRequest("method must be a string")
		return m
	}
	// Ignored when not strings, as W3C asks of an invalid traceparent.
	if v, ok := obj["traceparent"]; ok && v[0] == '"' {
		_ = json.Unmarshal(v, &m.trace.Traceparent)
		if v, ok := obj["tracestate"]; ok && v[0] == '"' {
			_ = json.Unmarshal(v, &m.trace.Tracestate)
		}
	}
	if p, ok := obj["params"]; ok && string(p) != "null" {
		if p[0] != '{' {
			m.invalid = errcode.NewInvalidParams(fmt.Sprintf("params of %s must be an object, got %s", m.method, strict.DescribeJSON(p)))
			return m
		}
		m.params = p
	}
	return m
}

// responseFrame builds {"jsonrpc":"2.0","id":…,"result":…} or the error form.
func responseFrame(id json.RawMessage, result []byte, err *Error) []byte {
	if id == nil {
		id = nullID
	}
	b := make([]byte, 0, 48+len(id)+len(result))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	if err != nil {
		b = append(b, `,"error":`...)
		b = append(b, encodeError(err)...)
	} else {
		b = append(b, `,"result":`...)
		if len(result) == 0 {
			result = nullID
		}
		b = append(b, result...)
	}
	return append(b, '}')
}

// encodeError renders an error object, making sure data.code is present.
func encodeError(e *Error) []byte {
	out := *e
	if out.StringCode() == "" {
		data := make(map[string]any, len(e.Data)+1)
		for k, v := range e.Data {
			data[k] = v
		}
		data["code"] = codeForNumeric(e.Code)
		out.Data = data
	}
	b, err := marshalNoEscape(&out)
	if err != nil {
		// Data held something JSON cannot carry: keep code and message.
		b, _ = marshalNoEscape(&Error{Code: out.Code, Message: out.Message, Data: map[string]any{"code": out.StringCode()}})
	}
	return b
}

func codeForNumeric(n int) string {
	switch n {
	case errcode.NumericParseError, errcode.NumericInvalidRequest:
		return errcode.InvalidParams
	}
	for _, c := range errcode.Codes() {
		if num, _ := errcode.Numeric(c); num == n && n != -32000 {
			return c
		}
	}
	return errcode.Internal
}

// marshalNoEscape is json.Marshal without HTML escaping and without the
// trailing newline of json.Encoder.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
