package fake

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/trellis-run/trellis/runtime/llm"
)

const (
	// Vendor is the name the fake registers under and reports as Name.
	Vendor = "fake"
	// DefaultModel is the only model the fake lists.
	DefaultModel = "fake-1"
	// DefaultContextWindow is reported when the script sets no contextWindow.
	DefaultContextWindow = 128000
	// wordsPerChunk is how many words each streamed text chunk holds.
	wordsPerChunk = 3
)

//go:embed demo.json
var demoJSON []byte

// Demo returns a fresh copy of the built-in demo script.
func Demo() *Script {
	s, err := Parse(demoJSON)
	if err != nil {
		panic("fake: the embedded demo script is invalid: " + err.Error())
	}
	return s
}

// Open is the Factory of the "fake" vendor: an empty arg plays the demo
// script, any other arg is the path of a script file.
func Open(arg string) (llm.Provider, error) {
	if arg == "" {
		return New(Demo()), nil
	}
	s, err := Load(arg)
	if err != nil {
		return nil, err
	}
	return New(s), nil
}

// Option configures a Provider.
type Option func(*Provider)

// WithCallIDs replaces the generator of tool call ids (for golden tests).
func WithCallIDs(next func() string) Option { return func(p *Provider) { p.newID = next } }

// Provider plays a Script. It implements llm.Provider, llm.ContextWindower and
// llm.ModelLister, and is safe for concurrent use.
type Provider struct {
	script *Script
	newID  func() string

	mu   sync.Mutex
	used []int // plays per step
}

// New returns a provider playing s (the demo when s is nil).
func New(s *Script, opts ...Option) *Provider {
	if s == nil {
		s = Demo()
	}
	p := &Provider{script: s, newID: randomCallID, used: make([]int, len(s.Steps))}
	for _, o := range opts {
		o(p)
	}
	return p
}

func randomCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return "call_" + hex.EncodeToString(b[:])
}

// Name returns "fake".
func (p *Provider) Name() string { return Vendor }

// DefaultModel returns DefaultModel.
func (p *Provider) DefaultModel() string { return DefaultModel }

// Models lists DefaultModel.
func (p *Provider) Models() []string { return []string{DefaultModel} }

// ContextWindow returns the script's contextWindow, or DefaultContextWindow.
func (p *Provider) ContextWindow(string) int {
	if p.script.ContextWindow > 0 {
		return p.script.ContextWindow
	}
	return DefaultContextWindow
}

// Stream chooses the step for req and returns a stream playing it.
func (p *Provider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := p.choose(req.Messages)
	if err != nil {
		return nil, err
	}
	return p.play(ctx, req, st), nil
}

// choose picks the step for a history and counts its use.
func (p *Provider) choose(msgs []llm.Message) (*Step, error) {
	var user, tool string
	afterTool := false
	if n := len(msgs); n > 0 && msgs[n-1].Role == llm.RoleTool && msgs[n-1].ToolResult != nil {
		afterTool, tool = true, msgs[n-1].ToolResult.Name
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			user = strings.ToLower(msgs[i].Text)
			break
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for range 2 {
		i, loop := p.pick(user, tool, afterTool)
		if i >= 0 {
			p.used[i]++
			return &p.script.Steps[i], nil
		}
		if !loop && (!p.script.Repeat || !p.anyUsedUp()) {
			break
		}
		clear(p.used) // the script loops
	}
	if p.script.Default != nil {
		return p.script.Default, nil
	}
	// As snowpea's scripted provider does: a call nothing answers plays an
	// empty answer (the turn ends with no text), not a provider error.
	return &emptyStep, nil
}

// emptyStep is the answer to a call that no step and no default matches.
var emptyStep = Step{Default: true}

// pick returns the step to play: the first candidate (a matching step,
// else a "default": true step) not used up. When every candidate was used
// up, one played once stays: with the top-level repeat, loop is true (the
// script starts over); without it the last such candidate plays again.
// Only candidates whose count ran out fall through to the defaults.
func (p *Provider) pick(user, tool string, afterTool bool) (i int, loop bool) {
	matching := func(st *Step) bool {
		matched := st.Match == "" || strings.Contains(user, strings.ToLower(st.Match))
		return afterTool && st.AfterTool != "" && strings.EqualFold(st.AfterTool, tool) && matched ||
			!afterTool && st.AfterTool == "" && st.Match != "" && matched
	}
	isDefault := func(st *Step) bool { return st.Default }
	for _, candidate := range []func(*Step) bool{matching, isDefault} {
		stays := -1
		for i := range p.script.Steps {
			st := &p.script.Steps[i]
			if !candidate(st) {
				continue
			}
			if !p.usedUp(i) {
				return i, false
			}
			if st.Repeat == Once {
				stays = i
			}
		}
		switch {
		case stays >= 0 && p.script.Repeat:
			return -1, true
		case stays >= 0:
			return stays, false
		}
	}
	return -1, false
}

// usedUp reports whether step i may not be played again: played once, or
// as often as its count allows.
func (p *Provider) usedUp(i int) bool {
	switch r := p.script.Steps[i].Repeat; r {
	case Forever:
		return false
	case Once:
		return p.used[i] > 0
	default:
		return p.used[i] >= int(r)
	}
}

func (p *Provider) anyUsedUp() bool {
	for i := range p.used {
		if p.usedUp(i) {
			return true
		}
	}
	return false
}

// item is one scripted chunk, or the scripted failure, after a wait.
type item struct {
	wait  time.Duration
	chunk llm.Chunk
	err   error
}

func (p *Provider) play(ctx context.Context, req llm.Request, st *Step) *stream {
	var items []item
	out := len(st.Reasoning) + len(st.Text)
	for _, c := range chunkWords(st.Reasoning, wordsPerChunk) {
		items = append(items, item{chunk: llm.Chunk{Kind: llm.ChunkReasoning, Text: c}})
	}
	for _, c := range chunkWords(st.Text, wordsPerChunk) {
		items = append(items, item{chunk: llm.Chunk{Kind: llm.ChunkText, Text: c}})
	}
	if st.Error == "" {
		for _, c := range st.ToolCalls {
			call := llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(`{}`)}
			if call.ID == "" {
				call.ID = p.newID()
			}
			if c.Arguments != nil {
				call.Arguments = append(json.RawMessage(nil), c.Arguments...)
			}
			out += len(call.Name) + len(call.Arguments)
			items = append(items, item{chunk: llm.Chunk{Kind: llm.ChunkToolCall, ToolCall: call}})
		}
	}

	// Spread the delay over the content chunks, or wait once up front.
	total := time.Duration(st.DelaySec * float64(time.Second))
	if n := len(items); n > 0 {
		for i := range items {
			items[i].wait = total / time.Duration(n)
		}
		total = 0
	}

	if st.Error != "" {
		items = append(items, item{wait: total, err: llm.NewError(Vendor, 500, "%s", st.Error)})
		return newStream(ctx, items)
	}
	usage := llm.Usage{InputTokens: llm.EstimateRequestTokens(req), OutputTokens: (out+3)/4 + st.ReasoningTokens, ReasoningTokens: st.ReasoningTokens}
	if u := st.Usage; u != nil {
		if u.Input != nil {
			usage.InputTokens = *u.Input
		}
		if u.Output != nil {
			usage.OutputTokens = *u.Output
		}
		usage.CacheReadTokens, usage.CacheWriteTokens = u.CacheRead, u.CacheWrite
		usage.InputTokens = max(usage.InputTokens, u.CacheRead+u.CacheWrite)
	}
	stop := llm.StopReason(st.StopReason)
	if stop == "" {
		stop = llm.StopEnd
		if len(st.ToolCalls) > 0 {
			stop = llm.StopToolUse
		}
	}
	items = append(items,
		item{wait: total, chunk: llm.Chunk{Kind: llm.ChunkUsage, Usage: usage}},
		item{chunk: llm.Chunk{Kind: llm.ChunkStop, StopReason: stop}})
	return newStream(ctx, items)
}

// chunkWords splits s into pieces of at most n words each, whitespace staying
// with the word before it, so that the pieces add up to s.
func chunkWords(s string, n int) []string {
	var out []string
	start, words, inWord := 0, 0, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && !inWord {
			if words == n {
				out = append(out, s[start:i])
				start, words = i, 0
			}
			words++
		}
		inWord = !space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// stream plays items. Next is for one goroutine; Close may come from any.
type stream struct {
	ctx   context.Context
	items []item
	pos   int
	err   error // sticky failure

	closeOnce sync.Once
	closed    chan struct{}
}

func newStream(ctx context.Context, items []item) *stream {
	return &stream{ctx: ctx, items: items, closed: make(chan struct{})}
}

func (s *stream) Next() (llm.Chunk, error) {
	if s.err != nil {
		return llm.Chunk{}, s.err
	}
	if err := s.ctx.Err(); err != nil {
		s.err = err
		return llm.Chunk{}, err
	}
	select {
	case <-s.closed:
		return llm.Chunk{}, io.EOF
	default:
	}
	if s.pos == len(s.items) {
		return llm.Chunk{}, io.EOF
	}
	it := s.items[s.pos]
	s.pos++
	if it.wait > 0 {
		t := time.NewTimer(it.wait)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			s.err = s.ctx.Err()
			return llm.Chunk{}, s.err
		case <-s.closed:
			return llm.Chunk{}, io.EOF
		case <-t.C:
		}
	}
	if it.err != nil {
		s.err = it.err
		return llm.Chunk{}, it.err
	}
	return it.chunk, nil
}

func (s *stream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
