package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Registry holds the runtime's domain metrics; the facade serves it, with
// its own and the gRPC server's, on GET /metrics. The metrics are
// process-wide: one daemon runs per process.
var Registry = prometheus.NewRegistry()

// Buckets for durations from a millisecond (a commit) to minutes (a turn).
var (
	fastBuckets = prometheus.ExponentialBuckets(0.0005, 2.5, 12) // 0.5 ms … 12 s
	slowBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
)

var (
	turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_turns_total",
		Help: "Turns ended, by outcome (the turn.done reason: complete, error, interrupted, denied, budget).",
	}, []string{"outcome"})
	turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trellis_turn_duration_seconds",
		Help:    "Time from a turn's start to its turn.done, by outcome.",
		Buckets: slowBuckets,
	}, []string{"outcome"})
	eventsAppended = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "trellis_events_appended_total",
		Help: "Session events committed to the store.",
	})
	commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "trellis_event_commit_seconds",
		Help:    "Time to commit one batch of session events to the store.",
		Buckets: fastBuckets,
	})
	subscriptions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trellis_event_subscriptions",
		Help: "Live subscriptions to session events (WebSocket, gRPC and REST watchers).",
	})
	slowDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "trellis_subscription_overflows_total",
		Help: "Times a slow subscriber's live buffer overflowed: its live events were dropped and it re-read them from the store.",
	})
	slowClients = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_slow_clients_total",
		Help: "WebSocket clients too slow for their events: fell_behind = dropped from a session's live feed (it catches up from the store), closed = the connection was closed (its notification backlog was full).",
	}, []string{"action"})
	approvalsPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trellis_approvals_pending",
		Help: "Approval requests waiting for an answer.",
	})
	approvalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trellis_approval_wait_seconds",
		Help:    "Time an approval request waited, by outcome (allowed, denied, timeout).",
		Buckets: slowBuckets,
	}, []string{"outcome"})
	providerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_provider_requests_total",
		Help: "Requests to model providers, by vendor and model.",
	}, []string{"vendor", "model"})
	providerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_provider_errors_total",
		Help: "Provider requests that failed (not counting interrupts), by vendor and model.",
	}, []string{"vendor", "model"})
	providerLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trellis_provider_request_seconds",
		Help:    "Duration of a provider request, until its stream ended, by vendor and model.",
		Buckets: slowBuckets,
	}, []string{"vendor", "model"})
	providerTTFT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trellis_provider_time_to_first_token_seconds",
		Help:    "Time from a provider request to its first streamed chunk, by vendor and model.",
		Buckets: slowBuckets,
	}, []string{"vendor", "model"})
	providerTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_provider_tokens_total",
		Help: "Tokens of provider requests, by vendor, model and direction (input, output).",
	}, []string{"vendor", "model", "direction"})
	toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_tool_calls_total",
		Help: "Tool calls, by tool and outcome (ok, error, denied).",
	}, []string{"tool", "outcome"})
	jobRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_job_runs_total",
		Help: "Scheduled or manual job runs ended, by outcome (the run's status).",
	}, []string{"outcome"})
	storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trellis_store_errors_total",
		Help: "Store operations that failed, by operation.",
	}, []string{"op"})
)

func init() {
	Registry.MustRegister(turns, turnDuration, eventsAppended, commitLatency, subscriptions, slowDrops, slowClients,
		approvalsPending, approvalWait, providerRequests, providerErrors, providerLatency, providerTTFT,
		providerTokens, toolCalls, jobRuns, storeErrors)
	// The known label values start at 0, so that dashboards and alerts see
	// the series before the first occurrence.
	for _, o := range []string{"complete", "error", "interrupted", "denied", "budget"} {
		turns.WithLabelValues(o)
		turnDuration.WithLabelValues(o)
	}
	for _, o := range []string{"allowed", "denied", "timeout"} {
		approvalWait.WithLabelValues(o)
	}
	for _, o := range []string{"ok", "error", "denied_by_timeout"} {
		jobRuns.WithLabelValues(o)
	}
	for _, a := range []string{"fell_behind", "closed"} {
		slowClients.WithLabelValues(a)
	}
	for _, op := range []string{"append_events", "read_events", "append_history", "load_history"} {
		storeErrors.WithLabelValues(op)
	}
}

// TurnEnded counts a turn that ended with outcome after d.
func TurnEnded(outcome string, d time.Duration) {
	turns.WithLabelValues(outcome).Inc()
	turnDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// EventsCommitted counts n events committed in one batch that took d.
func EventsCommitted(n int, d time.Duration) {
	eventsAppended.Add(float64(n))
	commitLatency.Observe(d.Seconds())
}

// SubscriptionOpened and SubscriptionClosed track live subscriptions.
func SubscriptionOpened() { subscriptions.Inc() }

// SubscriptionClosed: see SubscriptionOpened.
func SubscriptionClosed() { subscriptions.Dec() }

// SlowSubscriber counts a live buffer overflow of a slow subscriber.
func SlowSubscriber() { slowDrops.Inc() }

// SlowClient counts a WebSocket client dropped from a live feed
// ("fell_behind") or closed ("closed") for reading too slowly.
func SlowClient(action string) { slowClients.WithLabelValues(action).Inc() }

// ApprovalAsked counts a request that starts waiting.
func ApprovalAsked() { approvalsPending.Inc() }

// ApprovalSettled counts a request that stopped waiting after d.
func ApprovalSettled(outcome string, d time.Duration) {
	approvalsPending.Dec()
	approvalWait.WithLabelValues(outcome).Observe(d.Seconds())
}

// ProviderRequest counts one provider request: its duration, its time to
// first chunk (ttft < 0: none came), its tokens and whether it failed.
func ProviderRequest(vendor, model string, d, ttft time.Duration, inTokens, outTokens int, failed bool) {
	if model == "" {
		model = "default"
	}
	providerRequests.WithLabelValues(vendor, model).Inc()
	providerLatency.WithLabelValues(vendor, model).Observe(d.Seconds())
	if ttft >= 0 {
		providerTTFT.WithLabelValues(vendor, model).Observe(ttft.Seconds())
	}
	errors := providerErrors.WithLabelValues(vendor, model) // exposed from 0
	if failed {
		errors.Inc()
	}
	if inTokens > 0 {
		providerTokens.WithLabelValues(vendor, model, "input").Add(float64(inTokens))
	}
	if outTokens > 0 {
		providerTokens.WithLabelValues(vendor, model, "output").Add(float64(outTokens))
	}
}

// ToolCall counts one tool call's outcome.
func ToolCall(tool, outcome string) { toolCalls.WithLabelValues(tool, outcome).Inc() }

// JobRun counts one job run's outcome.
func JobRun(outcome string) { jobRuns.WithLabelValues(outcome).Inc() }

// StoreError counts a failed store operation.
func StoreError(op string) { storeErrors.WithLabelValues(op).Inc() }
