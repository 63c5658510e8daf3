package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/gjson"
)

// chunkReader reads the chunks of a Chat Completions stream as the SDK's
// ssestream.Stream[leanChunk] does — the SDK's SSE decoder frames the
// events, "[DONE]" ends the stream, an event with a top-level "error" is an
// *ssestream.StreamError, anything else decodes into a leanChunk with
// encoding/json's semantics — but decodes the usual chunk with decodeLean,
// one pass over its bytes, instead of gjson's look for "error" plus
// encoding/json's validation and reflective decoding. Whatever decodeLean
// does not take (tool call fragments, an "error", odd types, invalid JSON)
// goes the SDK's way.
type chunkReader struct {
	dec    ssestream.Decoder
	cur    leanChunk
	err    error
	done   bool
	closed bool
}

func (r *chunkReader) Next() bool {
	if r.done || r.dec == nil {
		return false
	}
	if !r.dec.Next() {
		r.finish(r.dec.Err())
		return false
	}
	ev := r.dec.Event()
	if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
		r.finish(nil)
		return false
	}
	r.cur = leanChunk{}
	if !strings.HasPrefix(ev.Type, "thread.") && decodeLean(ev.Data, &r.cur) {
		return true
	}
	// The SDK's way (ssestream.Stream.Next).
	if ep := gjson.GetBytes(ev.Data, "error"); ep.Exists() {
		r.finish(&ssestream.StreamError{Message: fmt.Sprintf("received error while streaming: %s", ep.String()), Event: ev})
		return false
	}
	r.cur = leanChunk{}
	if strings.HasPrefix(ev.Type, "thread.") {
		return true // an Assistants event: no chunk fields at its top level
	}
	if err := json.Unmarshal(ev.Data, &r.cur); err != nil {
		r.finish(err)
		return false
	}
	return true
}

func (r *chunkReader) finish(err error) {
	r.err, r.done = err, true
	_ = r.Close()
}

func (r *chunkReader) Current() leanChunk { return r.cur }

func (r *chunkReader) Err() error { return r.err }

func (r *chunkReader) Close() error {
	if r.closed || r.dec == nil {
		return nil
	}
	r.closed = true
	return r.dec.Close()
}

// decodeLean decodes data into c (zero on entry) as json.Unmarshal would
// and reports true, or reports false for anything it does not handle
// itself: invalid JSON, a value of an unexpected type, a number that is not
// a plain integer, a key that matches a field only case-insensitively or
// holds an escape, a top-level "error", tool call fragments. Then c must be
// decoded again the general way.
func decodeLean(data []byte, c *leanChunk) bool {
	d := leanDecoder{b: data}
	seenChoices := false
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if seenChoices {
				return false // encoding/json would decode into the first one's elements
			}
			seenChoices = true
			return d.choices(&c.Choices)
		case "usage":
			if d.null() {
				c.Usage = nil
				return true
			}
			if c.Usage == nil {
				c.Usage = new(leanUsage)
			}
			u := c.Usage
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "prompt_tokens":
					return d.int(&u.PromptTokens)
				case "completion_tokens":
					return d.int(&u.CompletionTokens)
				case "completion_tokens_details":
					if d.null() {
						return true
					}
					return d.object(func(key []byte) bool {
						if string(key) == "reasoning_tokens" {
							return d.int(&u.CompletionDetails.ReasoningTokens)
						}
						return d.other(key, "reasoning_tokens")
					})
				case "prompt_tokens_details":
					if d.null() {
						return true
					}
					return d.object(func(key []byte) bool {
						if string(key) == "cached_tokens" {
							return d.int(&u.PromptDetails.CachedTokens)
						}
						return d.other(key, "cached_tokens")
					})
				}
				return d.other(key, "prompt_tokens", "completion_tokens", "completion_tokens_details", "prompt_tokens_details")
			})
		}
		return d.other(key, "choices", "usage", "error")
	})
	if !ok {
		return false
	}
	d.ws()
	return d.i == len(d.b)
}

func (d *leanDecoder) choices(out *[]leanChoice) bool {
	if d.null() {
		*out = nil
		return true
	}
	if !d.expect('[') {
		return false
	}
	list := (*out)[:0]
	d.ws()
	if d.peek() == ']' {
		d.i++
		*out = list
		if *out == nil {
			*out = []leanChoice{}
		}
		return true
	}
	for {
		var ch leanChoice
		ok := d.null() || d.object(func(key []byte) bool {
			switch string(key) {
			case "index":
				return d.int(&ch.Index)
			case "finish_reason":
				return d.str(&ch.FinishReason)
			case "delta":
				if d.null() {
					return true
				}
				return d.object(func(key []byte) bool {
					switch string(key) {
					case "content":
						return d.str(&ch.Delta.Content)
					case "refusal":
						return d.str(&ch.Delta.Refusal)
					case "reasoning_content":
						return d.str(&ch.Delta.ReasoningContent)
					case "reasoning":
						return d.str(&ch.Delta.Reasoning)
					case "tool_calls":
						return d.null() // fragments go the general way
					}
					return d.other(key, "content", "refusal", "reasoning_content", "reasoning", "tool_calls")
				})
			}
			return d.other(key, "index", "finish_reason", "delta")
		})
		if !ok {
			return false
		}
		list = append(list, ch)
		d.ws()
		switch d.peek() {
		case ',':
			d.i++
			continue
		case ']':
			d.i++
			*out = list
			return true
		}
		return false
	}
}

// leanDecoder is a strict JSON scanner over one chunk.
type leanDecoder struct {
	b     []byte
	i     int
	depth int
}

const maxLeanDepth = 64 // deeper values go the general way

func (d *leanDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *leanDecoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *leanDecoder) expect(c byte) bool {
	d.ws()
	if d.peek() != c {
		return false
	}
	d.i++
	return true
}

// null consumes a null literal if one comes next.
func (d *leanDecoder) null() bool {
	d.ws()
	if bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
		return true
	}
	return false
}

// object scans an object, calling field for each key with the scanner at
// its value; field must consume the value.
func (d *leanDecoder) object(field func(key []byte) bool) bool {
	return d.container('{', '}', func() bool {
		d.ws()
		key, plain, ok := d.rawString()
		return ok && plain && d.expect(':') && field(key)
	})
}

// container scans an object or array from its open to its close byte,
// calling item for each member; item must consume the member.
func (d *leanDecoder) container(open, close byte, item func() bool) bool {
	if !d.expect(open) {
		return false
	}
	d.depth++
	if d.depth > maxLeanDepth {
		return false
	}
	defer func() { d.depth-- }()
	d.ws()
	if d.peek() == close {
		d.i++
		return true
	}
	for {
		if !item() {
			return false
		}
		d.ws()
		switch d.peek() {
		case ',':
			d.i++
		case close:
			d.i++
			return true
		default:
			return false
		}
	}
}

// other skips the value of a key the caller does not read, unless the key
// would match one of known in encoding/json's case-insensitive matching.
func (d *leanDecoder) other(key []byte, known ...string) bool {
	for _, k := range known {
		if len(k) == len(key) && strings.EqualFold(k, string(key)) {
			return false
		}
	}
	return d.skip()
}

// rawString scans a string and returns its bytes between the quotes;
// plain says it holds no escape and only ASCII.
func (d *leanDecoder) rawString() (raw []byte, plain, ok bool) {
	if d.peek() != '"' {
		return nil, false, false
	}
	start := d.i + 1
	plain = true
	for i := start; i < len(d.b); i++ {
		switch c := d.b[i]; {
		case c == '"':
			d.i = i + 1
			return d.b[start:i], plain, true
		case c == '\\':
			plain = false
			i++
			if i >= len(d.b) {
				return nil, false, false
			}
			switch d.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d.b) || !isHex4(d.b[i+1:i+5]) {
					return nil, false, false
				}
				i += 4
			default:
				return nil, false, false
			}
		case c < ' ':
			return nil, false, false
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return nil, false, false
}

// str decodes a string (null leaves *out as it is, as encoding/json does).
func (d *leanDecoder) str(out *string) bool {
	if d.null() {
		return true
	}
	raw, plain, ok := d.rawString()
	if !ok {
		return false
	}
	if plain {
		*out = string(raw)
	} else {
		*out = unquote(raw)
	}
	return true
}

// int decodes an integer that fits in int64 (null leaves *out as it is).
func (d *leanDecoder) int(out *int64) bool {
	if d.null() {
		return true
	}
	start := d.i
	if d.peek() == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.i - digits
	if n == 0 || n > 18 || (n > 1 && d.b[digits] == '0') {
		return false // none, too long to be sure it fits, or a leading zero
	}
	switch d.peek() {
	case '.', 'e', 'E':
		return false
	}
	var v int64
	for _, c := range d.b[digits:d.i] {
		v = v*10 + int64(c-'0')
	}
	if digits > start {
		v = -v
	}
	*out = v
	return true
}

// skip scans any JSON value strictly.
func (d *leanDecoder) skip() bool {
	d.ws()
	switch c := d.peek(); {
	case c == '{':
		return d.object(func([]byte) bool { return d.skip() })
	case c == '[':
		return d.container('[', ']', d.skip)
	case c == '"':
		_, _, ok := d.rawString()
		return ok
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return false
}

func (d *leanDecoder) literal(s string) bool {
	if !bytes.HasPrefix(d.b[d.i:], []byte(s)) {
		return false
	}
	d.i += len(s)
	return true
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *leanDecoder) number() bool {
	if d.peek() == '-' {
		d.i++
	}
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case c >= '1' && c <= '9':
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
		}
	default:
		return false
	}
	digits := func() bool {
		n := d.i
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
		}
		return d.i > n
	}
	if d.peek() == '.' {
		d.i++
		if !digits() {
			return false
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if !digits() {
			return false
		}
	}
	return true
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unquote decodes the bytes of a string rawString accepted, as
// encoding/json does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func unquote(s []byte) string {
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			i++
			switch e := s[i]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(s[i+1:])
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
						r2 = hex4(s[i+3:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
		}
	}
	return string(out)
}
