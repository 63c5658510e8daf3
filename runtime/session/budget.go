package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// budgetNamespace keeps each session's own budget (session.setBudget, or
// the job that ran it) and pausedNamespace the turn a budget paused, by
// session id in the settings table: both survive restarts and are read by
// whichever daemon of a cluster owns the session.
// principalBudgetNamespace keeps each principal's budget
// (principal.setBudget), by principal id.
const (
	budgetNamespace          = "session.budget"
	pausedNamespace          = "session.paused"
	principalBudgetNamespace = "principal.budget"
)

// DefaultPrincipalRecheck is how often a turn paused by its principal's
// budget checks it again when nothing on this daemon said it changed: a
// raise made through another daemon of a cluster reaches it so.
const DefaultPrincipalRecheck = 5 * time.Second

// Limits are the limits of a budget; nil is no limit. A budget with
// neither limits nothing.
type Limits struct {
	MaxCostMicroUSD *int64 `json:"maxCostMicroUsd,omitempty"`
	MaxTokens       *int64 `json:"maxTokens,omitempty"`
}

// Set reports whether l limits anything.
func (l Limits) Set() bool { return l.MaxCostMicroUSD != nil || l.MaxTokens != nil }

// Validate refuses negative limits, naming the field.
func (l Limits) Validate() error {
	if l.MaxCostMicroUSD != nil && *l.MaxCostMicroUSD < 0 {
		return errs.New(errcode.InvalidParams, "maxCostMicroUsd is %d: a budget is at least 0 micro-US-dollars", *l.MaxCostMicroUSD)
	}
	if l.MaxTokens != nil && *l.MaxTokens < 0 {
		return errs.New(errcode.InvalidParams, "maxTokens is %d: a budget is at least 0 tokens", *l.MaxTokens)
	}
	return nil
}

// pausedTurn is the record of a turn its budget paused.
type pausedTurn struct {
	TurnID string             `json:"turnId"`
	Budget events.Budget      `json:"budget"`
	Spent  events.BudgetSpent `json:"spent"`
}

// BudgetInfo is what session.setBudget reports.
type BudgetInfo struct {
	Budget events.Budget
	Spent  events.BudgetSpent
	Paused bool
}

// SetBudget sets the session's own budget (neither limit: clears it, and
// the agent definition's or the daemon's default applies again), wakes its
// paused turn to check again, and restarts a turn a previous daemon left
// paused (after a restart, or on the daemon that took the session over).
func (s *Service) SetBudget(ctx context.Context, id string, lim Limits) (BudgetInfo, error) {
	if err := lim.Validate(); err != nil {
		return BudgetInfo{}, err
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return BudgetInfo{}, err
	}
	if lim.Set() {
		raw, _ := json.Marshal(lim)
		if err := s.deps.Store.PutSetting(ctx, s.writer(id), budgetNamespace, id, raw); err != nil {
			return BudgetInfo{}, s.refused(ctx, id, fmt.Errorf("save session budget: %w", err))
		}
	} else if err := s.deps.Store.DeleteSetting(ctx, s.writer(id), budgetNamespace, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return BudgetInfo{}, s.refused(ctx, id, fmt.Errorf("clear session budget: %w", err))
	}
	l.mu.Lock()
	row := l.row
	l.mu.Unlock()
	st, err := s.budgetState(ctx, row, agent.Estimate{})
	if err != nil {
		return BudgetInfo{}, err
	}
	_, paused, err := s.pausedTurn(ctx, id)
	if err != nil {
		return BudgetInfo{}, err
	}
	s.budgetChanged(l)
	if paused {
		if err := s.revive(ctx, id, nil); err != nil {
			return BudgetInfo{}, err
		}
	}
	return BudgetInfo{Budget: st.Budget, Spent: st.Spent, Paused: paused && st.Reached}, nil
}

// budgetChanged wakes l's paused turn, if any.
func (s *Service) budgetChanged(l *live) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budgetCh != nil {
		close(l.budgetCh)
		l.budgetCh = nil
	}
}

// checkedPause reports whether a prompt already found that l has no turn
// a previous owner left paused, or l runs a turn (which would pause here).
func (l *live) checkedPause() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseChecked || l.running != nil
}

// changed returns the channel closed at l's next budget change.
func (l *live) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budgetCh == nil {
		l.budgetCh = make(chan struct{})
	}
	return l.budgetCh
}

// budgetOf returns the budget in force for row: its own, else its agent
// definition's, else the daemon's default.
func (s *Service) budgetOf(ctx context.Context, row store.Session) (events.Budget, error) {
	raw, err := s.deps.Store.GetSetting(ctx, budgetNamespace, row.SessionID)
	switch {
	case err == nil:
		var lim Limits
		if err := json.Unmarshal(raw, &lim); err != nil {
			return events.Budget{}, fmt.Errorf("the budget of session %s is corrupt: %w", row.SessionID, err)
		}
		return events.Budget{MaxCostMicroUsd: lim.MaxCostMicroUSD, MaxTokens: lim.MaxTokens, Source: events.BudgetSourceSession}, nil
	case !errors.Is(err, store.ErrNotFound):
		return events.Budget{}, fmt.Errorf("read the budget of session %s: %w", row.SessionID, err)
	}
	if row.Agent != "" && s.agents != nil {
		if def, err := s.agents(row.Agent); err == nil && def.Budget.Set() {
			return events.Budget{MaxCostMicroUsd: def.Budget.MaxCostMicroUSD, MaxTokens: def.Budget.MaxTokens, Source: events.BudgetSourceAgent}, nil
		}
	}
	if d := s.deps.DefaultBudget; d.Set() {
		return events.Budget{MaxCostMicroUsd: d.MaxCostMicroUSD, MaxTokens: d.MaxTokens, Source: events.BudgetSourceDefault}, nil
	}
	return events.Budget{Source: events.BudgetSourceNone}, nil
}

// budgetState is row's budget, what it spent (its stored usage events),
// and whether a call expected to add next would pass a limit: a limit is
// reached when the spending is at it, or the spending plus next is over it.
func (s *Service) budgetState(ctx context.Context, row store.Session, next agent.Estimate) (agent.BudgetState, error) {
	b, err := s.budgetOf(ctx, row)
	if err != nil {
		return agent.BudgetState{}, err
	}
	st, err := s.spending(ctx, b, store.UsageQuery{GroupBy: store.UsageBySession, SessionID: row.SessionID}, next)
	if err != nil || st.Reached || row.Owner == "" {
		return st, err
	}
	// The principal's budget binds when it is reached, or when the session
	// has none of its own to show.
	pb, err := s.principalBudget(ctx, row.Owner)
	if err != nil || pb.Source == events.BudgetSourceNone {
		return st, err
	}
	pst, err := s.spending(ctx, pb, store.UsageQuery{GroupBy: store.UsageByPrincipal, Owner: row.Owner}, next)
	if err != nil {
		return st, err
	}
	if pst.Reached || b.Source == events.BudgetSourceNone {
		return pst, nil
	}
	return st, nil
}

// spending totals the usage events q selects against the limits of b:
// a limit is reached when the total is at it, or the total plus next is
// over it.
func (s *Service) spending(ctx context.Context, b events.Budget, q store.UsageQuery, next agent.Estimate) (agent.BudgetState, error) {
	st := agent.BudgetState{Budget: b}
	if b.MaxCostMicroUsd == nil && b.MaxTokens == nil {
		return st, nil
	}
	rows, err := s.deps.Store.SumUsage(ctx, q)
	if err != nil {
		return st, fmt.Errorf("total the usage for the %s budget: %w", b.Source, err)
	}
	for _, r := range rows {
		st.Spent.CostMicroUsd += r.CostMicroUSD
		st.Spent.Tokens += r.InputTokens + r.OutputTokens
	}
	over := func(max *int64, spent, next int64) bool {
		return max != nil && (spent >= *max || spent+next > *max)
	}
	st.Reached = over(b.MaxCostMicroUsd, st.Spent.CostMicroUsd, next.CostMicroUSD) || over(b.MaxTokens, st.Spent.Tokens, next.Tokens)
	return st, nil
}

// principalBudget returns the budget of principal id: source principal
// when it has one, else none.
func (s *Service) principalBudget(ctx context.Context, id string) (events.Budget, error) {
	raw, err := s.deps.Store.GetSetting(ctx, principalBudgetNamespace, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return events.Budget{Source: events.BudgetSourceNone}, nil
	case err != nil:
		return events.Budget{}, fmt.Errorf("read the budget of principal %s: %w", id, err)
	}
	var lim Limits
	if err := json.Unmarshal(raw, &lim); err != nil {
		return events.Budget{}, fmt.Errorf("the budget of principal %s is corrupt: %w", id, err)
	}
	if !lim.Set() {
		return events.Budget{Source: events.BudgetSourceNone}, nil
	}
	pid := id
	return events.Budget{MaxCostMicroUsd: lim.MaxCostMicroUSD, MaxTokens: lim.MaxTokens, Source: events.BudgetSourcePrincipal, PrincipalID: &pid}, nil
}

// PrincipalBudgets returns every principal's budget, by principal id.
func (s *Service) PrincipalBudgets(ctx context.Context) (map[string]events.Budget, error) {
	rows, err := s.deps.Store.ListSettings(ctx, principalBudgetNamespace)
	if err != nil {
		return nil, fmt.Errorf("list the principals' budgets: %w", err)
	}
	out := make(map[string]events.Budget, len(rows))
	for _, r := range rows {
		var lim Limits
		if json.Unmarshal(r.Value, &lim) != nil || !lim.Set() {
			continue
		}
		pid := r.Key
		out[r.Key] = events.Budget{MaxCostMicroUsd: lim.MaxCostMicroUSD, MaxTokens: lim.MaxTokens, Source: events.BudgetSourcePrincipal, PrincipalID: &pid}
	}
	return out, nil
}

// PrincipalBudgetInfo is what principal.setBudget reports.
type PrincipalBudgetInfo struct {
	Budget  events.Budget
	Spent   events.BudgetSpent
	Reached bool
}

// SetPrincipalBudget sets the budget of principal id (neither limit:
// clears it), which every session the principal created spends together,
// and wakes those sessions' paused turns to check again: the ones running
// here at once, the ones a previous daemon left paused by restarting them
// here (revive). A turn paused on another daemon of a cluster checks again
// within its recheck period. The caller checks that the principal exists.
func (s *Service) SetPrincipalBudget(ctx context.Context, id string, lim Limits) (PrincipalBudgetInfo, error) {
	if err := lim.Validate(); err != nil {
		return PrincipalBudgetInfo{}, err
	}
	if lim.Set() {
		raw, _ := json.Marshal(lim)
		if err := s.deps.Store.PutSetting(ctx, store.Unfenced(), principalBudgetNamespace, id, raw); err != nil {
			return PrincipalBudgetInfo{}, fmt.Errorf("save the budget of principal %s: %w", id, err)
		}
	} else if err := s.deps.Store.DeleteSetting(ctx, store.Unfenced(), principalBudgetNamespace, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return PrincipalBudgetInfo{}, fmt.Errorf("clear the budget of principal %s: %w", id, err)
	}
	b, err := s.principalBudget(ctx, id)
	if err != nil {
		return PrincipalBudgetInfo{}, err
	}
	st, err := s.spending(ctx, b, store.UsageQuery{GroupBy: store.UsageByPrincipal, Owner: id}, agent.Estimate{})
	if err != nil {
		return PrincipalBudgetInfo{}, err
	}
	s.wakePrincipal(ctx, id)
	return PrincipalBudgetInfo{Budget: b, Spent: st.Spent, Reached: st.Reached}, nil
}

// wakePrincipal wakes the paused turns of the sessions principal id
// created: those live here check their budget again; those a previous
// owner left paused are restarted here when this daemon may take them (a
// session another daemon holds is its to wake).
func (s *Service) wakePrincipal(ctx context.Context, id string) {
	s.mu.Lock()
	var mine []*live
	for _, l := range s.live {
		l.mu.Lock()
		if l.row.Owner == id {
			mine = append(mine, l)
		}
		l.mu.Unlock()
	}
	s.mu.Unlock()
	for _, l := range mine {
		s.budgetChanged(l)
	}
	for sid := range s.pausedSessions(ctx, "") {
		row, err := s.deps.Store.GetSession(ctx, sid)
		if err != nil || row.Owner != id || row.Closed {
			continue
		}
		if err := s.revive(ctx, sid, nil); err != nil {
			s.deps.Log.InfoContext(ctx, "budget: a paused turn of the principal was not restarted here", "sessionId", sid, "principalId", id, "err", err)
		}
	}
}

// pausedTurn reads the record of session id's paused turn.
func (s *Service) pausedTurn(ctx context.Context, id string) (pausedTurn, bool, error) {
	raw, err := s.deps.Store.GetSetting(ctx, pausedNamespace, id)
	if errors.Is(err, store.ErrNotFound) {
		return pausedTurn{}, false, nil
	}
	if err != nil {
		return pausedTurn{}, false, fmt.Errorf("read the paused turn of session %s: %w", id, err)
	}
	var p pausedTurn
	if err := json.Unmarshal(raw, &p); err != nil || p.TurnID == "" {
		return pausedTurn{}, false, nil
	}
	return p, true, nil
}

// pausedSessions returns the sessions (only id, when given) with a paused
// turn.
func (s *Service) pausedSessions(ctx context.Context, id string) map[string]bool {
	out := map[string]bool{}
	if id != "" {
		if _, ok, _ := s.pausedTurn(ctx, id); ok {
			out[id] = true
		}
		return out
	}
	all, err := s.deps.Store.ListSettings(ctx, pausedNamespace)
	if err != nil {
		return out
	}
	for _, r := range all {
		out[r.Key] = true
	}
	return out
}

// clearPaused drops the record of session id's paused turn.
func (s *Service) clearPaused(ctx context.Context, id string) error {
	err := s.deps.Store.DeleteSetting(ctx, s.writer(id), pausedNamespace, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// revive restarts on this daemon the turn of session id that a previous
// owner left paused (nothing when the session has a turn running here, or
// no paused turn): it picks up where it stopped, checking its budget again
// (agent.Turn.Resume). by, when set, interrupts it at once: it ends with
// turn.done{interrupted} named for by.
func (s *Service) revive(ctx context.Context, id string, by func(*turnState)) error {
	rec, ok, err := s.pausedTurn(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		if l := s.liveSession(id); l != nil {
			l.mu.Lock()
			l.pauseChecked = true
			l.mu.Unlock()
		}
		return nil
	}
	l, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return errs.New(errcode.Overloaded, "the daemon is shutting down").WithData("retryAfterMs", 1000)
	}
	if s.live[id] != l {
		s.mu.Unlock()
		return s.revive(ctx, id, by)
	}
	l.mu.Lock()
	if l.running != nil {
		l.mu.Unlock()
		s.mu.Unlock()
		return nil
	}
	s.wg.Add(1)
	s.mu.Unlock()
	p := &pending{turnID: rec.TurnID, started: true, resume: true}
	ts := s.newTurnState(rec.TurnID)
	ts.pausedRec.Store(true)
	l.running = ts
	s.turns.Store(id, ts)
	l.mu.Unlock()
	if by != nil {
		by(ts)
	}
	s.recordOpenTurns(ctx, l)
	go s.actor(l, p)
	return nil
}

// PickUpPaused restarts here the turns their budget paused that a stopped
// daemon left (this daemon's previous run, or one of a cluster whose lease
// ran out), so that a person is asked again to raise the budget
// (askBudget) while they wait. The daemon calls it once it serves; later,
// RecoverOpenTurns picks up the paused turns of the sessions it takes over.
// A session another daemon holds is left to it.
func (s *Service) PickUpPaused(ctx context.Context) {
	s.pickUp.Store(true)
	for id := range s.pausedSessions(ctx, "") {
		if s.liveSession(id) != nil {
			continue
		}
		if err := s.revive(ctx, id, nil); err != nil {
			s.deps.Log.Debug("budget: a paused turn was not picked up", "sessionId", id, "err", err)
		}
	}
}

// turnBudget is a turn's agent.Budget.
type turnBudget struct {
	s  *Service
	l  *live
	ts *turnState
	id string
}

func (b turnBudget) Check(ctx context.Context, _ string, next agent.Estimate) (agent.BudgetState, error) {
	changed := b.l.changed() // before the read: a change after it wakes the wait
	b.l.mu.Lock()
	row := b.l.row
	b.l.mu.Unlock()
	st, err := b.s.budgetState(ctx, row, next)
	st.Changed = changed
	if err == nil && st.Reached && st.Budget.Source == events.BudgetSourcePrincipal {
		st.Changed = orAfter(changed, b.s.principalRecheck())
	}
	if err == nil {
		b.s.askBudget(b.ts, row, st, next)
	}
	return st, err
}

// askBudget keeps a person asked, once per pause, to raise the budget the
// turn of ts is paused at: while st is reached, a request waits in the
// unattended approval queue (approval.BudgetTool) whose allow raises the
// budget (the session's own, or its principal's when that one binds) to
// the limits it offers, and whose deny ends the turn; a check that finds
// the budget no longer reached withdraws it. The request also ends with
// the turn (its context is the turn's). Unanswered within the approval
// timeout it ends, and the turn stays paused.
func (s *Service) askBudget(ts *turnState, row store.Session, st agent.BudgetState, next agent.Estimate) {
	if s.deps.Approvals == nil {
		return
	}
	ts.askMu.Lock()
	defer ts.askMu.Unlock()
	if !st.Reached {
		if ts.withdraw != nil {
			ts.withdraw()
		}
		ts.asked, ts.withdraw = false, nil
		return
	}
	if ts.asked {
		return
	}
	ts.asked = true
	ctx, withdraw := context.WithCancel(ts.ctx)
	ts.withdraw = withdraw
	budget, _ := json.Marshal(st.Budget)
	spent, _ := json.Marshal(st.Spent)
	args := approval.BudgetArgs{Reason: events.TurnPausedReasonBudgetReached, Budget: budget, Spent: spent, RaiseTo: raiseTo(st, next)}
	q := approval.Question{SessionID: row.SessionID, Workdir: row.Workdir, Kind: row.Kind, JobID: row.JobID, TurnID: ts.id}
	go func() {
		defer withdraw()
		res, err := s.deps.Approvals.AskBudget(ctx, q, args)
		if err != nil || ctx.Err() != nil {
			return
		}
		s.budgetAnswered(ts, row, st.Budget, args.RaiseTo, res)
	}()
}

// budgetAnswered carries out a person's answer to a paused turn's budget
// request: an allow raises the budget that binds to raise (the session's
// own budget, or the principal's), a deny ends the turn, named for who
// denied it. An answer nobody typed (timeout, shutdown) changes nothing.
func (s *Service) budgetAnswered(ts *turnState, row store.Session, b events.Budget, raise approval.BudgetLimits, res approval.Resolution) {
	switch res.By {
	case approval.ByTimeout, approval.ByInterrupt, approval.ByDisconnect, approval.ByShutdown:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var by *events.PrincipalRef
	if res.PrincipalID != "" {
		by = &events.PrincipalRef{ID: res.PrincipalID, Name: res.PrincipalName}
	}
	if res.Decision != approval.DecisionAllow {
		ts.interrupted.Store(true)
		ts.interruptedBy.CompareAndSwap(nil, by)
		ts.cancel()
		s.deps.Log.InfoContext(ctx, "budget: the raise was denied, the paused turn ends", "sessionId", row.SessionID, "turnId", ts.id, "by", res.By, "principal", res.PrincipalName)
		return
	}
	lim := Limits{MaxCostMicroUSD: raise.MaxCostMicroUSD, MaxTokens: raise.MaxTokens}
	var err error
	if b.Source == events.BudgetSourcePrincipal && b.PrincipalID != nil {
		_, err = s.SetPrincipalBudget(ctx, *b.PrincipalID, lim)
	} else {
		_, err = s.SetBudget(ctx, row.SessionID, lim)
	}
	if err != nil {
		s.deps.Log.ErrorContext(ctx, "budget: the raise an approval allowed could not be set", "sessionId", row.SessionID, "turnId", ts.id, "err", err)
		em := emitter{events: s.deps.Events, id: row.SessionID, svc: s, turn: ts}
		_ = em.Emit(ctx, eventkind.Error, events.ErrorEvent{Code: errs.CodeOf(err), Message: "the budget raise that " + res.By + " allowed could not be set: " + err.Error()})
		return
	}
	s.deps.Log.InfoContext(ctx, "budget: raised by an approval", "sessionId", row.SessionID, "turnId", ts.id, "source", b.Source, "by", res.By, "principal", res.PrincipalName)
}

// raiseTo is what a budget request offers: each limit of st's budget that
// the next call would pass raised by one more budget's worth (at least the
// call's estimate), from what was spent when that is over the limit; the
// others as they are.
func raiseTo(st agent.BudgetState, next agent.Estimate) approval.BudgetLimits {
	raise := func(limit *int64, spent, next int64) *int64 {
		if limit == nil {
			return nil
		}
		v := *limit
		if spent >= v || spent+next > v {
			v = max(v, spent) + max(v, next, 1)
		}
		return &v
	}
	return approval.BudgetLimits{
		MaxCostMicroUSD: raise(st.Budget.MaxCostMicroUsd, st.Spent.CostMicroUsd, next.CostMicroUSD),
		MaxTokens:       raise(st.Budget.MaxTokens, st.Spent.Tokens, next.Tokens),
	}
}

// principalRecheck is how often a turn paused by its principal's budget
// checks it again.
func (s *Service) principalRecheck() time.Duration {
	if s.deps.PrincipalRecheck > 0 {
		return s.deps.PrincipalRecheck
	}
	return DefaultPrincipalRecheck
}

// orAfter returns a channel closed when ch is closed or after d.
func orAfter(ch <-chan struct{}, d time.Duration) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
		}
		close(out)
	}()
	return out
}

func (b turnBudget) Paused(ctx context.Context, turnID string, st agent.BudgetState) error {
	raw, _ := json.Marshal(pausedTurn{TurnID: turnID, Budget: st.Budget, Spent: st.Spent})
	if err := b.s.deps.Store.PutSetting(ctx, b.s.writer(b.id), pausedNamespace, b.id, raw); err != nil {
		return fmt.Errorf("record the paused turn: %w", err)
	}
	b.ts.pausedRec.Store(true)
	return nil
}

func (b turnBudget) Resumed(ctx context.Context, _ string) error {
	if err := b.s.clearPaused(ctx, b.id); err != nil {
		return err
	}
	b.ts.pausedRec.Store(false)
	return nil
}

func (b turnBudget) Detach() bool {
	return b.s.stopping() || b.s.owning(b.id) != nil
}
