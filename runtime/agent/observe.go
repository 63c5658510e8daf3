package agent

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/telemetry"
)

// providerObservation is the span and the metrics of one provider request.
type providerObservation struct {
	ctx         context.Context
	span        trace.Span
	vendor      string
	model       string
	start       time.Time
	first       time.Duration // time to the first chunk; -1 until it comes
	err         error
	interrupted bool
	cost        int64 // micro-US-dollars, when priced
	priced      bool
}

func (r *turnRun) observeProvider(step int) *providerObservation {
	ctx, span := telemetry.Start(r.ctx, "provider "+r.provider, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.system", r.provider),
			attribute.String("gen_ai.request.model", r.model),
			attribute.Int("trellis.step", step),
		))
	return &providerObservation{ctx: ctx, span: span, vendor: r.provider, model: r.model, start: time.Now(), first: -1}
}

// chunk notes a streamed chunk (the first one sets the time to first token).
func (o *providerObservation) chunk() {
	if o.first < 0 {
		o.first = time.Since(o.start)
	}
}

// end records the request: usage is nil when the request failed or the
// vendor reported none before the loop estimated it.
func (o *providerObservation) end(usage *llm.Usage, stop llm.StopReason) {
	d := time.Since(o.start)
	in, out := 0, 0
	if usage != nil {
		in, out = usage.InputTokens, usage.OutputTokens
	}
	failed := o.err != nil && !o.interrupted
	telemetry.ProviderRequest(o.vendor, o.model, d, o.first, in, out, failed)
	if usage != nil {
		telemetry.ProviderUsage(o.vendor, o.model, usage.CacheReadTokens, usage.CacheWriteTokens, usage.ReasoningTokens, o.cost, o.priced)
	}
	attrs := []attribute.KeyValue{
		attribute.Int("gen_ai.usage.input_tokens", in),
		attribute.Int("gen_ai.usage.output_tokens", out),
	}
	if o.first >= 0 {
		attrs = append(attrs, attribute.Float64("trellis.time_to_first_token_ms", float64(o.first.Microseconds())/1000))
	}
	if stop != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.finish_reason", string(stop)))
	}
	if o.interrupted {
		attrs = append(attrs, attribute.Bool("trellis.interrupted", true))
	}
	o.span.SetAttributes(attrs...)
	if failed {
		telemetry.Fail(o.span, o.err)
	}
	o.span.End()
}

// endToolSpan ends a tool call's span and counts its outcome.
func endToolSpan(span trace.Span, tool, outcome string, err error) {
	telemetry.ToolCall(tool, outcome)
	span.SetAttributes(attribute.String("trellis.tool.outcome", outcome))
	telemetry.Fail(span, err)
	span.End()
}
