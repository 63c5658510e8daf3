package facade

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellis-run/trellis/telemetry"
)

// metrics are the facade's Prometheus metrics (GET /metrics: loopback
// clients, and others with an API key).
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_jsonrpc_requests_total",
			Help: "JSON-RPC requests handled, by method and outcome (ok or the error's string code).",
		}, []string{"method", "outcome"}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trellis_websocket_connections",
			Help: "Open, authenticated WebSocket connections.",
		}, func() float64 { return float64(s.Connections()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "trellis_approver_streams_opened_total",
			Help: "ApprovalService.Attach streams the facade opened: one for all its connections, plus one per reopening after a failure.",
		}, func() float64 { n, _ := s.approvals.stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trellis_approver_origins",
			Help: "WebSocket connections attached as approvers on the facade's approver stream.",
		}, func() float64 { _, n := s.approvals.stats(); return float64(n) }),
	)
	return m
}

// observe counts one request; unknown methods are counted under one label so
// that clients cannot grow the label set.
func (m *metrics) observe(method string, known bool, code string) {
	if !known {
		method = "unknown"
	}
	if code == "" {
		code = "ok"
	}
	m.requests.WithLabelValues(method, code).Inc()
}

// handler serves the metrics to loopback callers only.
// handler serves the metrics; checkKey says whether the runtime accepts
// an API key.
func (m *metrics) handler(checkKey func(context.Context, string) error) http.Handler {
	// The runtime's domain and gRPC metrics live in telemetry.Registry (one
	// daemon per process).
	inner := promhttp.HandlerFor(prometheus.Gatherers{m.registry, telemetry.Registry}, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback(r) {
			// Off the machine, a scraper shows an API key (any role), as
			// Prometheus does with its authorization credentials_file.
			key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || key == "" || checkKey(r.Context(), key) != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="trellis"`)
				http.Error(w, "metrics are served to loopback clients, and to others with an API key (Authorization: Bearer KEY)", http.StatusUnauthorized)
				return
			}
		}
		inner.ServeHTTP(w, r)
	})
}

// loopback reports whether r came from this machine's loopback interface.
func loopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}
