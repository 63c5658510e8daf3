package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/auth"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// The allowlist scopes (PROTOCOL.md §4). An entry of scope session covers
// one session, project one workdir, always every session.
const (
	ScopeSession = store.ScopeSession
	ScopeProject = store.ScopeProject
	ScopeAlways  = store.ScopeAlways
)

// DefaultAllowlistScope is the scope of a pattern added without one.
const DefaultAllowlistScope = ScopeProject

// ErrBadScope is the cause of the invalid_params error for an unknown scope
// or a scope whose workdir or session id is missing.
var ErrBadScope = errors.New("bad allowlist scope")

// Allowlist reads and edits the allowlist patterns that pre-approve calls.
// It keeps no state of its own: the store is the truth, so any number of
// Allowlists (and Brokers) may share one store and see each other's changes
// at once, also across daemons sharing a database.
type Allowlist struct {
	st  store.AllowlistStore
	log *slog.Logger
	now func() time.Time
}

// NewAllowlist returns the allowlist kept in st. A nil log discards.
func NewAllowlist(st store.AllowlistStore, log *slog.Logger) *Allowlist {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Allowlist{st: st, log: log, now: time.Now}
}

// Allowed reports whether an entry covers a call of tool with args in the
// session sessionID whose workdir is workdir: an always entry, a project
// entry of that workdir, or a session entry of that session. A store failure
// is logged and reported as false, so that the call is asked about rather
// than run (fail closed).
func (a *Allowlist) Allowed(ctx context.Context, sessionID, workdir, tool string, args json.RawMessage) bool {
	filters := []store.PatternFilter{{Scope: ScopeAlways}}
	if workdir != "" {
		filters = append(filters, store.PatternFilter{Scope: ScopeProject, Workdir: cleanWorkdir(workdir)})
	}
	if sessionID != "" {
		filters = append(filters, store.PatternFilter{Scope: ScopeSession, SessionID: sessionID})
	}
	for _, f := range filters {
		entries, err := a.st.ListPatterns(ctx, f)
		if err != nil {
			a.log.Warn("allowlist: cannot read patterns; asking instead", "scope", f.Scope, "err", err)
			return false
		}
		for _, e := range entries {
			p, err := ParsePattern(e.Pattern)
			if err != nil {
				a.log.Warn("allowlist: skipping a stored pattern that no longer parses",
					"patternId", e.PatternID, "pattern", e.Pattern, "err", err)
				continue
			}
			if p.Matches(tool, args, workdir) {
				return true
			}
		}
	}
	return false
}

// Add stores pattern (`tool` or `tool(glob)`) with scope session, project or
// always ("" = DefaultAllowlistScope) and returns its id ("p-…"). A project
// entry needs a workdir (a relative one is taken from the daemon's working
// directory), a session entry a sessionID (its workdir is kept when given,
// so that listing by workdir shows it); an always entry keeps neither.
// Adding an entry that already exists returns the existing id (and keeps
// who added it first). by is the principal adding it, recorded with the
// entry (the zero Principal: none). A bad pattern or scope is
// invalid_params.
func (a *Allowlist) Add(ctx context.Context, pattern, scope, workdir, sessionID string, by auth.Principal) (string, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return "", err
	}
	if scope == "" {
		scope = DefaultAllowlistScope
	}
	if scope == ScopeSite { // protocol 1.x: the whole daemon
		scope = ScopeAlways
	}
	if err := validScope(scope); err != nil {
		return "", err
	}
	switch scope {
	case ScopeAlways:
		workdir, sessionID = "", ""
	case ScopeProject:
		if workdir == "" {
			return "", errs.Wrap(errcode.InvalidParams, ErrBadScope,
				"a project-scoped pattern needs a workdir: pass workdir, or use scope always")
		}
		sessionID = ""
	case ScopeSession:
		if sessionID == "" {
			return "", errs.Wrap(errcode.InvalidParams, ErrBadScope,
				"a session-scoped pattern needs a sessionId: pass sessionId, or use scope project")
		}
	}
	if workdir != "" {
		if workdir, err = absWorkdir(workdir); err != nil {
			return "", err
		}
	}
	entry := store.Pattern{
		PatternID: ids.New("p"), Pattern: p.String(), Scope: scope,
		Workdir: workdir, SessionID: sessionID, CreatedAt: a.now().UTC(),
		PrincipalID: by.ID, PrincipalName: by.Name,
	}
	// The store adds the entry unless it exists, in one step: two daemons
	// (or clients) adding the same pattern at once get one entry and one id.
	id, err := a.st.AddPattern(ctx, entry)
	if err != nil {
		return "", fmt.Errorf("allowlist: add %s: %w", entry.Pattern, err)
	}
	if id == entry.PatternID {
		a.log.Info("allowlist: pattern added", "patternId", id, "pattern", entry.Pattern,
			"scope", scope, "workdir", workdir, "sessionId", sessionID, "principal", by.ID)
	}
	return id, nil
}

// List returns the entries of scope ("" = every scope) stored for workdir
// ("" = any workdir; an always entry has none), oldest first.
func (a *Allowlist) List(ctx context.Context, scope, workdir string) ([]store.Pattern, error) {
	if scope != "" {
		if err := validScope(scope); err != nil {
			return nil, err
		}
	}
	if workdir != "" {
		var err error
		if workdir, err = absWorkdir(workdir); err != nil {
			return nil, err
		}
	}
	entries, err := a.st.ListPatterns(ctx, store.PatternFilter{Scope: scope, Workdir: workdir})
	if err != nil {
		return nil, fmt.Errorf("allowlist: list: %w", err)
	}
	return entries, nil
}

// Remove deletes the entry with id patternID; an unknown id is not_found.
func (a *Allowlist) Remove(ctx context.Context, patternID string) error {
	err := a.st.RemovePattern(ctx, patternID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errs.Wrap(errcode.NotFound, err, "no allowlist pattern %q: permission.allowlist.list shows the ids", patternID)
	case err != nil:
		return fmt.Errorf("allowlist: remove %s: %w", patternID, err)
	}
	a.log.Info("allowlist: pattern removed", "patternId", patternID)
	return nil
}

func validScope(scope string) error {
	switch scope {
	case ScopeSession, ScopeProject, ScopeAlways:
		return nil
	case ScopeOnce:
		return errs.Wrap(errcode.InvalidParams, ErrBadScope,
			"scope once is an answer's scope, not an allowlist scope: use session, project or always")
	}
	return errs.Wrap(errcode.InvalidParams, ErrBadScope, "unknown scope %q: use session, project or always", scope)
}

// absWorkdir makes workdir absolute and clean, as session.create does, so
// that entries and calls compare equal.
func absWorkdir(workdir string) (string, error) {
	abs, err := filepath.Abs(workdir)
	if err != nil {
		return "", errs.Wrap(errcode.InvalidParams, err, "workdir %q: %v", workdir, err)
	}
	return abs, nil
}

// cleanWorkdir is absWorkdir for lookups, where a failure just means no
// project entry can match.
func cleanWorkdir(workdir string) string {
	if abs, err := filepath.Abs(workdir); err == nil {
		return abs
	}
	return filepath.Clean(workdir)
}
