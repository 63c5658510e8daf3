package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Event is one server-sent event.
type Event struct {
	Name string // the "event:" line; "" sends none (as OpenAI does)
	Data string
}

// Reply is one scripted answer.
type Reply struct {
	Status int               // 0 = 200
	Header map[string]string // extra response headers, e.g. Retry-After
	Body   string            // the body of a reply that is not a stream (errors)
	Events []Event           // the events of a stream, each flushed on its own
	// Hang keeps the stream open after its events until the client goes
	// away (ClientGone is then closed).
	Hang bool
	// Cut drops the connection after the events, without ending the
	// stream: the client sees a connection reset mid-stream.
	Cut bool
	// Hold, when set, stops the stream after its first HoldAfter events
	// until Hold is closed (the rest follow) or the client goes away (the
	// stream ends there): a test decides when a model is mid-answer.
	Hold      <-chan struct{}
	HoldAfter int
}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	At     time.Time
}

// JSON decodes the request body (nil when it is not a JSON object).
func (r Request) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// Server is a scripted vendor endpoint. Each request consumes the next
// reply; with none left it answers 500 with a message saying so.
type Server struct {
	// URL is the server's root, e.g. http://127.0.0.1:1234.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	replies  []Reply
	requests []Request
	arrived  chan struct{} // signalled on each request
	gone     chan struct{}
	goneOnce sync.Once

	capacity    int // most requests served at once; 0 = no bound
	inFlight    int
	maxInFlight int
	refused     int
}

// SetCapacity makes the server answer a request that arrives while n are
// being served with 429 and Retry-After: 1, as a vendor's concurrency limit
// does, without consuming a reply; 0 takes the bound away.
func (s *Server) SetCapacity(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capacity = n
}

// Load reports the most requests the server was serving at once, and how
// many it refused for want of capacity.
func (s *Server) Load() (maxInFlight, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight, s.refused
}

// NewServer starts a server playing replies; it stops when t ends.
func NewServer(t testing.TB, replies ...Reply) *Server {
	s := &Server{replies: replies, gone: make(chan struct{}), arrived: make(chan struct{}, 1024)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Close stops the server, cutting open streams.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Enqueue adds replies to play.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, replies...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ClientGone is closed when the client of a hanging stream went away.
func (s *Server) ClientGone() <-chan struct{} { return s.gone }

// WaitRequests waits until n requests arrived, or fails t after timeout.
func (s *Server) WaitRequests(t testing.TB, n int, timeout time.Duration) []Request {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if got := s.Requests(); len(got) >= n {
			return got
		}
		select {
		case <-s.arrived:
		case <-deadline:
			t.Fatalf("providertest: %d requests within %v, want %d", len(s.Requests()), timeout, n)
		}
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	var reply Reply
	switch {
	case s.capacity > 0 && s.inFlight > s.capacity:
		s.refused++
		reply = Reply{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": "1"},
			Body: `{"error":{"message":"providertest: too many requests at once","type":"requests","code":"rate_limit_exceeded"}}`}
	case len(s.replies) > 0:
		reply, s.replies = s.replies[0], s.replies[1:]
	default:
		reply = Reply{Status: http.StatusInternalServerError,
			Body: `{"error":{"message":"providertest: no reply scripted for this request","type":"server_error"}}`}
	}
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}

	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	if reply.Events == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, reply.Body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	flusher, _ := w.(http.Flusher)
	for i, ev := range reply.Events {
		if reply.Hold != nil && i == reply.HoldAfter {
			select {
			case <-reply.Hold:
			case <-r.Context().Done():
				return
			}
		}
		if ev.Name != "" {
			fmt.Fprintf(w, "event: %s\n", ev.Name)
		}
		fmt.Fprintf(w, "data: %s\n\n", ev.Data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	switch {
	case reply.Hang:
		<-r.Context().Done()
		s.goneOnce.Do(func() { close(s.gone) })
	case reply.Cut:
		panic(http.ErrAbortHandler) // drops the connection, unlogged
	}
}
