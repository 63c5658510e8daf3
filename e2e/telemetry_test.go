package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// collector is an in-process OTLP/HTTP trace receiver: it decodes the
// protobuf export requests the daemon's exporter posts to /v1/traces.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		c.bad = append(c.bad, fmt.Sprintf("%s %s %s: %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.addLocked(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) addLocked(req *coltracepb.ExportTraceServiceRequest) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
}

// grpcCollector is the same receiver for OTLP over gRPC.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	g.c.addLocked(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startCollector starts an OTLP receiver for protocol and points the
// daemon's exporter at it (the OTEL_* variables, as an operator would).
func startCollector(t *testing.T, protocol string) *collector {
	col := &collector{}
	var endpoint string
	switch protocol {
	case "http/protobuf":
		srv := httptest.NewServer(col)
		t.Cleanup(srv.Close) // after the daemon's stop, which flushes spans
		endpoint = srv.URL
	case "grpc":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, grpcCollector{c: col})
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		endpoint = "http://" + ln.Addr().String() // http: no TLS
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	return col
}

// trace returns the spans of one trace received so far.
func (c *collector) trace(traceID string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if hex.EncodeToString(s.GetTraceId()) == traceID {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until the trace has a span of each name.
func (c *collector) waitSpans(t *testing.T, traceID string, names ...string) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans := c.trace(traceID)
		have := map[string]bool{}
		for _, s := range spans {
			have[s.GetName()] = true
		}
		missing := ""
		for _, n := range names {
			if !have[n] {
				missing = n
			}
		}
		if missing == "" {
			return spans
		}
		if time.Now().After(deadline) {
			c.mu.Lock()
			bad := c.bad
			c.mu.Unlock()
			t.Fatalf("trace %s has no span %q after 60 s; it has %v (bad exports: %v)", traceID, missing, spanNames(spans), bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}

func attrOf(s *tracepb.Span, key string) (any, bool) {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			v := a.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue(), true
			case v.GetDoubleValue() != 0:
				return v.GetDoubleValue(), true
			default:
				return v.GetIntValue(), true
			}
		}
	}
	return nil, false
}

// callTraced is wsClient.Call with a W3C traceparent member in the request.
func callTraced(ctx context.Context, c *wsClient, method string, params any, traceparent string) *errcode.Error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	ch := make(chan frame, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params, "traceparent": traceparent})
	if err := c.conn.WriteMessage(ctx, b); err != nil {
		return errcode.New(errcode.Internal, "write: %v", err)
	}
	select {
	case f := <-ch:
		return f.Error
	case <-ctx.Done():
		return errcode.New(errcode.Internal, "%v", ctx.Err())
	}
}

// TestTraceOfAPromptThatCallsATool: a client call carrying a traceparent
// yields ONE connected trace in an OTLP collector: the JSON-RPC call →
// the facade's gRPC call → the runtime's handler → the turn → the provider
// request → the tool call → its approval wait. REST and gRPC callers'
// traceparent is honoured too.
func TestTraceOfAPromptThatCallsATool(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) { traceOfAPrompt(t, startCollector(t, protocol)) })
	}
}

func traceOfAPrompt(t *testing.T, col *collector) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	id := createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "accept"})

	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if err := callTraced(ctx, c, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, "00-"+traceID+"-"+clientSpan+"-01"); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	if r := findKind(evs, "turn.done")[0]["reason"]; r != "complete" || a.count() != 1 {
		t.Fatalf("turn ended %v after %d approval requests", r, a.count())
	}

	spans := col.waitSpans(t, traceID, "session.prompt", "trellis.v1.SessionService/Prompt", "turn", "provider fake", "tool shell", "approval.wait")
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	// Connected: every span's parent is in the trace, but for the root,
	// whose parent is the client's span.
	roots := 0
	for _, s := range spans {
		parent := hex.EncodeToString(s.GetParentSpanId())
		if parent == clientSpan {
			roots++
			if s.GetName() != "session.prompt" {
				t.Errorf("span %q hangs off the client's span; want only session.prompt", s.GetName())
			}
			continue
		}
		if byID[parent] == nil {
			t.Errorf("span %q has parent %s, which is not in the trace %v", s.GetName(), parent, spanNames(spans))
		}
	}
	if roots != 1 {
		t.Errorf("%d spans hang off the client's span, want 1", roots)
	}
	// The chain: each named span has the next one as an ancestor.
	ancestor := func(s *tracepb.Span, name string) bool {
		for p := byID[hex.EncodeToString(s.GetParentSpanId())]; p != nil; p = byID[hex.EncodeToString(p.GetParentSpanId())] {
			if p.GetName() == name {
				return true
			}
		}
		return false
	}
	find := func(name string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, s := range spans {
			if s.GetName() == name {
				out = append(out, s)
			}
		}
		return out
	}
	approval, tool, turn := find("approval.wait")[0], find("tool shell")[0], find("turn")[0]
	for _, link := range []struct {
		s      *tracepb.Span
		parent string
	}{
		{approval, "tool shell"}, {tool, "turn"}, {turn, "trellis.v1.SessionService/Prompt"}, {turn, "session.prompt"},
	} {
		if !ancestor(link.s, link.parent) {
			t.Errorf("%q is not under %q", link.s.GetName(), link.parent)
		}
	}
	providers := find("provider fake")
	if len(providers) != 2 { // one asks for the tool, one answers after it
		t.Errorf("%d provider spans, want 2", len(providers))
	}
	for _, p := range providers {
		if !ancestor(p, "turn") {
			t.Errorf("provider span not under the turn")
		}
		if v, _ := attrOf(p, "gen_ai.usage.output_tokens"); v == nil || v.(int64) <= 0 {
			t.Errorf("provider span output tokens = %v", v)
		}
		if _, ok := attrOf(p, "trellis.time_to_first_token_ms"); !ok {
			t.Errorf("provider span has no time to first token: %v", p.GetAttributes())
		}
	}
	if v, _ := attrOf(turn, "trellis.turn.outcome"); v != "complete" {
		t.Errorf("turn span outcome = %v", v)
	}
	if v, _ := attrOf(approval, "trellis.approval.outcome"); v != "allowed" {
		t.Errorf("approval span outcome = %v", v)
	}

	// REST: the traceparent header.
	const restTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/v1/session/list", d.HTTPPort()), nil)
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.Header.Set("traceparent", "00-"+restTrace+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("REST session list: %d", resp.StatusCode)
	}
	col.waitSpans(t, restTrace, "HTTP GET", "trellis.v1.SessionService/ListSessions")

	// gRPC: the traceparent metadata.
	const grpcTrace = "6bf92f3577b34da6a3ce929d0e0e4738"
	g := dialGRPC(t, d)
	gctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-"+clientSpan+"-01")
	if err := g.Call(gctx, "session.list", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range col.waitSpans(t, grpcTrace, "trellis.v1.SessionService/ListSessions") {
		if hex.EncodeToString(s.GetParentSpanId()) != clientSpan {
			t.Errorf("gRPC server span's parent = %x, want the caller's %s", s.GetParentSpanId(), clientSpan)
		}
	}
}

// metricName finds the Trellis and gRPC metric names in a PromQL query.
var metricName = regexp.MustCompile(`\b(trellis|grpc_server)_[a-z_]+\b`)

// scrape reads /metrics.
func scrape(t *testing.T, d *daemon.Daemon) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.HTTPPort()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, raw)
	}
	return fams
}

// value is a sample's value (a histogram's count), -1 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// TestMetricsAfterAScriptedTurn scrapes /metrics before and after a turn
// that calls an approved tool, and a job run, and checks every count.
func TestMetricsAfterAScriptedTurn(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx := context.Background()
	id := createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "accept"})

	before := scrape(t, d)
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	var after map[string]*dto.MetricFamily
	// The turn.done event is committed before its counters move: wait for
	// them (they are the last thing the emitter does).
	deadline := time.Now().Add(30 * time.Second)
	for {
		after = scrape(t, d)
		if value(after, "trellis_turns_total", map[string]string{"outcome": "complete"})-value(before, "trellis_turns_total", map[string]string{"outcome": "complete"}) >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	zero := func(v float64) float64 { return max(v, 0) }
	fake := map[string]string{"vendor": "fake"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		delta  float64 // exact; -1: any increase
	}{
		{"trellis_turns_total", map[string]string{"outcome": "complete"}, 1},
		{"trellis_turn_duration_seconds", map[string]string{"outcome": "complete"}, 1},
		{"trellis_turns_total", map[string]string{"outcome": "error"}, 0},
		{"trellis_tool_calls_total", map[string]string{"tool": "shell", "outcome": "ok"}, 1},
		{"trellis_provider_requests_total", fake, 2},
		{"trellis_provider_request_seconds", fake, 2},
		{"trellis_provider_time_to_first_token_seconds", fake, 2},
		{"trellis_provider_errors_total", fake, 0},
		{"trellis_provider_tokens_total", map[string]string{"vendor": "fake", "direction": "output"}, -1},
		{"trellis_provider_tokens_total", map[string]string{"vendor": "fake", "direction": "input"}, -1},
		{"trellis_approval_wait_seconds", map[string]string{"outcome": "allowed"}, 1},
		{"trellis_approvals_pending", nil, 0},
		{"trellis_events_appended_total", nil, float64(len(evs))},
		{"trellis_event_commit_seconds", nil, -1},
		{"trellis_store_errors_total", map[string]string{"op": "append_events"}, 0},
		// The workdir before shell (the session's first: stored) and at the
		// turn's end (ls changed nothing: not stored again).
		{"trellis_checkpoint_seconds", map[string]string{"outcome": "recorded"}, 1},
		{"trellis_checkpoint_seconds", map[string]string{"outcome": "unchanged"}, 1},
		{"trellis_checkpoint_seconds", map[string]string{"outcome": "failed"}, 0},
		{"trellis_subscription_overflows_total", nil, 0},
		{"trellis_slow_clients_total", map[string]string{"action": "fell_behind"}, 0},
		{"trellis_slow_clients_total", map[string]string{"action": "closed"}, 0},
		{"trellis_jsonrpc_requests_total", map[string]string{"method": "session.prompt", "outcome": "ok"}, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_service": "trellis.v1.SessionService", "grpc_method": "Prompt", "grpc_code": "OK"}, 1},
		{"grpc_server_handling_seconds", map[string]string{"grpc_service": "trellis.v1.SessionService", "grpc_method": "Prompt"}, 1},
	} {
		b, a := value(before, tc.name, tc.labels), value(after, tc.name, tc.labels)
		if a < 0 {
			t.Errorf("%s%v is not exposed", tc.name, tc.labels)
			continue
		}
		got := a - zero(b)
		if (tc.delta >= 0 && got != tc.delta) || (tc.delta < 0 && got <= 0) {
			t.Errorf("%s%v moved by %v, want %v", tc.name, tc.labels, got, tc.delta)
		}
	}
	if v := value(after, "trellis_event_subscriptions", nil); v < 1 {
		t.Errorf("trellis_event_subscriptions = %v with a subscribed client", v)
	}

	// Every metric the Grafana dashboard in docs/ queries is exposed.
	dash, err := os.ReadFile(filepath.Join("..", "docs", "grafana", "trellis-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &board); err != nil {
		t.Fatalf("docs/grafana/trellis-dashboard.json: %v", err)
	}
	queried := 0
	for _, p := range board.Panels {
		for _, tg := range p.Targets {
			for _, name := range metricName.FindAllString(tg.Expr, -1) {
				queried++
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if strings.HasSuffix(name, suffix) && after[name] == nil {
						base = strings.TrimSuffix(name, suffix)
					}
				}
				if after[base] == nil {
					t.Errorf("dashboard panel %q queries %s, which /metrics does not expose", p.Title, name)
				}
			}
		}
	}
	if queried < 20 {
		t.Errorf("the dashboard queries only %d metrics", queried)
	}

	// A job run.
	jobs := value(after, "trellis_job_runs_total", map[string]string{"outcome": "ok"})
	job := scheduleJob(t, c, map[string]any{"spec": "@daily", "task": "hello"})
	var run struct {
		Status string `json:"status"`
	}
	if err := c.Call(ctx, "job.runNow", map[string]any{"jobId": job}, &run); err != nil || run.Status != "ok" {
		t.Fatalf("job.runNow: %+v %v", run, err)
	}
	if got := value(scrape(t, d), "trellis_job_runs_total", map[string]string{"outcome": "ok"}) - zero(jobs); got != 1 {
		t.Errorf("trellis_job_runs_total{ok} moved by %v, want 1", got)
	}
}

// TestLogLinesCarryIDs: the daemon's log lines logged within a traced turn
// carry its turn, request and trace ids.
func TestLogLinesCarryIDs(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := createSession(t, c, map[string]any{"workdir": t.TempDir(), "mode": "accept"})
	const traceID = "7bf92f3577b34da6a3ce929d0e0e4739"
	if err := callTraced(ctx, c, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, "00-"+traceID+"-00f067aa0ba902b7-01"); err != nil {
		t.Fatal(err)
	}
	collect(t, c.Events(id), "turn.done", 1)
	raw, err := os.ReadFile(daemon.LogPath(d.Home()))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil || m["msg"] != "approval: asking" || m["sessionId"] != id {
			continue
		}
		found = true
		// Tracing is off in this test: the ids still come from the
		// client's traceparent and the turn.
		if m["traceId"] != traceID || m["turnId"] == nil || m["turnId"] == "" {
			t.Errorf("log line lacks the ids: %s", line)
		}
	}
	if !found {
		t.Fatalf("no approval log line for %s in %s", id, filepath.Base(daemon.LogPath(d.Home())))
	}
}
