package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// StreamOptions configure Stream.
type StreamOptions struct {
	Daemon
	// Deltas is how many deltas the full-speed stream carries (default 50,000).
	Deltas int
	// PacedSessions stream at once in the paced phase (default 20), each
	// PacedRate deltas/s (default 100) for PacedSec seconds (default 5).
	PacedSessions int
	PacedRate     int
	PacedSec      float64
}

func (o *StreamOptions) defaults() {
	orDefault(&o.Deltas, 50_000)
	orDefault(&o.PacedSessions, 20)
	orDefault(&o.PacedRate, 100)
	orDefault(&o.PacedSec, 5)
}

// Stream measures a model's stream through the real openai provider: a local
// OpenAI-compatible server streams Deltas deltas, read directly by a plain
// HTTP client (the baseline, best of three reads) and through the daemon
// over WebSocket, the NDJSON event stream and gRPC Subscribe; each rate runs
// from the model's first byte to the client's last delta (a delta is one
// model chunk, counted in the text the client received: the daemon may merge
// chunks into fewer message.delta events). Then PacedSessions sessions stream
// at PacedRate deltas/s over WebSocket: the added latency (client receipt −
// the server's send of the same delta), the daemon's CPU per delta and its
// RSS per extra streaming session (against one paced session alone).
func Stream(ctx context.Context, opts StreamOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "stream", Title: "a model's stream through the openai provider vs reading it directly",
		Params: []Param{{"deltas", opts.Deltas}, {"paced_sessions", opts.PacedSessions},
			{"paced_rate", opts.PacedRate}, {"paced_sec", opts.PacedSec}}}
	srv, h, driver, stop, err := startModelDaemon(ctx, opts.Daemon, &r)
	if err != nil {
		return r, err
	}
	defer stop()

	// Warm up the provider and the daemon once.
	if _, _, err := streamOverGRPC(ctx, h, driver, srv, fmt.Sprintf("stream n=%d every=0 tag=warm", 200), "warm"); err != nil {
		return r, err
	}

	prompt := func(tag string) string { return fmt.Sprintf("stream n=%d every=0 tag=%s", opts.Deltas, tag) }
	// The baseline is the best of three direct reads: one read of a fast
	// stream is short, and a scheduling hiccup would flatter the ratios.
	h.logf("stream: direct reads of %d deltas", opts.Deltas)
	var directRate float64
	for i := range 3 {
		direct, n, err := readDirect(ctx, srv.URL, prompt(fmt.Sprintf("direct-%d", i)))
		if err != nil {
			return r, err
		}
		if n != opts.Deltas {
			return r, fmt.Errorf("bench: the direct read saw %d deltas, want %d", n, opts.Deltas)
		}
		directRate = max(directRate, float64(n)/direct.Seconds())
	}
	r.figure("direct_deltas_per_s", directRate, "deltas/s", "plain HTTP client reading the model server (best of 3)")
	// A delta is one chunk the model server sent ("d<i> "). The daemon may
	// merge chunks that wait for the same commit into one message.delta
	// event, so each client counts the chunks in the text it received —
	// every one, once, in order, or the bench fails — and the rates and
	// CPU figures are per model chunk; the events that carried them are
	// reported beside.
	rates := map[string]float64{}
	for _, tr := range []struct {
		name string
		run  func(tag string) (time.Duration, chunkCount, error)
	}{
		{"ws", func(tag string) (time.Duration, chunkCount, error) {
			return streamOverWS(ctx, h, srv, prompt(tag), tag)
		}},
		{"ndjson", func(tag string) (time.Duration, chunkCount, error) {
			return streamOverNDJSON(ctx, h, driver, srv, prompt(tag), tag)
		}},
		{"grpc", func(tag string) (time.Duration, chunkCount, error) {
			return streamOverGRPC(ctx, h, driver, srv, prompt(tag), tag)
		}},
	} {
		h.logf("stream: %d deltas over %s", opts.Deltas, tr.name)
		cpu0, _ := procCPU(h.pid)
		took, got, err := tr.run("full-" + tr.name)
		if err != nil {
			return r, err
		}
		cpu1, _ := procCPU(h.pid)
		if err := got.check(opts.Deltas); err != nil {
			return r, fmt.Errorf("bench: %s: %w", tr.name, err)
		}
		rate := float64(opts.Deltas) / took.Seconds()
		rates[tr.name] = rate
		r.figure(tr.name+"_deltas_per_s", rate, "deltas/s", tr.name+": model chunks, model's first byte → client's last chunk")
		r.figure(tr.name+"_ratio", rate/directRate, tr.name+"/direct", tr.name+" ÷ direct read")
		r.figure(tr.name+"_cpu_us_per_delta", float64(cpu1-cpu0)/float64(time.Microsecond)/float64(opts.Deltas), "µs", "daemon CPU per model chunk at full speed, "+tr.name)
		r.figure(tr.name+"_delta_events", float64(got.events), "events", "message.delta events that carried the chunks, "+tr.name)
	}
	r.figure("ws_grpc_ratio", rates["ws"]/rates["grpc"], "ws/grpc", "WebSocket ÷ gRPC Subscribe, one stream")

	// Paced: one session alone (the RSS baseline), then all of them.
	per := int(float64(opts.PacedRate) * opts.PacedSec)
	every := time.Second / time.Duration(opts.PacedRate)
	h.logf("stream: 1 paced session, then %d, %d deltas each at %v", opts.PacedSessions, per, every)
	one, err := pacedRun(ctx, h, srv, 1, per, every, "p1")
	if err != nil {
		return r, err
	}
	all, err := pacedRun(ctx, h, srv, opts.PacedSessions, per, every, "pn")
	if err != nil {
		return r, err
	}
	r.figure("paced_delta_events", float64(all.events), "events", fmt.Sprintf("message.delta events that carried the %d paced chunks", len(all.delays)))
	r.figure("paced_p50_ms", ms(percentile(all.delays, 50)), "ms", "added latency p50 (client receipt − model send)")
	r.figure("paced_p99_ms", ms(percentile(all.delays, 99)), "ms", "added latency p99")
	r.figure("paced1_p50_ms", ms(percentile(one.delays, 50)), "ms", "added latency p50, one paced session alone")
	r.figure("paced1_p99_ms", ms(percentile(one.delays, 99)), "ms", "added latency p99, one paced session alone")
	r.figure("paced1_cpu_us_per_delta", float64(one.cpu)/float64(time.Microsecond)/float64(len(one.delays)), "µs", "daemon CPU per model chunk, one paced session alone")
	r.figure("paced_cpu_us_per_delta", float64(all.cpu)/float64(time.Microsecond)/float64(len(all.delays)), "µs", "daemon CPU per model chunk, paced")
	r.figure("paced_cpu_cores", all.cpu.Seconds()/all.took.Seconds(), "cores", "daemon CPU during the paced phase")
	if opts.PacedSessions > 1 {
		r.figure("rss_per_extra_session_kib", float64(all.peakRSS-one.peakRSS)/1024/float64(opts.PacedSessions-1), "KiB", "daemon RSS per extra streaming session")
	}
	r.figure("paced_rss_mib", float64(all.peakRSS)/(1<<20), "MiB", "daemon peak RSS with every paced session streaming")
	r.target("ws_ratio", ">=", 0.6)
	r.target("ndjson_ratio", ">=", 0.5)
	r.target("grpc_ratio", ">=", 0.5)
	r.target("paced_p50_ms", "<=", 2)
	r.target("paced_p99_ms", "<=", 10)
	r.target("paced1_cpu_us_per_delta", "<=", 150)
	r.target("paced_cpu_us_per_delta", "<=", 50)
	r.target("ws_cpu_us_per_delta", "<=", 30)
	if opts.PacedSessions > 1 {
		r.target("rss_per_extra_session_kib", "<=", 1024)
	}
	r.finish()
	return r, nil
}

// startModelDaemon starts the local OpenAI-compatible server and a daemon
// whose openai provider reads it, recording the daemon (and its flags) in
// r; stop ends both.
func startModelDaemon(ctx context.Context, d Daemon, r *Result) (srv *openAIServer, h *daemonHandle, driver *grpc.ClientConn, stop func(), err error) {
	if srv, err = startOpenAIServer(); err != nil {
		return nil, nil, nil, nil, err
	}
	h, err = d.startWith(ctx, nil, "openai:bench-model", []string{"OPENAI_BASE_URL=" + srv.URL, "OPENAI_API_KEY=sk-bench"})
	if err != nil {
		srv.close()
		return nil, nil, nil, nil, err
	}
	stop = func() {
		h.close()
		srv.close()
	}
	if driver, err = h.drive(r); err != nil {
		stop()
		return nil, nil, nil, nil, err
	}
	if len(d.Flags) > 0 {
		r.param("daemon_flags", strings.Join(d.Flags, " "))
	}
	if h.pid == os.Getpid() {
		r.note("the daemon runs in the bench's process: CPU and RSS figures include the bench's clients and model server")
	}
	return srv, h, driver, stop, nil
}

// deltaIndexes reads the indexes i of the "d<i> " chunks a delta's text
// holds (one, unless the daemon merged chunks), from its raw JSON object;
// nil for any other event.
func deltaIndexes(raw []byte) []int {
	i := bytes.Index(raw, []byte(`"text":"`))
	if i < 0 {
		return nil
	}
	text := raw[i+len(`"text":"`):]
	if j := bytes.IndexByte(text, '"'); j >= 0 {
		text = text[:j]
	}
	return chunkIndexes(text)
}

// chunkCount is what one client received of a full-speed stream: the
// model chunks found in the text of its message.delta events, and those
// events.
type chunkCount struct {
	chunks, events int
	err            error
}

// add notes one message.delta event's raw JSON.
func (c *chunkCount) add(raw []byte) {
	c.events++
	for _, k := range deltaIndexes(raw) {
		if k != c.chunks && c.err == nil {
			c.err = fmt.Errorf("chunk d%d arrived where d%d was due", k, c.chunks)
		}
		c.chunks++
	}
}

// check says whether exactly the n chunks arrived, in order.
func (c *chunkCount) check(n int) error {
	if c.err != nil {
		return c.err
	}
	if c.chunks != n {
		return fmt.Errorf("the message.delta events carried %d chunks, want %d", c.chunks, n)
	}
	return nil
}

// sinceFirst is the time from the model's first byte of tag's stream to t.
func sinceFirst(srv *openAIServer, tag string, t time.Time) time.Duration {
	return t.Sub(srv.stream(tag).first)
}

func streamOverWS(ctx context.Context, h *daemonHandle, srv *openAIServer, prompt, tag string) (time.Duration, chunkCount, error) {
	var last time.Time
	var got chunkCount
	done := make(chan struct{})
	var once sync.Once
	c, err := h.dialWS(ctx, func(ev eventRef, at time.Time) {
		switch ev.Kind {
		case "message.delta":
			last = at
			got.add(ev.raw)
		case "turn.done":
			once.Do(func() { close(done) })
		}
	})
	if err != nil {
		return 0, got, err
	}
	defer c.close()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "session.create", map[string]any{"workdir": h.workdir}, &created); err != nil {
		return 0, got, err
	}
	if err := c.call(ctx, "session.prompt", map[string]any{"sessionId": created.SessionID, "text": prompt}, nil); err != nil {
		return 0, got, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, got, ctx.Err()
	}
	return sinceFirst(srv, tag, last), got, nil
}

// streamOver creates a session, subscribes to it with subscribe (before
// the prompt, so that nothing is missed), prompts it with text and counts
// the message.delta events the subscription's next returns until
// turn.done.
func streamOver(ctx context.Context, h *daemonHandle, conn *grpc.ClientConn, srv *openAIServer, text, tag string,
	subscribe func(ctx context.Context, sid string) (next func() (kind string, raw []byte, err error), err error)) (time.Duration, chunkCount, error) {
	var got chunkCount
	sid, err := h.createSession(ctx, conn)
	if err != nil {
		return 0, got, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, err := subscribe(sctx, sid)
	if err != nil {
		return 0, got, err
	}
	if _, err := prompt(ctx, conn, sid, text); err != nil {
		return 0, got, err
	}
	var last time.Time
	for {
		kind, raw, err := next()
		if err != nil {
			return 0, got, err
		}
		switch kind {
		case "message.delta":
			last = time.Now()
			got.add(raw)
		case "turn.done":
			return sinceFirst(srv, tag, last), got, nil
		}
	}
}

func streamOverGRPC(ctx context.Context, h *daemonHandle, conn *grpc.ClientConn, srv *openAIServer, text, tag string) (time.Duration, chunkCount, error) {
	return streamOver(ctx, h, conn, srv, text, tag, func(ctx context.Context, sid string) (func() (string, []byte, error), error) {
		stream, err := trellisv1.NewSessionServiceClient(conn).Subscribe(ctx, &trellisv1.SubscribeRequest{SessionId: sid, AfterSeq: -1, Typed: true})
		if err != nil {
			return nil, err
		}
		if _, err := stream.Recv(); err != nil { // caughtUp
			return nil, err
		}
		var raw []byte
		return func() (string, []byte, error) {
			resp, err := stream.Recv()
			if err != nil {
				return "", nil, err
			}
			kind := resp.GetEvent().GetKind()
			if kind == "message.delta" {
				raw = strconv.AppendQuote(append(raw[:0], `{"text":`...), resp.GetEvent().GetMessageDelta().GetText())
			}
			return kind, raw, nil
		}, nil
	})
}

func streamOverNDJSON(ctx context.Context, h *daemonHandle, conn *grpc.ClientConn, srv *openAIServer, text, tag string) (time.Duration, chunkCount, error) {
	return streamOver(ctx, h, conn, srv, text, tag, func(ctx context.Context, sid string) (func() (string, []byte, error), error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://127.0.0.1:"+strconv.Itoa(h.httpPort)+"/v1/sessions/"+sid+"/events?follow=true", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		// The body closes when streamOver's context ends.
		context.AfterFunc(ctx, func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("bench: event stream: %s", resp.Status)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		return func() (string, []byte, error) {
			for sc.Scan() {
				line := sc.Bytes()
				switch {
				case bytes.Contains(line, []byte(`"kind":"message.delta"`)):
					return "message.delta", line, nil
				case bytes.Contains(line, []byte(`"kind":"turn.done"`)):
					return "turn.done", line, nil
				}
			}
			return "", nil, fmt.Errorf("bench: the event stream ended before turn.done: %v", sc.Err())
		}, nil
	})
}

// pacedResult is one paced phase.
type pacedResult struct {
	delays  []time.Duration
	events  int // message.delta events that carried the chunks
	cpu     time.Duration
	took    time.Duration
	peakRSS int64
}

// pacedRun streams n sessions at once over WebSocket (one connection each),
// per deltas each, one every `every`.
func pacedRun(ctx context.Context, h *daemonHandle, srv *openAIServer, n, per int, every time.Duration, tagPrefix string) (pacedResult, error) {
	var res pacedResult
	type sess struct {
		c      *wsClient
		id     string
		tag    string
		got    []time.Time
		events int
		done   chan struct{}
		once   sync.Once
	}
	ss := make([]*sess, n)
	for i := range ss {
		s := &sess{tag: fmt.Sprintf("%s-%d", tagPrefix, i), got: make([]time.Time, per), done: make(chan struct{})}
		c, err := h.dialWS(ctx, func(ev eventRef, at time.Time) {
			switch ev.Kind {
			case "message.delta":
				s.events++
				for _, k := range deltaIndexes(ev.raw) {
					if k < len(s.got) {
						s.got[k] = at
					}
				}
			case "turn.done":
				s.once.Do(func() { close(s.done) })
			}
		})
		if err != nil {
			return res, err
		}
		defer c.close()
		s.c = c
		var created struct {
			SessionID string `json:"sessionId"`
		}
		if err := c.call(ctx, "session.create", map[string]any{"workdir": h.workdir}, &created); err != nil {
			return res, err
		}
		s.id = created.SessionID
		ss[i] = s
	}
	cpu0, _ := procCPU(h.pid)
	start := time.Now()
	for _, s := range ss {
		if err := s.c.call(ctx, "session.prompt", map[string]any{"sessionId": s.id, "text": fmt.Sprintf("stream n=%d every=%v tag=%s", per, every, s.tag)}, nil); err != nil {
			return res, err
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := readRSS(h.pid); err == nil && rss > res.peakRSS {
				res.peakRSS = rss
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	for _, s := range ss {
		select {
		case <-s.done:
		case <-ctx.Done():
			close(stop)
			return res, ctx.Err()
		}
	}
	res.took = time.Since(start)
	close(stop)
	wg.Wait()
	cpu1, _ := procCPU(h.pid)
	res.cpu = cpu1 - cpu0
	for _, s := range ss {
		res.events += s.events
		sent := srv.stream(s.tag).sent
		for k, at := range s.got {
			if at.IsZero() || k >= len(sent) || sent[k].IsZero() {
				return res, fmt.Errorf("bench: session %s: delta %d never arrived", s.id, k)
			}
			res.delays = append(res.delays, at.Sub(sent[k]))
		}
	}
	return res, nil
}
