package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Sentinel errors; backends wrap them with %w and a message naming the entity.
var (
	// ErrNotFound means the addressed row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a row with the same key already exists.
	ErrConflict = errors.New("already exists")
	// ErrInvalid means the caller passed a value the store cannot keep
	// (a missing id, an unknown kind or scope, malformed JSON).
	ErrInvalid = errors.New("invalid value")
	// ErrCannotWrite means the store refused a write because its disk is
	// full or it is read-only; nothing of the write was kept.
	ErrCannotWrite = errors.New("the store cannot write: its disk is full or it is read-only")
	// ErrBusy: a write waited for the store's write lock past the store's
	// limit (another process holds it); nothing was changed.
	ErrBusy = errors.New("the store stayed locked by another writer")
	// ErrTimeout: a write waited past its deadline (a lock held elsewhere,
	// a statement past its timeout) and was rolled back or abandoned.
	ErrTimeout = errors.New("the store did not complete the write in time")
	// ErrHistoryUnknown: the history asked for is older than the session's
	// history journal (a session stored before the journal existed).
	ErrHistoryUnknown = errors.New("the history at that event predates the session's history journal")
)

// CannotWrite reports whether err is a write the store refused for lack of
// space or permission (ErrCannotWrite, or the operating system's ENOSPC,
// EDQUOT or EROFS anywhere in its chain).
func CannotWrite(err error) bool {
	return errors.Is(err, ErrCannotWrite) || errors.Is(err, syscall.ENOSPC) ||
		errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}

// Store is the whole persistent state of a daemon. Implementations are safe
// for concurrent use.
type Store interface {
	SessionStore
	EventStore
	UsageStore
	HistoryStore
	AllowlistStore
	AuditStore
	SettingStore
	MemoryStore
	ClusterStore
	PrincipalStore
	ReceiptStore
	ProviderLimitStore
	CheckpointStore
	SessionImporter

	// DeleteSessions deletes the sessions' rows, events, history and leases in one
	// transaction under w (a fence on each id, or Unfenced) and returns how
	// many session rows it deleted. Unknown ids are skipped, not an error.
	DeleteSessions(ctx context.Context, w Writer, ids []string) (int, error)

	// Ping reports whether the store answers a query now: the daemon's
	// readiness (GET /ready) is false while it does not.
	Ping(ctx context.Context) error

	// Close releases the backend's resources.
	Close() error
}

// Session kinds.
const (
	KindChat      = "chat"
	KindScheduled = "scheduled"
	KindSubagent  = "subagent"
)

// Session is one saved session row. Empty strings mean "none".
type Session struct {
	SessionID       string
	Workdir         string
	Mode            string
	Provider        string
	Model           string
	Agent           string
	Kind            string // KindChat, KindScheduled or KindSubagent
	ParentSessionID string
	JobID           string
	Title           string
	LastPrompt      string
	CreatedAt       time.Time
	LastActivityAt  time.Time // zero = no activity yet
	Closed          bool
	// Archived: the session is read-only and listed apart
	// (docs/export.md).
	Archived bool
	Backend  json.RawMessage // nil = none (the local backend)
	// Owner is the principal that created the session ("" = the daemon
	// token, or the daemon itself: jobs, gateway, sub-agents).
	Owner string
	// Workspace is WorkspaceManaged when the daemon made the workdir and
	// each daemon keeps its own copy, rebuilt from the session's
	// checkpoints; "" when the creator named the workdir.
	Workspace string

	// LastSeq is the seq of the session's latest stored event (0 = none).
	// GetSession and ListSessions fill it; CreateSession ignores it.
	LastSeq int64
}

// WorkspaceManaged is Session.Workspace of a session whose workdir the
// daemon manages (docs/workspaces.md).
const WorkspaceManaged = "managed"

// Validate reports whether s can be stored.
func (s Session) Validate() error {
	if s.SessionID == "" {
		return fmt.Errorf("session: empty id: %w", ErrInvalid)
	}
	switch s.Kind {
	case KindChat, KindScheduled, KindSubagent:
	default:
		return fmt.Errorf("session %s: unknown kind %q: %w", s.SessionID, s.Kind, ErrInvalid)
	}
	if s.Workspace != "" && s.Workspace != WorkspaceManaged {
		return fmt.Errorf("session %s: unknown workspace %q: %w", s.SessionID, s.Workspace, ErrInvalid)
	}
	if s.Backend != nil && !json.Valid(s.Backend) {
		return fmt.Errorf("session %s: backend is not valid JSON: %w", s.SessionID, ErrInvalid)
	}
	return nil
}

// SessionFilter selects sessions for ListSessions.
type SessionFilter struct {
	IncludeClosed bool
	// Archived lists the archived sessions only; without it they are
	// left out.
	Archived bool
	Workdir  string // "" = any
	// VisibleTo keeps only the sessions this principal owns or was
	// granted ("" = every session).
	VisibleTo string
}

// SessionUpdate lists the fields UpdateSession changes; nil fields are left
// as they are.
type SessionUpdate struct {
	Mode           *string
	Provider       *string
	Model          *string
	Title          *string
	LastPrompt     *string
	LastActivityAt *time.Time // a zero time clears it
	Closed         *bool
	Archived       *bool
	Backend        *json.RawMessage // nil inside the pointer clears it
}

// Validate reports whether u can be applied.
func (u SessionUpdate) Validate() error {
	if u.Backend != nil && *u.Backend != nil && !json.Valid(*u.Backend) {
		return fmt.Errorf("session update: backend is not valid JSON: %w", ErrInvalid)
	}
	return nil
}

// SessionStore keeps session rows.
type SessionStore interface {
	// CreateSession inserts s; an existing id is ErrConflict.
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns the session or ErrNotFound.
	GetSession(ctx context.Context, sessionID string) (Session, error)
	// ListSessions returns the matching sessions, newest (CreatedAt) first.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
	// UpdateSession applies u under w; an unknown id is ErrNotFound.
	UpdateSession(ctx context.Context, w Writer, sessionID string, u SessionUpdate) error
}

// Event is one stored session event. Seq starts at 1 per session; the store
// keeps (SessionID, Seq) unique but leaves contiguity to runtime/eventlog.
type Event struct {
	SessionID string
	Seq       int64
	Kind      string
	Payload   json.RawMessage
	TS        time.Time
	// Unstored is set only on an event the event log delivers from memory
	// because the store could not take it (disk full, read-only,
	// unreachable); the log stores it under the same seq once the store
	// works again. Stores ignore it and never set it.
	Unstored bool
	// Retracted is set only on a notice the event log sends from memory
	// when this daemon lost the session's lease (eventlog.Log.Retract):
	// never stored; its seq follows the last stored event the reader got,
	// and every unstored event it got from there on is void. Stores
	// ignore it and never set it.
	Retracted bool
}

// Validate reports whether e can be stored.
func (e Event) Validate() error {
	switch {
	case e.SessionID == "":
		return fmt.Errorf("event: empty session id: %w", ErrInvalid)
	case e.Seq < 1:
		return fmt.Errorf("event %s/%d: seq must be at least 1: %w", e.SessionID, e.Seq, ErrInvalid)
	case e.Kind == "":
		return fmt.Errorf("event %s/%d: empty kind: %w", e.SessionID, e.Seq, ErrInvalid)
	case e.Payload != nil && !json.Valid(e.Payload):
		return fmt.Errorf("event %s/%d: payload is not valid JSON: %w", e.SessionID, e.Seq, ErrInvalid)
	}
	return nil
}

// ValidateEvents reports the first event of evs that cannot be stored.
func ValidateEvents(evs []Event) error {
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateHistory reports whether msgs, history of sessionID, can be
// stored: each must be valid JSON.
func ValidateHistory(sessionID string, msgs []json.RawMessage) error {
	for i, m := range msgs {
		if !json.Valid(m) {
			return fmt.Errorf("history of %s: message %d is not valid JSON: %w", sessionID, i, ErrInvalid)
		}
	}
	return nil
}

// EventStore keeps the per-session event log.
type EventStore interface {
	// AppendEvents stores evs, which may span sessions, in one transaction
	// under w (a fence on each of their sessions, or Unfenced): either every
	// event is written or none is. An existing (SessionID, Seq) is
	// ErrConflict, a session without a row is ErrNotFound, a bad event is
	// ErrInvalid.
	AppendEvents(ctx context.Context, w Writer, evs []Event) error
	// ReadEvents returns the session's events with Seq > afterSeq in
	// ascending order, at most limit of them (limit <= 0: all). An unknown
	// session has no events.
	ReadEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Event, error)
	// ScanEvents reads as ReadEvents does with no allocation per row:
	// ReadEvents' rows, in the same order and with the same limit rules,
	// each handed to fn as it is read. An error from fn stops the read and
	// is returned as it is. The event log reads with it only.
	ScanEvents(ctx context.Context, sessionID string, afterSeq int64, limit int, fn func(*EventRow) error) error
	// LastSeq returns the highest stored seq of the session, 0 if none.
	LastSeq(ctx context.Context, sessionID string) (int64, error)
}

// EventRow is one stored event as ScanEvents reads it. Kind and
// Payload point into the store's buffers: valid only until the callback
// returns.
type EventRow struct {
	Seq     int64
	Kind    []byte
	Payload []byte // the stored JSON ("null" for a nil payload)
	TS      time.Time
}

// HistoryStore keeps the model-facing conversation of each session: an
// ordered list of provider-neutral messages, opaque to the store.
type HistoryStore interface {
	// AppendHistory adds msgs at the end under w; a session without a row
	// is ErrNotFound.
	AppendHistory(ctx context.Context, w Writer, sessionID string, msgs []json.RawMessage) error
	// LoadHistory returns every message in order (none for an unknown session).
	LoadHistory(ctx context.Context, sessionID string) ([]json.RawMessage, error)
	// ReplaceHistory swaps the whole history for msgs in one transaction
	// under w (compaction); a session without a row is ErrNotFound.
	ReplaceHistory(ctx context.Context, w Writer, sessionID string, msgs []json.RawMessage) error
	// HistoryAt returns the history the session had when its latest stored
	// event was seq: each append and replace is journaled with the seq of
	// the session's latest stored event at that moment, and the journal's
	// writes of seq at most seq are replayed. ErrHistoryUnknown when seq
	// comes before the journal began (a session stored before it existed).
	HistoryAt(ctx context.Context, sessionID string, seq int64) ([]json.RawMessage, error)
	// HistoryJournal returns the session's journal entries by N (none for
	// an unknown session or one never journaled): what HistoryAt replays,
	// and what an exported session carries.
	HistoryJournal(ctx context.Context, sessionID string) ([]JournalEntry, error)
}

// Operations of the history journal (JournalEntry.Op).
const (
	// JournalBase: the history the session had when its journal began.
	JournalBase = "base"
	// JournalAppend: messages added at the end.
	JournalAppend = "append"
	// JournalReplace: the whole history replaced (compaction, rewind).
	JournalReplace = "replace"
)

// JournalEntry is one write of a session's history journal: N counts the
// session's entries from 1, Seq is the seq of the session's latest stored
// event when it was written, Messages a JSON array of messages.
type JournalEntry struct {
	N        int64
	Seq      int64
	Op       string
	Messages json.RawMessage
}

// Validate reports whether e can follow an entry numbered prev of seq
// prevSeq (prev 0: e is the first, which must be a JournalBase).
func (e JournalEntry) Validate(prev, prevSeq int64) error {
	var msgs []json.RawMessage
	switch {
	case e.N != prev+1:
		return fmt.Errorf("history journal entry %d after %d: %w", e.N, prev, ErrInvalid)
	case e.Seq < prevSeq:
		return fmt.Errorf("history journal entry %d: seq %d before %d: %w", e.N, e.Seq, prevSeq, ErrInvalid)
	case (prev == 0) != (e.Op == JournalBase) || (e.Op != JournalBase && e.Op != JournalAppend && e.Op != JournalReplace):
		return fmt.Errorf("history journal entry %d: op %q out of place: %w", e.N, e.Op, ErrInvalid)
	case json.Unmarshal(e.Messages, &msgs) != nil || msgs == nil:
		return fmt.Errorf("history journal entry %d: messages are not a JSON array: %w", e.N, ErrInvalid)
	}
	return nil
}

// Allowlist pattern scopes.
const (
	ScopeSession = "session"
	ScopeProject = "project"
	ScopeAlways  = "always"
)

// Pattern is one allowlist entry, e.g. "shell(git status*)".
type Pattern struct {
	PatternID string
	Pattern   string
	Scope     string // ScopeSession, ScopeProject or ScopeAlways
	Workdir   string // "" = none
	SessionID string // "" = none
	CreatedAt time.Time
	// PrincipalID and PrincipalName name the principal who added the entry
	// (with permission.allowlist.add, or by answering an approval with a
	// wider scope than once), its name then; "" when none did (entries
	// stored before principals were recorded).
	PrincipalID   string
	PrincipalName string
}

// Validate reports whether p can be stored.
func (p Pattern) Validate() error {
	switch {
	case p.PatternID == "":
		return fmt.Errorf("pattern: empty id: %w", ErrInvalid)
	case p.Pattern == "":
		return fmt.Errorf("pattern %s: empty pattern: %w", p.PatternID, ErrInvalid)
	}
	switch p.Scope {
	case ScopeSession, ScopeProject, ScopeAlways:
		return nil
	}
	return fmt.Errorf("pattern %s: unknown scope %q: %w", p.PatternID, p.Scope, ErrInvalid)
}

// PatternFilter selects patterns for ListPatterns; empty fields match any.
type PatternFilter struct {
	Scope     string
	Workdir   string
	SessionID string
}

// AllowlistStore keeps allowlist patterns.
type AllowlistStore interface {
	// AddPattern inserts p unless an entry with the same pattern, scope,
	// workdir and session id exists, atomically (two daemons adding the same
	// entry at once store it once), and returns the id of the stored entry:
	// p.PatternID, or the existing entry's. An existing id with another
	// entry is ErrConflict.
	AddPattern(ctx context.Context, p Pattern) (string, error)
	// ListPatterns returns the matching patterns, oldest first.
	ListPatterns(ctx context.Context, f PatternFilter) ([]Pattern, error)
	// RemovePattern deletes one pattern; an unknown id is ErrNotFound.
	RemovePattern(ctx context.Context, patternID string) error
}

// AuditEntry is one resolved approval, kept forever (also after its session
// is deleted).
type AuditEntry struct {
	ID        int64 // assigned by AppendAudit, rising
	RequestID string
	SessionID string
	Tool      string
	Args      json.RawMessage
	Decision  string // "allow" or "deny"
	Scope     string // "once", "session", "project", "always"
	By        string // who answered: a connection or client id, "policy", "timeout"
	Reason    string
	At        time.Time
}

// Validate reports whether e can be stored.
func (e AuditEntry) Validate() error {
	if e.Args != nil && !json.Valid(e.Args) {
		return fmt.Errorf("audit entry for request %s: args are not valid JSON: %w", e.RequestID, ErrInvalid)
	}
	return nil
}

// AuditStore is the append-only approval audit log.
type AuditStore interface {
	// AppendAudit stores e (its ID is ignored) and returns the assigned ID.
	AppendAudit(ctx context.Context, e AuditEntry) (int64, error)
	// ListAudit returns the session's entries in ID order; "" lists all.
	ListAudit(ctx context.Context, sessionID string) ([]AuditEntry, error)
}

// Setting is one key/value pair of a namespace (e.g. "providers").
type Setting struct {
	Namespace string
	Key       string
	Value     json.RawMessage
}

// Validate reports whether s can be stored.
func (s Setting) Validate() error {
	switch {
	case s.Namespace == "" || s.Key == "":
		return fmt.Errorf("setting %q/%q: empty namespace or key: %w", s.Namespace, s.Key, ErrInvalid)
	case s.Value != nil && !json.Valid(s.Value):
		return fmt.Errorf("setting %s/%s: value is not valid JSON: %w", s.Namespace, s.Key, ErrInvalid)
	}
	return nil
}

// SettingStore is a small JSON key/value table grouped by namespace. Its
// writes are made under a Writer: the settings a lease guards (a session's
// open turn, a binding's offset) under its fence, shared ones Unfenced.
type SettingStore interface {
	// PutSetting inserts or replaces the value under w.
	PutSetting(ctx context.Context, w Writer, namespace, key string, value json.RawMessage) error
	// GetSetting returns the value or ErrNotFound.
	GetSetting(ctx context.Context, namespace, key string) (json.RawMessage, error)
	// ListSettings returns the namespace's settings ordered by key.
	ListSettings(ctx context.Context, namespace string) ([]Setting, error)
	// DeleteSetting removes the value under w; an unknown key is ErrNotFound.
	DeleteSetting(ctx context.Context, w Writer, namespace, key string) error
}

// Memory is one stored note (memory.write).
type Memory struct {
	ID        string
	Text      string
	Tags      []string // nil is stored as none
	Namespace string
	CreatedAt time.Time
}

// StoredTags returns the tags as the backends store them: an empty list,
// not null, when there are none.
func (m Memory) StoredTags() []string {
	if m.Tags == nil {
		return []string{}
	}
	return m.Tags
}

// Validate reports whether m can be stored.
func (m Memory) Validate() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("memory: empty id: %w", ErrInvalid)
	case m.Text == "":
		return fmt.Errorf("memory %s: empty text: %w", m.ID, ErrInvalid)
	case m.Namespace == "":
		return fmt.Errorf("memory %s: empty namespace: %w", m.ID, ErrInvalid)
	}
	return nil
}

// MemoryHit is a note SearchMemory found, with its relevance.
type MemoryHit struct {
	Memory
	// Score is the note's full-text relevance to the query: higher is
	// better. Scores compare within one search only; their scale is the
	// backend's own.
	Score float64
}

// MemoryStore keeps notes and finds them by full-text relevance. Both text
// and tags are searched; words are the runs Words finds, so every backend
// matches the same notes.
type MemoryStore interface {
	// WriteMemory inserts m; an existing id is ErrConflict.
	WriteMemory(ctx context.Context, m Memory) error
	// SearchMemory returns the notes of namespace ("" = every namespace)
	// holding at least one word of query, most relevant first (notes with
	// more, and more frequent, query words rank higher; ties newest
	// first), at most limit of them (limit <= 0: all). A query without a
	// word matches nothing; a blank query is ErrInvalid. Nothing in query
	// is syntax: quotes and operators are only separators.
	SearchMemory(ctx context.Context, query string, limit int, namespace string) ([]MemoryHit, error)
	// ListMemory returns the notes of namespace ("" = every namespace),
	// newest first (ties by id), at most limit of them (limit <= 0: all).
	ListMemory(ctx context.Context, namespace string, limit int) ([]Memory, error)
	// DeleteMemory removes the note and its index entry; an unknown id is
	// ErrNotFound.
	DeleteMemory(ctx context.Context, id string) error
}
