package sessionfile

import (
	"encoding/json"
	"errors"
	"time"
)

// Format and Version name the file format in its header line. Version 2
// added the history journal; a file of version 1 (none) still imports.
const (
	Format  = "trellis-session"
	Version = 2
)

// ErrCorrupt is a file Import refuses: not this format, truncated, a
// checksum or count that does not match, a record out of place. Nothing
// was imported.
var ErrCorrupt = errors.New("not a valid trellis session file")

// maxLine bounds one line of a file: a record holds one event, history
// message or blob chunk.
const maxLine = 64 << 20

type header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// record is one line between the header and the trailer; T names its kind.
type record struct {
	T string `json:"t"`

	Session *sessionRecord `json:"session,omitempty"`

	// event: Payload is the stored JSON text, as a string so that its
	// bytes come back exactly.
	Seq     int64      `json:"seq,omitempty"`
	Kind    string     `json:"kind,omitempty"`
	TS      *time.Time `json:"ts,omitempty"`
	Payload *string    `json:"payload,omitempty"`

	// history
	Message *string `json:"message,omitempty"`

	// journal (N numbers it, Seq is its seq): Messages is the stored JSON
	// array, as a string.
	Op       string  `json:"op,omitempty"`
	Messages *string `json:"messages,omitempty"`

	// blob and chunk
	Hash   string `json:"hash,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Stored int64  `json:"stored,omitempty"`
	N      int    `json:"n,omitempty"`
	Data   []byte `json:"data,omitempty"`

	Checkpoint *checkpointRecord `json:"checkpoint,omitempty"`

	// end
	Counts *Counts `json:"counts,omitempty"`
	SHA256 string  `json:"sha256,omitempty"`
}

// Record kinds.
const (
	tSession    = "session"
	tEvent      = "event"
	tHistory    = "history"
	tJournal    = "journal"
	tBlob       = "blob"
	tChunk      = "chunk"
	tCheckpoint = "checkpoint"
	tEnd        = "end"
)

// Counts are how many records of each kind a file holds.
type Counts struct {
	Events      int `json:"events"`
	History     int `json:"history"`
	Journal     int `json:"journal,omitempty"`
	Blobs       int `json:"blobs"`
	Chunks      int `json:"chunks"`
	Checkpoints int `json:"checkpoints"`
}

type sessionRecord struct {
	SessionID       string          `json:"sessionId"`
	Workdir         string          `json:"workdir,omitempty"`
	Mode            string          `json:"mode,omitempty"`
	Provider        string          `json:"provider,omitempty"`
	Model           string          `json:"model,omitempty"`
	Agent           string          `json:"agent,omitempty"`
	Kind            string          `json:"kind"`
	ParentSessionID string          `json:"parentSessionId,omitempty"`
	JobID           string          `json:"jobId,omitempty"`
	Title           string          `json:"title,omitempty"`
	LastPrompt      string          `json:"lastPrompt,omitempty"`
	CreatedAt       time.Time       `json:"createdAt"`
	LastActivityAt  *time.Time      `json:"lastActivityAt,omitempty"`
	Closed          bool            `json:"closed,omitempty"`
	Archived        bool            `json:"archived,omitempty"`
	Backend         json.RawMessage `json:"backend,omitempty"`
	Owner           string          `json:"owner,omitempty"`
	Workspace       string          `json:"workspace,omitempty"`
}

type checkpointRecord struct {
	CheckpointID string          `json:"checkpointId"`
	Seq          int64           `json:"seq"`
	TurnID       string          `json:"turnId,omitempty"`
	Reason       string          `json:"reason"`
	Tool         string          `json:"tool,omitempty"`
	CallID       string          `json:"callId,omitempty"`
	Manifest     string          `json:"manifest"`
	Digest       string          `json:"digest"`
	Files        int             `json:"files"`
	Bytes        int64           `json:"bytes"`
	Skipped      json.RawMessage `json:"skipped,omitempty"`
	Blobs        []string        `json:"blobs"`
	CreatedAt    time.Time       `json:"createdAt"`
}
