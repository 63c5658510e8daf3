package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Checkpoint reasons: what a checkpoint was recorded before or after.
const (
	// CheckpointTool: right before a tool that may change the workdir ran.
	CheckpointTool = "tool"
	// CheckpointTurn: at the end of a turn.
	CheckpointTurn = "turn"
	// CheckpointRestore: right after checkpoint.restore put a checkpoint
	// back.
	CheckpointRestore = "restore"
	// CheckpointMaterialise: right after a daemon put the session's latest
	// checkpoint back into a managed workdir that was missing or behind it,
	// before a turn; it holds the same files.
	CheckpointMaterialise = "materialise"
)

// Checkpoint is one recorded state of a session's workdir
// (runtime/workspace): a manifest, itself a blob of the session, whose
// files are blobs of the session.
type Checkpoint struct {
	SessionID    string
	CheckpointID string // "c-…"
	// Seq is the seq of the session's checkpoint event that announced it.
	Seq    int64
	TurnID string // "" for a checkpoint no turn recorded (a restore)
	Reason string // CheckpointTool, CheckpointTurn, CheckpointRestore or CheckpointMaterialise
	// Tool and CallID name the call a CheckpointTool was recorded before.
	Tool, CallID string
	// Manifest is the hash of the manifest blob; Digest the manifest's
	// digest (equal for equal states).
	Manifest, Digest string
	Files            int
	Bytes            int64
	// Skipped are the paths the manifest did not record (a JSON array).
	Skipped json.RawMessage
	// Blobs are the hashes of the file contents the manifest names:
	// PutCheckpoint keeps them from being collected while the checkpoint
	// exists; reads leave it nil.
	Blobs     []string
	CreatedAt time.Time
}

// Validate reports whether c can be stored.
func (c Checkpoint) Validate() error {
	switch {
	case c.SessionID == "" || c.CheckpointID == "":
		return fmt.Errorf("checkpoint %q of session %q: empty id: %w", c.CheckpointID, c.SessionID, ErrInvalid)
	case c.Manifest == "" || c.Digest == "":
		return fmt.Errorf("checkpoint %s: no manifest: %w", c.CheckpointID, ErrInvalid)
	case c.Seq < 0 || c.Files < 0 || c.Bytes < 0:
		return fmt.Errorf("checkpoint %s: negative seq or size: %w", c.CheckpointID, ErrInvalid)
	case c.Skipped != nil && !json.Valid(c.Skipped):
		return fmt.Errorf("checkpoint %s: skipped is not valid JSON: %w", c.CheckpointID, ErrInvalid)
	}
	switch c.Reason {
	case CheckpointTool, CheckpointTurn, CheckpointRestore, CheckpointMaterialise:
		return nil
	}
	return fmt.Errorf("checkpoint %s: unknown reason %q: %w", c.CheckpointID, c.Reason, ErrInvalid)
}

// CheckpointStore keeps sessions' checkpoints and the blobs they name
// (docs/workspaces.md). Blobs belong to one session, addressed by the
// SHA-256 of their content and stored once per session, in the chunks
// the caller cuts (compressed by it); they go with their session, and with
// the last checkpoint that names them.
type CheckpointStore interface {
	// MissingBlobs returns those of hashes the session does not hold.
	MissingBlobs(ctx context.Context, sessionID string, hashes []string) ([]string, error)
	// PutBlobs stores the session's blobs in one transaction: any error,
	// from a Next too, leaves nothing of any of them. A blob the session
	// holds is left as it is (its Next is not called); a session without a
	// row is ErrNotFound.
	PutBlobs(ctx context.Context, sessionID string, blobs []BlobSource) error
	// ReadBlob hands the blob's chunks to fn in order, or returns
	// ErrNotFound. An error from fn stops the read and is returned.
	ReadBlob(ctx context.Context, sessionID, hash string, fn func(chunk []byte) error) error
	// PutCheckpoint stores c. Its manifest and every blob of c.Blobs must
	// be held by the session (ErrNotFound otherwise, as for a session
	// without a row); an existing id is ErrConflict.
	PutCheckpoint(ctx context.Context, c Checkpoint) error
	// ListCheckpoints returns the session's checkpoints by Seq, oldest
	// first (none for an unknown session).
	ListCheckpoints(ctx context.Context, sessionID string) ([]Checkpoint, error)
	// LatestCheckpoint returns the session's checkpoint of the highest Seq
	// (the last ListCheckpoints returns), or ErrNotFound when it has none.
	LatestCheckpoint(ctx context.Context, sessionID string) (Checkpoint, error)
	// GetCheckpoint returns one checkpoint or ErrNotFound.
	GetCheckpoint(ctx context.Context, sessionID, checkpointID string) (Checkpoint, error)
	// DeleteCheckpoint deletes one checkpoint (ErrNotFound when unknown)
	// and the session's blobs that no remaining checkpoint names.
	DeleteCheckpoint(ctx context.Context, sessionID, checkpointID string) error
	// CheckpointBlobs returns the hashes of the file blobs the checkpoint
	// keeps (its Blobs when stored), sorted; none for an unknown one.
	CheckpointBlobs(ctx context.Context, sessionID, checkpointID string) ([]string, error)
	// ListBlobs returns the session's blobs by hash (none for an unknown
	// session).
	ListBlobs(ctx context.Context, sessionID string) ([]Blob, error)
	// CheckpointBytes is how many bytes the session's blobs take as
	// stored (compressed): what its quota counts.
	CheckpointBytes(ctx context.Context, sessionID string) (int64, error)
}

// BlobSource is a blob to store: Size uncompressed bytes whose SHA-256 is
// Hash, as the compressed chunks Next returns until io.EOF. A chunk is
// only read until the next call of Next, which may reuse its memory.
type BlobSource struct {
	Hash string
	Size int64
	Next func() ([]byte, error)
}

// Blob is one stored blob of a session: Size bytes of content, Stored
// bytes as its chunks keep it.
type Blob struct {
	Hash         string
	Size, Stored int64
}

// SessionImporter writes a whole session at once: what session.import
// restores from an exported file (docs/export.md).
type SessionImporter interface {
	// ImportSession creates s and has fill write its events, history,
	// blobs and checkpoints through the SessionWriter, all in one
	// transaction: an error from fill (or any write) leaves nothing. An
	// existing id is ErrConflict.
	ImportSession(ctx context.Context, s Session, fill func(SessionWriter) error) error
}

// SessionWriter writes into the session ImportSession creates. A blob's
// chunks follow its Blob call; a checkpoint follows the blobs it names.
type SessionWriter interface {
	Event(ctx context.Context, e Event) error
	History(ctx context.Context, msg json.RawMessage) error
	// Journal adds the next entry of the session's history journal
	// (HistoryStore.HistoryJournal), checked with its Validate.
	Journal(ctx context.Context, e JournalEntry) error
	Blob(ctx context.Context, b Blob) error
	Chunk(ctx context.Context, hash string, n int, data []byte) error
	Checkpoint(ctx context.Context, c Checkpoint) error
}
