package facade

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trellis-run/trellis/telemetry"
)

// metrics are the facade's Prometheus metrics (GET /metrics, loopback only).
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
func (m *metrics) handler() http.Handler {
	// The runtime's domain and gRPC metrics live in telemetry.Registry (one
	// daemon per process).
	inner := promhttp.HandlerFor(prometheus.Gatherers{m.registry, telemetry.Registry}, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "metrics are served to loopback clients only", http.StatusForbidden)
			return
		}
		inner.ServeHTTP(w, r)
	})
}
