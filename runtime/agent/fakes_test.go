package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

// event is one emitted event, its payload as the wire will carry it.
type event struct {
	Kind string
	JSON string
}

func (e event) String() string { return e.Kind + " " + e.JSON }

// recorder is an in-memory Emitter.
type recorder struct {
	mu      sync.Mutex
	events  []event
	failOn  string // a kind whose Emit fails
	failErr error  // its error (nil: errEmit)
	// failShown records the failing event anyway, as the event log does
	// with an event it holds (sent from memory, stored later).
	failShown bool
	onEmit    func(kind string) // called after each recorded event
}

var errEmit = errors.New("event log unavailable")

func (r *recorder) Emit(ctx context.Context, kind string, payload any) error {
	if ctx.Err() != nil {
		return fmt.Errorf("emit %s with a cancelled context: %w", kind, ctx.Err())
	}
	failed := kind == r.failOn
	if failed && !r.failShown {
		return r.failure()
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.events = append(r.events, event{kind, string(data)})
	hook := r.onEmit
	r.mu.Unlock()
	if hook != nil {
		hook(kind)
	}
	if failed {
		return r.failure()
	}
	return nil
}

func (r *recorder) failure() error {
	if r.failErr != nil {
		return r.failErr
	}
	return errEmit
}

func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

func (r *recorder) kinds() []string {
	var out []string
	for _, e := range r.all() {
		out = append(out, e.Kind)
	}
	return out
}

// payloads returns the JSON payloads of one kind.
func (r *recorder) payloads(kind string) []string {
	var out []string
	for _, e := range r.all() {
		if e.Kind == kind {
			out = append(out, e.JSON)
		}
	}
	return out
}

func (r *recorder) last() event {
	all := r.all()
	if len(all) == 0 {
		return event{}
	}
	return all[len(all)-1]
}

// toolFunc is one fake tool.
type toolFunc func(ctx context.Context, args json.RawMessage, progress func(agent.Progress)) agent.ToolResult

// fakeTools is an in-memory Tools.
type fakeTools struct {
	funcs map[string]toolFunc
	mu    sync.Mutex
	ran   []agent.ToolCall
}

func (t *fakeTools) Specs(context.Context) []llm.ToolSpec {
	var specs []llm.ToolSpec
	for name := range t.funcs {
		specs = append(specs, llm.ToolSpec{Name: name, Description: "a fake tool", InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return specs
}

func (t *fakeTools) Run(ctx context.Context, call agent.ToolCall, progress func(agent.Progress)) agent.ToolResult {
	t.mu.Lock()
	t.ran = append(t.ran, call)
	t.mu.Unlock()
	f, ok := t.funcs[call.Name]
	if !ok {
		return agent.ToolResult{Error: "unknown tool " + call.Name}
	}
	return f(ctx, call.Args, progress)
}

func okTool(output string) toolFunc {
	return func(context.Context, json.RawMessage, func(agent.Progress)) agent.ToolResult {
		return agent.ToolResult{OK: true, Output: output}
	}
}

// gateFunc is an in-memory Gate.
type gateFunc func(ctx context.Context, call agent.ToolCall) error

func (g gateFunc) Authorize(ctx context.Context, call agent.ToolCall) error { return g(ctx, call) }

func allowAll(context.Context, agent.ToolCall) error { return nil }

// failingHistory fails every Append after the first ok ones.
type failingHistory struct {
	*agent.MemoryHistory
	ok int
}

var errDisk = errors.New("disk full")

func (h *failingHistory) Append(ctx context.Context, msgs ...llm.Message) error {
	if h.ok == 0 {
		return errDisk
	}
	h.ok--
	return h.MemoryHistory.Append(ctx, msgs...)
}

// cannedProvider answers each call with the next canned response: chunks,
// then err (io.EOF when nil). It has no optional capabilities.
type cannedProvider struct {
	mu        sync.Mutex
	responses []canned
	requests  []llm.Request
}

type canned struct {
	chunks []llm.Chunk
	err    error
}

func (p *cannedProvider) Name() string { return "canned" }

func (p *cannedProvider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, req)
	if len(p.responses) == 0 {
		return nil, errors.New("no canned response left")
	}
	c := p.responses[0]
	p.responses = p.responses[1:]
	return &cannedStream{c: c}, nil
}

type cannedStream struct{ c canned }

func (s *cannedStream) Next() (llm.Chunk, error) {
	if len(s.c.chunks) == 0 {
		if s.c.err != nil {
			return llm.Chunk{}, s.c.err
		}
		return llm.Chunk{}, io.EOF
	}
	c := s.c.chunks[0]
	s.c.chunks = s.c.chunks[1:]
	return c, nil
}

func (s *cannedStream) Close() error { return nil }

// fixture builds a Loop on a fake script with deterministic call ids.
type fixture struct {
	loop    *agent.Loop
	events  *recorder
	history *agent.MemoryHistory
	tools   *fakeTools
}

func newFixture(t *testing.T, script string, tools map[string]toolFunc, gate gateFunc) *fixture {
	t.Helper()
	s, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	p := fake.New(s, fake.WithCallIDs(func() string { n++; return fmt.Sprintf("call_%d", n) }))
	if gate == nil {
		gate = allowAll
	}
	f := &fixture{events: &recorder{}, history: agent.NewMemoryHistory(), tools: &fakeTools{funcs: tools}}
	f.loop = &agent.Loop{Provider: p, Tools: f.tools, Gate: gate, Emitter: f.events, History: f.history}
	return f
}

func (f *fixture) run(t *testing.T, prompt string) agent.Result {
	t.Helper()
	res, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: prompt})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// checkKinds compares the emitted kinds with want, one per line.
func checkKinds(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	got := r.kinds()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("event kinds:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func historyJSON(t *testing.T, h agent.History) string {
	t.Helper()
	msgs, err := h.Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	return strings.Join(lines, "\n")
}
