package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// openAIServer is a local OpenAI-compatible Chat Completions server that
// streams scripted deltas the way OpenAI does (one SSE event per chunk,
// flushed on its own). The prompt says what to stream:
// "stream n=<deltas> every=<duration> tag=<name>"; each delta's text is
// "d<i> ", so that a client can tell which chunk it got. The server records,
// per tag, when it wrote the first byte and when it sent each delta.
type openAIServer struct {
	URL string
	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	streams map[string]*sentStream
}

// sentStream is what the server recorded of one stream.
type sentStream struct {
	first time.Time   // the first byte of the response body
	sent  []time.Time // when delta i was flushed
	done  chan struct{}
}

var promptRE = regexp.MustCompile(`stream n=(\d+) every=([0-9a-zµ.]+) tag=([A-Za-z0-9_-]+)`)

func startOpenAIServer() (*openAIServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &openAIServer{URL: "http://" + ln.Addr().String() + "/v1", ln: ln, streams: map[string]*sentStream{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *openAIServer) close() { _ = s.srv.Close() }

func (s *openAIServer) stream(tag string) *sentStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[tag]
	if st == nil {
		st = &sentStream{done: make(chan struct{})}
		s.streams[tag] = st
	}
	return st
}

func (s *openAIServer) complete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content any `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	text, _ := json.Marshal(req.Messages[len(req.Messages)-1].Content)
	m := promptRE.FindSubmatch(text)
	if m == nil {
		http.Error(w, `{"error":{"message":"the prompt names no stream","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	n, _ := strconv.Atoi(string(m[1]))
	every, err := time.ParseDuration(string(m[2]))
	if err != nil {
		http.Error(w, `{"error":{"message":"bad every","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	st := s.stream(string(m[3]))
	st.sent = make([]time.Time, n)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	bw := bufio.NewWriterSize(w, 4096)
	head := `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"` + req.Model +
		`","service_tier":"default","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"xyz"}` + "\n\n"
	send := func(chunk string) bool {
		bw.WriteString(chunk)
		if bw.Flush() != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	st.first = time.Now()
	if !send(head + `{"role":"assistant","content":"","refusal":null}` + tail) {
		return
	}
	next := time.Now()
	for i := 0; i < n; i++ {
		if every > 0 {
			next = next.Add(every)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
		st.sent[i] = time.Now()
		if !send(head + `{"content":"d` + strconv.Itoa(i) + ` "}` + tail) {
			return
		}
	}
	send(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"` + req.Model +
		`","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n")
	send(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"` + req.Model +
		`","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+10) + `}}` + "\n\n")
	send("data: [DONE]\n\n")
	close(st.done)
}

// readDirect reads one stream of the server with a plain HTTP client, the
// way the provider would, and returns the time from the first byte of the
// body to the last delta and the deltas seen.
func readDirect(ctx context.Context, url, prompt string) (time.Duration, int, error) {
	body, _ := json.Marshal(map[string]any{"model": "bench", "stream": true,
		"messages": []map[string]any{{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("bench: the model server answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var first, last time.Time
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if first.IsZero() {
			first = time.Now()
		}
		if bytes.HasPrefix(line, []byte("data: {")) && bytes.Contains(line, []byte(`"content":"d`)) {
			n++
			last = time.Now()
		}
	}
	return last.Sub(first), n, sc.Err()
}
