package session

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

// keepRecentTurns is how many of the latest user turns compaction keeps verbatim.
const keepRecentTurns = 1

// Compacted reports a compaction in token estimates.
type Compacted struct {
	Before, After, SummaryChars int
}

// Compact summarises older history through the provider; session_busy while
// a turn runs.
func (s *Service) Compact(ctx context.Context, id, instructions string) (Compacted, error) {
	l, err := s.load(ctx, id)
	if err != nil {
		return Compacted{}, err
	}
	release, err := s.claimIdle(ctx, l)
	if err != nil {
		return Compacted{}, err
	}
	defer release()
	return s.compact(ctx, id, instructions)
}

// claimIdle makes the session's actor slot busy for an operation that needs
// an idle session; session_busy while a turn runs. A turn whose turn.done is
// already stored is waited for: clients see the session idle from then on.
// The operation defers release, which frees the slot: the first of the
// prompts that arrived meanwhile, queued behind the operation, starts then.
func (s *Service) claimIdle(ctx context.Context, l *live) (release func(), err error) {
	for {
		l.mu.Lock()
		ts := l.running
		if ts == nil {
			claim := s.newTurnState("")
			claim.cancel = func() {}
			l.running = claim
			l.mu.Unlock()
			return func() {
				if p := s.next(l, claim); p != nil {
					s.wg.Add(1)
					go s.actor(l, p)
				}
			}, nil
		}
		id := l.row.SessionID
		l.mu.Unlock()
		if !ts.ended.Load() {
			return nil, errs.New(errcode.SessionBusy, "session %s is running a turn: interrupt it or wait for turn.done, then try again", id)
		}
		select {
		case <-ts.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Service) compact(ctx context.Context, id, instructions string) (Compacted, error) {
	row, err := s.row(ctx, id)
	if err != nil {
		return Compacted{}, err
	}
	h := storeHistory{st: s.deps.Store, id: id, writer: s.writer}
	msgs, err := h.Messages(ctx)
	if err != nil {
		return Compacted{}, err
	}
	before := estimate(msgs)
	if _, err := s.deps.Events.Append(ctx, id, eventkind.CompactionStarted, events.CompactionStartedEvent{Reason: events.CompactionStartedReasonManual, Before: int64(before)}); err != nil {
		return Compacted{}, err
	}
	res := Compacted{Before: before, After: before}
	var summary string
	split := splitPoint(msgs, keepRecentTurns)
	if split > 0 {
		prov, err := s.deps.Providers.Open(row.Provider)
		if err != nil {
			return Compacted{}, err
		}
		summary, err = summarise(ctx, prov, row.Model, msgs[:split], instructions)
		if err != nil {
			return Compacted{}, err
		}
		kept := append([]llm.Message{llm.UserText("Summary of the earlier conversation:\n" + summary)}, msgs[split:]...)
		raw, err := marshalMessages(kept)
		if err != nil {
			return Compacted{}, err
		}
		if err := s.deps.Store.ReplaceHistory(ctx, s.writer(id), id, raw); err != nil {
			return Compacted{}, fmt.Errorf("save compacted history: %w", s.refused(ctx, id, err))
		}
		res.After, res.SummaryChars = estimate(kept), len(summary)
	}
	if _, err := s.deps.Events.Append(ctx, id, eventkind.Compaction, events.CompactionEvent{
		Before: int64(res.Before), After: int64(res.After), SummaryChars: int64(res.SummaryChars), Auto: false,
		// The summary text: pi's compaction_end result carries it.
		Summary: summary,
	}); err != nil {
		return Compacted{}, err
	}
	return res, nil
}

func estimate(msgs []llm.Message) int { return llm.EstimateRequestTokens(llm.Request{Messages: msgs}) }

// splitPoint returns the index of the user message that starts the last
// `keep` user turns: what comes before it is summarised. 0 = nothing to do.
func splitPoint(msgs []llm.Message, keep int) int {
	seen := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			seen++
			if seen == keep {
				return i
			}
		}
	}
	return 0
}

func summarise(ctx context.Context, prov llm.Provider, model string, msgs []llm.Message, instructions string) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		switch {
		case m.ToolResult != nil:
			fmt.Fprintf(&b, "[tool %s result] %s\n", m.ToolResult.Name, clip(m.ToolResult.Content, 2000))
		default:
			fmt.Fprintf(&b, "[%s] %s\n", m.Role, m.Text)
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "[%s calls %s] %s\n", m.Role, c.Name, clip(string(c.Arguments), 500))
			}
		}
	}
	ask := "Summarise the conversation below so that it can replace it: keep decisions, facts, file names and open tasks."
	if instructions != "" {
		ask += " " + instructions
	}
	stream, err := prov.Stream(ctx, llm.Request{
		Model:    model,
		System:   "You write concise, faithful summaries of agent conversations.",
		Messages: []llm.Message{llm.UserText(ask + "\n\n" + b.String())},
	})
	if err != nil {
		return "", err
	}
	resp, err := llm.Collect(stream)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(resp.Text) == "" {
		return "", errs.New(errcode.ProviderError, "the provider returned an empty summary").WithData("provider", prov.Name())
	}
	return resp.Text, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
