package facade

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-run/trellis/facade/mcpserver"
	"github.com/trellis-run/trellis/facade/methods"
	"github.com/trellis-run/trellis/facade/rest"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
	"github.com/trellis-run/trellis/version"
)

// Options configure a facade Server.
type Options struct {
	// Conn reaches the runtime with the daemon's token attached; WebSocket
	// clients use it once they proved the token in system.hello.
	Conn grpc.ClientConnInterface
	// RESTConn reaches the runtime for the REST mapping (package rest)
	// without credentials of its own: REST callers' Authorization headers
	// are forwarded.
	RESTConn grpc.ClientConnInterface
	// Token is the daemon's auth token (REST Bearer check).
	Token string
	// Log receives the facade's logs.
	Log *slog.Logger
	// AllowOrigins lists the web origins allowed to open a WebSocket.
	AllowOrigins []string
	// Limits bound what authenticated connections may hold; zero fields
	// take the defaults (DefaultLimits).
	Limits Limits
	// HelloTimeout is how long a WebSocket connection may stay without
	// completing system.hello before it is closed (0 = DefaultHelloTimeout).
	HelloTimeout time.Duration
	// MaxUnauthenticated is the most WebSocket connections that have not
	// completed system.hello yet; more are refused with HTTP 503 before
	// the upgrade (0 = DefaultMaxUnauthenticated).
	MaxUnauthenticated int
	// Ready reports why the daemon should get no new traffic (its store
	// does not answer, it is stopping), or nil; GET /ready answers 503
	// while it returns an error. Nil: always ready.
	Ready func(ctx context.Context) error
}

// readyTimeout bounds one readiness check: a probe that waits longer than
// its own timeout counts as a failure anyway.
const readyTimeout = 2 * time.Second

// Bounds on connections that have not proved the token.
const (
	DefaultHelloTimeout       = 10 * time.Second
	DefaultMaxUnauthenticated = 256
)

// Limits bound the resources of authenticated WebSocket connections. They
// are advertised in system.hello; a request past one is refused with
// overloaded, whose data.limit names it.
type Limits struct {
	// MaxConnections is the most authenticated connections at once.
	MaxConnections int
	// MaxWatchedSessions is the most sessions one connection receives
	// session.event for.
	MaxWatchedSessions int
	// MaxInFlight is the most requests one connection has running.
	MaxInFlight int
}

// DefaultLimits are the limits of a facade whose Options leave them zero.
var DefaultLimits = Limits{MaxConnections: 20_000, MaxWatchedSessions: 4096, MaxInFlight: 1024}

func (l Limits) withDefaults() Limits {
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultLimits.MaxConnections
	}
	if l.MaxWatchedSessions <= 0 {
		l.MaxWatchedSessions = DefaultLimits.MaxWatchedSessions
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultLimits.MaxInFlight
	}
	return l
}

// Server is the facade: one per daemon.
type Server struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	mapper *grpcerr.Mapper
	stats  *metrics
	limits Limits
	hub    *hub
	// approvals is the facade's one approver stream (approvals.go).
	approvals *approvals
	authed    atomic.Int64 // authenticated connections open
	// unauthed counts connections before system.hello (and upgrades in
	// progress).
	unauthed atomic.Int64

	// audiences are the notification streams, one set per key (watch.go).
	watchMu   sync.Mutex
	audiences map[string]*audience

	mu    sync.Mutex
	conns map[*wsConn]struct{}
}

// NewServer returns a facade server.
func NewServer(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = DefaultHelloTimeout
	}
	if opts.MaxUnauthenticated <= 0 {
		opts.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts: opts, ctx: ctx, cancel: cancel,
		mapper:    &grpcerr.Mapper{Log: opts.Log},
		conns:     map[*wsConn]struct{}{},
		limits:    opts.Limits.withDefaults(),
		audiences: map[string]*audience{},
	}
	s.hub = newHub(s)
	s.approvals = newApprovals(s)
	s.stats = newMetrics(s)
	return s
}

// Handler returns the HTTP handler of every surface of PROTOCOL.md §1.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /ready", s.serveReady)
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": version.Server, "protocolVersion": version.Protocol})
	})
	doc := protocolDocument()
	mux.HandleFunc("GET /protocol.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(methods.OpenAPIJSON)
	})
	mux.HandleFunc("/ws", s.serveWS)
	s.uiRoutes(mux) // the web console at /ui/ and its login (ui.go)
	mux.Handle("GET /metrics", s.stats.handler(s.checkKey))
	mux.Handle("GET /v1/sessions/{id}/events", traced(rest.Events(s.opts.Conn, s.opts.Token, s.opts.Log)))
	mux.Handle("GET /v1/sessions/{id}/export", traced(rest.Export(s.opts.Conn, s.opts.Token, s.opts.Log)))
	mux.Handle("POST /v1/sessions/import", traced(rest.Import(s.opts.Conn, s.opts.Token, s.opts.Log)))
	mux.Handle(mcpserver.Path, traced(mcpserver.Handler(mcpserver.Options{Conn: s.opts.Conn, Token: s.opts.Token, Version: version.Server, Log: s.opts.Log})))
	api, err := rest.New(s.ctx, s.opts.RESTConn, s.opts.Token, s.restError,
		runtime.WithForwardResponseOption(s.restResult))
	if err != nil {
		s.opts.Log.Error("REST gateway disabled", "err", err)
	} else {
		mux.Handle("/v1/", traced(api))
	}
	return mux
}

// serveReady answers the readiness probe: 200 while Options.Ready finds
// nothing wrong, 503 with the reason otherwise. /health stays the liveness
// probe (the process serves): a store that is down makes the daemon leave
// the load balancer, not be restarted.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	if s.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// protocolDocument is the generated /protocol.json with this daemon's
// version filled in.
func protocolDocument() []byte {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(methods.ProtocolJSON, &doc); err != nil {
		return methods.ProtocolJSON
	}
	doc["serverVersion"], _ = json.Marshal(version.Server)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return methods.ProtocolJSON
	}
	return append(out, '\n')
}

// restResult completes a REST result as the JSON-RPC path completes the
// same result, so that both carry the same JSON.
func (s *Server) restResult(_ context.Context, _ http.ResponseWriter, m proto.Message) error {
	if r, ok := m.(*trellisv1.HelloResponse); ok {
		s.fillLimits(r)
	}
	return nil
}

// restError renders gateway errors like JSON-RPC errors, with the HTTP
// status of the gRPC code.
func (s *Server) restError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if rest.BodyTooLarge(r.Context()) {
		writeJSON(w, http.StatusRequestEntityTooLarge, errcode.New(errcode.PayloadTooLarge,
			"the request body is over the limit of %d bytes (the WebSocket frame limit too); send less", rest.MaxBodyBytes).
			WithData("limit", int64(rest.MaxBodyBytes)))
		return
	}
	e := s.mapper.FromError(ctx, err)
	code := http.StatusInternalServerError
	if st, ok := statusOf(err); ok {
		code = runtime.HTTPStatusFromCode(st)
	}
	if e.HasCode(errcode.PayloadTooLarge) {
		code = http.StatusRequestEntityTooLarge
	}
	writeJSON(w, code, e)
}

// Connections counts the open, authenticated WebSocket connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.authenticated() {
			n++
		}
	}
	return n
}

// Close closes every WebSocket connection and stops background work.
func (s *Server) Close() {
	// Cancelling s.ctx closes every connection at once (Serve watches it),
	// so it comes last, after the drain.
	defer s.cancel()
	s.mu.Lock()
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Let each connection finish its running requests and write its
	// queued frames (the reply to system.shutdown among them), then close.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.rpc != nil {
				_ = c.rpc.Drain(ctx)
			}
			c.close("daemon shutting down")
		}()
	}
	wg.Wait()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
