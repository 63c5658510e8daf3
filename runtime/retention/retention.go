package retention

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Groupings of the keep-latest rule.
const (
	PerWorkdir = "workdir"
	PerAgent   = "agent"
)

// ManagedGroup is the workdir group of the sessions whose workdir the
// daemon manages: each has a directory of its own, so they are ranked
// together rather than each alone (where keep-latest would keep them all).
const ManagedGroup = "(managed)"

// DefaultAgentGroup is the agent group of sessions created without an
// agent definition.
const DefaultAgentGroup = "(default)"

// ErrNoRule: a policy without any keep rule keeps nothing, and is refused
// rather than applied.
var ErrNoRule = errors.New("no retention rule: a policy needs a keep-within age or a keep-latest count (with neither it would delete every session)")

// Policy is a set of keep rules. The zero Policy has none: retention is
// off.
type Policy struct {
	// Within keeps the sessions whose last activity is at most this old
	// (0 = no such rule).
	Within time.Duration
	// Latest keeps the Latest most recently active sessions of each group
	// (0 = no such rule).
	Latest int
	// Per groups sessions for Latest: PerWorkdir ("" means it) or PerAgent.
	Per string
}

// Off reports whether p has no rule: it deletes nothing, ever.
func (p Policy) Off() bool { return p.Within <= 0 && p.Latest <= 0 }

// Validate reports what is wrong with p; a policy without a rule is
// ErrNoRule.
func (p Policy) Validate() error {
	var problems []error
	if p.Within < 0 {
		problems = append(problems, fmt.Errorf("keep-within %v: want a positive duration", p.Within))
	}
	if p.Latest < 0 {
		problems = append(problems, fmt.Errorf("keep-latest %d: want 1 or more", p.Latest))
	}
	if p.Per != "" && p.Per != PerWorkdir && p.Per != PerAgent {
		problems = append(problems, fmt.Errorf("per %q: want workdir or agent", p.Per))
	}
	if len(problems) == 0 && p.Off() {
		return ErrNoRule
	}
	return errors.Join(problems...)
}

// Session is what the policy reads of one stored session.
type Session struct {
	ID string
	// LastActivity is when its last turn started, else when it was
	// created.
	LastActivity time.Time
	// Workdir is its workdir ("" or ManagedGroup for a managed one), Agent
	// its agent definition ("" = the default).
	Workdir, Agent string
	// Managed: the daemon manages its workdir (grouped as ManagedGroup).
	Managed bool
	// Archived sessions are outside retention: never deleted, not ranked.
	Archived bool
	// Busy says why the session cannot be deleted now ("" = it can): a
	// running turn, a pending approval. It is ranked like any other, and
	// selected like any other for the caller to skip.
	Busy string
}

// Group is the session's group under per.
func (s Session) Group(per string) string {
	if per == PerAgent {
		return cmp.Or(s.Agent, DefaultAgentGroup)
	}
	if s.Managed {
		return ManagedGroup
	}
	return s.Workdir
}

// Deletion is one session a policy does not keep.
type Deletion struct {
	Session Session
	// Reason says why no rule kept it.
	Reason string
}

// Select returns the sessions p keeps none of, as of now, oldest activity
// first. Archived sessions are never among them; busy ones are (their
// Session.Busy says why they cannot go now), and the caller skips them.
// A policy without a rule selects nothing.
func Select(p Policy, now time.Time, sessions []Session) []Deletion {
	if p.Off() {
		return nil
	}
	ranked := slices.Clone(sessions)
	ranked = slices.DeleteFunc(ranked, func(s Session) bool { return s.Archived })
	// Most recent first; equal times by id, so that the choice does not
	// depend on the order the store listed them in.
	slices.SortStableFunc(ranked, func(a, b Session) int {
		if c := b.LastActivity.Compare(a.LastActivity); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	seen := map[string]int{}
	var out []Deletion
	for _, s := range ranked {
		g := s.Group(p.Per)
		seen[g]++
		var why []string
		if p.Within > 0 {
			age := now.Sub(s.LastActivity)
			if age <= p.Within {
				continue
			}
			why = append(why, fmt.Sprintf("last active %s ago, past the %s kept", roundAge(age), p.Within))
		}
		if p.Latest > 0 {
			if seen[g] <= p.Latest {
				continue
			}
			why = append(why, fmt.Sprintf("not among the %d latest of its %s %s", p.Latest, cmp.Or(p.Per, PerWorkdir), g))
		}
		out = append(out, Deletion{Session: s, Reason: strings.Join(why, "; ")})
	}
	slices.Reverse(out)
	return out
}

// roundAge shows an age to the second, or to the hour past a day.
func roundAge(d time.Duration) time.Duration {
	if d >= 24*time.Hour {
		return d.Round(time.Hour)
	}
	return d.Round(time.Second)
}
