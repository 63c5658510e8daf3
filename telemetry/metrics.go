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
	turns = newCounterVec("trellis_turns_total",
		"Turns ended, by outcome (the turn.done reason: complete, error, interrupted, denied, budget).",
		"outcome")
	turnDuration = newHistogramVec("trellis_turn_duration_seconds", slowBuckets,
		"Time from a turn's start to its turn.done, by outcome.",
		"outcome")
	eventsAppended = newCounter("trellis_events_appended_total",
		"Session events committed to the store.")
	commitLatency = newHistogram("trellis_event_commit_seconds", fastBuckets,
		"Time to commit one batch of session events to the store.")
	subscriptions = newGauge("trellis_event_subscriptions",
		"Live subscriptions to session events (WebSocket, gRPC and REST watchers).")
	slowDrops = newCounter("trellis_subscription_overflows_total",
		"Times a slow subscriber's live buffer overflowed: its live events were dropped and it re-read them from the store.")
	slowClients = newCounterVec("trellis_slow_clients_total",
		"WebSocket clients too slow for their events: fell_behind = dropped from a session's live feed (it catches up from the store), closed = the connection was closed (its notification backlog was full).",
		"action")
	approvalsPending = newGauge("trellis_approvals_pending",
		"Approval requests waiting for an answer.")
	approvalWait = newHistogramVec("trellis_approval_wait_seconds", slowBuckets,
		"Time an approval request waited, by outcome (allowed, denied, timeout).",
		"outcome")
	providerRequests = newCounterVec("trellis_provider_requests_total",
		"Requests to model providers, by vendor and model.",
		"vendor", "model")
	providerErrors = newCounterVec("trellis_provider_errors_total",
		"Provider requests that failed (not counting interrupts), by vendor and model.",
		"vendor", "model")
	providerLatency = newHistogramVec("trellis_provider_request_seconds", slowBuckets,
		"Duration of a provider request, until its stream ended, by vendor and model.",
		"vendor", "model")
	providerTTFT = newHistogramVec("trellis_provider_time_to_first_token_seconds", slowBuckets,
		"Time from a provider request to its first streamed chunk, by vendor and model.",
		"vendor", "model")
	providerTokens = newCounterVec("trellis_provider_tokens_total",
		"Tokens of provider requests, by vendor, model and direction (input, output).",
		"vendor", "model", "direction")
	providerTokenDetails = newCounterVec("trellis_provider_token_details_total",
		"Of the tokens in trellis_provider_tokens_total, by vendor, model and kind: cache_read and cache_write (input tokens read from and written to the prompt cache), reasoning (output tokens spent reasoning).",
		"vendor", "model", "kind")
	providerCost = newCounterVec("trellis_provider_cost_usd_total",
		"What provider requests cost in US dollars, by vendor and model, from the daemon's price table (requests of models it does not price count 0).",
		"vendor", "model")
	providerUnpriced = newCounterVec("trellis_provider_unpriced_requests_total",
		"Provider requests of models the price table does not price (their cost is unknown), by vendor and model.",
		"vendor", "model")
	toolCalls = newCounterVec("trellis_tool_calls_total",
		"Tool calls, by tool and outcome (ok, error, denied).",
		"tool", "outcome")
	jobRuns = newCounterVec("trellis_job_runs_total",
		"Scheduled or manual job runs ended, by outcome (the run's status).",
		"outcome")
	checkpointDuration = newHistogramVec("trellis_checkpoint_seconds", fastBuckets,
		"Time recording a checkpoint of a session's workdir took, by outcome (recorded: stored; unchanged: equal to the latest, not stored again; failed).",
		"outcome")
	storeErrors = newCounterVec("trellis_store_errors_total",
		"Store operations that failed, by operation.",
		"op")
)

// The constructors of the metrics above: a name, the buckets of a
// histogram, a help text and the label names of a vector.

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func newHistogram(name string, buckets []float64, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func newHistogramVec(name string, buckets []float64, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

func init() {
	Registry.MustRegister(turns, turnDuration, eventsAppended, commitLatency, subscriptions, slowDrops, slowClients,
		approvalsPending, approvalWait, providerRequests, providerErrors, providerLatency, providerTTFT,
		providerTokens, providerTokenDetails, providerCost, providerUnpriced, toolCalls, jobRuns, checkpointDuration, storeErrors)
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
	for _, o := range []string{CheckpointRecorded, CheckpointUnchanged, CheckpointFailed} {
		checkpointDuration.WithLabelValues(o)
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

// The outcomes of recording a checkpoint (CheckpointTaken).
const (
	CheckpointRecorded  = "recorded"
	CheckpointUnchanged = "unchanged"
	CheckpointFailed    = "failed"
)

// CheckpointTaken counts one recording of a session's workdir that took d
// and ended with outcome.
func CheckpointTaken(outcome string, d time.Duration) {
	checkpointDuration.WithLabelValues(outcome).Observe(d.Seconds())
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

// ProviderUsage counts what one provider request's usage adds to
// ProviderRequest's: its cached and reasoning tokens, and its cost in
// micro-US-dollars (priced false: the model has no price).
func ProviderUsage(vendor, model string, cacheRead, cacheWrite, reasoning int, microUSD int64, priced bool) {
	if model == "" {
		model = "default"
	}
	for _, k := range []struct {
		kind string
		n    int
	}{{"cache_read", cacheRead}, {"cache_write", cacheWrite}, {"reasoning", reasoning}} {
		if k.n > 0 {
			providerTokenDetails.WithLabelValues(vendor, model, k.kind).Add(float64(k.n))
		}
	}
	cost := providerCost.WithLabelValues(vendor, model) // exposed from 0
	if !priced {
		providerUnpriced.WithLabelValues(vendor, model).Inc()
		return
	}
	cost.Add(float64(microUSD) / 1e6)
}

// ToolCall counts one tool call's outcome.
func ToolCall(tool, outcome string) { toolCalls.WithLabelValues(tool, outcome).Inc() }

// JobRun counts one job run's outcome.
func JobRun(outcome string) { jobRuns.WithLabelValues(outcome).Inc() }

// StoreError counts a failed store operation.
func StoreError(op string) { storeErrors.WithLabelValues(op).Inc() }
