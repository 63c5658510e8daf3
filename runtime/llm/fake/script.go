package fake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// ErrInvalidScript is wrapped by the errors of Parse and Load when the script
// does not follow the format (code invalid_params).
var ErrInvalidScript = errors.New("invalid fake script")

// MaxDelaySec bounds a step's delaySec.
const MaxDelaySec = 3600

// Script is a parsed script; see the package documentation for the format.
// A Script must not be modified once a Provider plays it.
type Script struct {
	Steps         []Step `json:"steps"`
	Repeat        bool   `json:"repeat,omitempty"`
	ContextWindow int    `json:"contextWindow,omitempty"`
	// Default is the top-level "default" object of the snowpea fixture
	// format: the answer to a call no step matches, after the steps' own
	// "default": true steps.
	Default *Step `json:"default,omitempty"`
}

// Step is one scripted model answer.
type Step struct {
	Match      string     `json:"match,omitempty"`
	AfterTool  string     `json:"after_tool,omitempty"`
	Default    bool       `json:"default,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
	Text       string     `json:"text,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	DelaySec   float64    `json:"delaySec,omitempty"`
	StopReason string     `json:"stopReason,omitempty"`
	Usage      *Usage     `json:"usage,omitempty"`
	Error      string     `json:"error,omitempty"`
	Repeat     Repeat     `json:"repeat,omitempty"`
	// Thinking is the snowpea fixture format's name of Reasoning (one of
	// the two may be given); validate moves it there.
	Thinking string `json:"thinking,omitempty"`
	// ReasoningTokens is how many of the output tokens the usage reports
	// as spent reasoning.
	ReasoningTokens int `json:"reasoningTokens,omitempty"`
}

// Repeat is a step's "repeat": how many times it may be played. Once
// (absent or false) is the zero value; Forever (true, or 0 as a count)
// never runs out; a count N > 0 allows N plays.
type Repeat int

// The plays of a step that is not a count.
const (
	Once    Repeat = 0
	Forever Repeat = -1
)

// UnmarshalJSON reads true, false or a count (0 = without limit).
func (r *Repeat) UnmarshalJSON(b []byte) error {
	switch s := string(bytes.TrimSpace(b)); s {
	case "true":
		*r = Forever
		return nil
	case "false", "null":
		*r = Once
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New(`"repeat" must be true, false or a count`)
	}
	switch {
	case n < 0:
		return errors.New(`"repeat" must not be negative`)
	case n == 0:
		*r = Forever
	default:
		*r = Repeat(n)
	}
	return nil
}

// ToolCall is a scripted tool call. Arguments is nil (meaning {}) or a
// compact JSON object.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage overrides the estimated token counts of a step.
type Usage struct {
	Input  *int `json:"input,omitempty"`
	Output *int `json:"output,omitempty"`
	// CacheRead and CacheWrite are the input tokens the step reports as
	// read from and written to a prompt cache (part of Input).
	CacheRead  int `json:"cacheRead,omitempty"`
	CacheWrite int `json:"cacheWrite,omitempty"`
}

// Load reads and parses the script file at path.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &errs.Error{Code: errcode.InvalidParams, Msg: fmt.Sprintf("fake script: %v", err), Err: err}
	}
	s, err := Parse(data)
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			e.Msg = fmt.Sprintf("fake script %s: %s", path, e.Msg)
		}
		return nil, err
	}
	return s, nil
}

// Parse decodes and validates a script strictly.
func Parse(data []byte) (*Script, error) {
	var top struct {
		Steps         []json.RawMessage `json:"steps"`
		Repeat        bool              `json:"repeat"`
		ContextWindow int               `json:"contextWindow"`
		Default       json.RawMessage   `json:"default"`
	}
	if err := checkKeys(data, reflect.TypeFor[Script]()); err != nil {
		return nil, invalid("%v", err)
	}
	if err := decodeStrict(data, &top); err != nil {
		return nil, invalid("%v", err)
	}
	hasDefault := len(top.Default) > 0 && string(top.Default) != "null"
	if len(top.Steps) == 0 && !hasDefault {
		return nil, invalid(`"steps" must list at least one step (or the script needs a top-level "default")`)
	}
	if top.ContextWindow < 0 {
		return nil, invalid(`"contextWindow" must not be negative`)
	}
	s := &Script{Repeat: top.Repeat, ContextWindow: top.ContextWindow, Steps: make([]Step, len(top.Steps))}
	if hasDefault {
		d, err := parseDefault(top.Default)
		if err != nil {
			return nil, invalid("default: %v", err)
		}
		s.Default = d
	}
	for i, raw := range top.Steps {
		if err := checkStepKeys(raw); err != nil {
			return nil, invalid("step %d: %v", i+1, err)
		}
		if err := decodeStrict(raw, &s.Steps[i]); err != nil {
			return nil, invalid("step %d: %v", i+1, err)
		}
		if err := s.Steps[i].validate(); err != nil {
			return nil, invalid("step %d: %v", i+1, err)
		}
	}
	return s, nil
}

// parseDefault decodes the top-level "default" object: a step that answers
// whatever no step matched, so it takes neither "match" nor "after_tool".
func parseDefault(raw json.RawMessage) (*Step, error) {
	if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
		return nil, errors.New(`must be an object such as {"text": "..."}`)
	}
	if err := checkStepKeys(raw); err != nil {
		return nil, err
	}
	var st Step
	if err := decodeStrict(raw, &st); err != nil {
		return nil, err
	}
	if st.Match != "" || st.AfterTool != "" {
		return nil, errors.New(`the top-level default cannot have "match" or "after_tool"`)
	}
	if st.Repeat != Once {
		return nil, errors.New(`the top-level default cannot have "repeat": it answers every unmatched call`)
	}
	st.Default = true
	if err := st.validate(); err != nil {
		return nil, err
	}
	return &st, nil
}

func invalid(format string, args ...any) error {
	return &errs.Error{Code: errcode.InvalidParams, Msg: fmt.Sprintf(format, args...), Err: ErrInvalidScript}
}

// checkStepKeys checks the field names of a step and of its nested objects.
func checkStepKeys(raw json.RawMessage) error {
	if err := checkKeys(raw, reflect.TypeFor[Step]()); err != nil {
		return err
	}
	var st struct {
		ToolCalls []json.RawMessage `json:"tool_calls"`
		Usage     json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(raw, &st) != nil {
		return nil // the typed decode reports it
	}
	for j, c := range st.ToolCalls {
		if err := checkKeys(c, reflect.TypeFor[ToolCall]()); err != nil {
			return fmt.Errorf("tool_calls[%d]: %w", j, err)
		}
	}
	if err := checkKeys(st.Usage, reflect.TypeFor[Usage]()); err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	return nil
}

// checkKeys reports the first field of the JSON object raw (in sorted order)
// that is not exactly a json name of struct t. encoding/json alone would
// accept "MATCH" for "match"; a script must spell its fields exactly.
func checkKeys(raw json.RawMessage, t reflect.Type) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil // not an object: the typed decode reports it
	}
	known := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		known[name] = true
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	return nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

var stopReasons = map[string]bool{"": true, "stop": true, "tool_use": true, "length": true}

func (st *Step) validate() error {
	cond := st.Match != "" || st.AfterTool != ""
	switch {
	case st.Default && cond:
		return errors.New(`"default" cannot be combined with "match" or "after_tool"`)
	case !st.Default && !cond:
		return errors.New(`needs one of "match", "after_tool" or "default": true`)
	}
	if math.IsNaN(st.DelaySec) || st.DelaySec < 0 || st.DelaySec > MaxDelaySec {
		return fmt.Errorf(`"delaySec" must be between 0 and %d`, MaxDelaySec)
	}
	if !stopReasons[st.StopReason] {
		return fmt.Errorf(`"stopReason" %q must be "stop", "tool_use" or "length"`, st.StopReason)
	}
	if u := st.Usage; u != nil && (u.Input != nil && *u.Input < 0 || u.Output != nil && *u.Output < 0 || u.CacheRead < 0 || u.CacheWrite < 0) {
		return errors.New(`"usage" counts must not be negative`)
	}
	if u := st.Usage; u != nil && u.Input != nil && *u.Input < u.CacheRead+u.CacheWrite {
		return errors.New(`"usage.cacheRead" and "usage.cacheWrite" are part of the input tokens: "usage.input" cannot be fewer than their sum`)
	}
	if st.Thinking != "" {
		if st.Reasoning != "" {
			return errors.New(`"thinking" and "reasoning" name the same text: give one`)
		}
		st.Reasoning, st.Thinking = st.Thinking, ""
	}
	if st.ReasoningTokens < 0 {
		return errors.New(`"reasoningTokens" must not be negative`)
	}
	if u := st.Usage; u != nil && u.Output != nil && *u.Output < st.ReasoningTokens {
		return errors.New(`"reasoningTokens" are part of the output tokens: "usage.output" cannot be fewer`)
	}
	if st.Error != "" && (len(st.ToolCalls) > 0 || st.StopReason != "") {
		return errors.New(`a step with "error" cannot have "tool_calls" or "stopReason"`)
	}
	if len(st.ToolCalls) == 0 {
		st.ToolCalls = nil // "tool_calls": [] means none
	}
	for j := range st.ToolCalls {
		c := &st.ToolCalls[j]
		if c.Name == "" {
			return fmt.Errorf(`tool_calls[%d]: "name" is required`, j)
		}
		args := bytes.TrimSpace(c.Arguments)
		if len(args) == 0 || string(args) == "null" {
			c.Arguments = nil
			continue
		}
		if args[0] != '{' {
			return fmt.Errorf(`tool_calls[%d]: "arguments" must be a JSON object`, j)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, args); err != nil {
			return fmt.Errorf(`tool_calls[%d]: "arguments": %v`, j, err)
		}
		c.Arguments = buf.Bytes()
	}
	return nil
}
