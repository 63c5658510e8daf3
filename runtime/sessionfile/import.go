package sessionfile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/trellis-run/trellis/runtime/store"
)

// Options are how Import creates the session.
type Options struct {
	// SessionID is the id of the new session; "" keeps the file's.
	SessionID string
	// Owner is the principal the imported session belongs to ("" = the
	// daemon's token): an exported owner is a principal of another home.
	Owner string
	// TempDir holds the copy Import checks before it writes ("" =
	// os.TempDir).
	TempDir string
}

// Import reads a whole file from r into a temporary copy and checks it
// (format, version, order of records, counts, SHA-256), then creates the
// session in st in one transaction. A file that fails the check is
// ErrCorrupt and nothing is written; a session id that exists is
// store.ErrConflict. After the check, the session returned names the id
// Import tried, also with an error.
func Import(ctx context.Context, st store.SessionImporter, r io.Reader, opts Options) (store.Session, Counts, error) {
	tmp, err := os.CreateTemp(opts.TempDir, "trellis-import-*")
	if err != nil {
		return store.Session{}, Counts{}, err
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	sess, counts, err := read(io.TeeReader(r, tmp), nil)
	if err != nil {
		return store.Session{}, Counts{}, err
	}
	if opts.SessionID != "" {
		sess.SessionID = opts.SessionID
	}
	sess.Owner = opts.Owner
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return store.Session{}, Counts{}, err
	}
	err = st.ImportSession(ctx, sess, func(w store.SessionWriter) error {
		_, _, err := read(tmp, func(rec *record) error { return write(ctx, w, rec) })
		return err
	})
	if err != nil {
		return sess, Counts{}, err
	}
	return sess, counts, nil
}

// write hands one checked record to w.
func write(ctx context.Context, w store.SessionWriter, rec *record) error {
	switch rec.T {
	case tEvent:
		return w.Event(ctx, store.Event{Seq: rec.Seq, Kind: rec.Kind, TS: *rec.TS, Payload: json.RawMessage(*rec.Payload)})
	case tHistory:
		return w.History(ctx, json.RawMessage(*rec.Message))
	case tJournal:
		return w.Journal(ctx, store.JournalEntry{N: int64(rec.N), Seq: rec.Seq, Op: rec.Op, Messages: json.RawMessage(*rec.Messages)})
	case tBlob:
		return w.Blob(ctx, store.Blob{Hash: rec.Hash, Size: rec.Size, Stored: rec.Stored})
	case tChunk:
		data := rec.Data
		if data == nil {
			data = []byte{}
		}
		return w.Chunk(ctx, rec.Hash, rec.N, data)
	case tCheckpoint:
		c := rec.Checkpoint
		return w.Checkpoint(ctx, store.Checkpoint{
			CheckpointID: c.CheckpointID, Seq: c.Seq, TurnID: c.TurnID, Reason: c.Reason, Tool: c.Tool, CallID: c.CallID,
			Manifest: c.Manifest, Digest: c.Digest, Files: c.Files, Bytes: c.Bytes, Skipped: c.Skipped, Blobs: c.Blobs,
			CreatedAt: c.CreatedAt,
		})
	}
	return nil
}

// corrupt is an ErrCorrupt naming the line and what is wrong with it.
func corrupt(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrCorrupt, line, fmt.Sprintf(format, args...))
}

// phases is the order of record kinds in a file: a kind may follow those
// of its own phase or an earlier one only.
var phases = map[string]int{tEvent: 1, tHistory: 2, tJournal: 3, tBlob: 4, tChunk: 4, tCheckpoint: 5, tEnd: 6}

// read checks a whole file and hands each record after the session's to
// fn (when not nil) as it goes.
func read(r io.Reader, fn func(*record) error) (store.Session, Counts, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	sum := sha256.New()
	var (
		sess    store.Session
		n       Counts
		line    int
		phase   int
		lastSeq int64
		blobs   = map[string]bool{}
		blob    string // the blob whose chunks may follow
		version int
		history []json.RawMessage
		journal []json.RawMessage // the history the journal replays to
		prev    store.JournalEntry
		chunkN  int
		stored  int64
		want    int64
		ended   bool
	)
	endBlob := func() error {
		if blob != "" && stored != want {
			return corrupt(line, "blob %s holds %d bytes, %d announced", blob, stored, want)
		}
		blob = ""
		return nil
	}
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if ended {
			return sess, n, corrupt(line, "data after the trailer")
		}
		switch line {
		case 1:
			var h header
			if err := json.Unmarshal(b, &h); err != nil || h.Format != Format {
				return sess, n, corrupt(line, "no %q header", Format)
			}
			if h.Version < 1 || h.Version > Version {
				return sess, n, corrupt(line, "version %d is not supported (this daemon reads versions 1 to %d)", h.Version, Version)
			}
			version = h.Version
			sum.Write(b)
			sum.Write([]byte{'\n'})
			continue
		}
		var rec record
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return sess, n, corrupt(line, "not a record: %v", err)
		}
		if line == 2 {
			if rec.T != tSession || rec.Session == nil {
				return sess, n, corrupt(line, "the session record must come first")
			}
			sess = sessionFrom(rec.Session)
			if err := sess.Validate(); err != nil {
				return sess, n, corrupt(line, "%v", err)
			}
			sum.Write(b)
			sum.Write([]byte{'\n'})
			continue
		}
		p, ok := phases[rec.T]
		if !ok {
			return sess, n, corrupt(line, "unknown record %q", rec.T)
		}
		if p < phase {
			return sess, n, corrupt(line, "record %q out of order", rec.T)
		}
		phase = p
		if rec.T != tChunk {
			if err := endBlob(); err != nil {
				return sess, n, err
			}
		}
		switch rec.T {
		case tEvent:
			if rec.Seq <= lastSeq || rec.Kind == "" || rec.TS == nil || rec.Payload == nil || !json.Valid([]byte(*rec.Payload)) {
				return sess, n, corrupt(line, "event %d: seq out of order or a field missing or invalid", rec.Seq)
			}
			lastSeq = rec.Seq
			n.Events++
		case tHistory:
			if rec.Message == nil || !json.Valid([]byte(*rec.Message)) {
				return sess, n, corrupt(line, "history message is not JSON")
			}
			history = append(history, json.RawMessage(*rec.Message))
			n.History++
		case tJournal:
			if version < 2 || rec.Messages == nil {
				return sess, n, corrupt(line, "a journal record in a file of version %d, or without messages", version)
			}
			e := store.JournalEntry{N: int64(rec.N), Seq: rec.Seq, Op: rec.Op, Messages: json.RawMessage(*rec.Messages)}
			if err := e.Validate(prev.N, prev.Seq); err != nil {
				return sess, n, corrupt(line, "%v", err)
			}
			var msgs []json.RawMessage
			_ = json.Unmarshal(e.Messages, &msgs) // Validate checked it
			if e.Op == store.JournalAppend {
				journal = append(journal, msgs...)
			} else {
				journal = msgs
			}
			prev = e
			n.Journal++
		case tBlob:
			if rec.Hash == "" || blobs[rec.Hash] || rec.Size < 0 || rec.Stored < 0 {
				return sess, n, corrupt(line, "blob %q: empty, repeated or a negative size", rec.Hash)
			}
			blobs[rec.Hash], blob, chunkN, stored, want = true, rec.Hash, 0, 0, rec.Stored
			n.Blobs++
		case tChunk:
			if rec.Hash != blob || blob == "" || rec.N != chunkN {
				return sess, n, corrupt(line, "chunk %d of blob %q out of place", rec.N, rec.Hash)
			}
			chunkN++
			stored += int64(len(rec.Data))
			n.Chunks++
		case tCheckpoint:
			c := rec.Checkpoint
			if c == nil || !blobs[c.Manifest] {
				return sess, n, corrupt(line, "checkpoint without its manifest blob")
			}
			for _, h := range c.Blobs {
				if !blobs[h] {
					return sess, n, corrupt(line, "checkpoint %s names blob %s the file does not hold", c.CheckpointID, h)
				}
			}
			n.Checkpoints++
		case tEnd:
			if rec.Counts == nil || *rec.Counts != n {
				return sess, n, corrupt(line, "the trailer's counts do not match the records")
			}
			if n.Journal > 0 && !sameMessages(journal, history) {
				return sess, n, corrupt(line, "the history journal does not replay to the history")
			}
			if got := hex.EncodeToString(sum.Sum(nil)); rec.SHA256 != got {
				return sess, n, corrupt(line, "SHA-256 %s does not match the trailer's %s", got, rec.SHA256)
			}
			ended = true
			continue
		}
		sum.Write(b)
		sum.Write([]byte{'\n'})
		if fn != nil {
			if err := fn(&rec); err != nil {
				return sess, n, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sess, n, corrupt(line+1, "a line longer than %d bytes", maxLine)
		}
		return sess, n, err
	}
	if !ended {
		return sess, n, corrupt(line, "truncated: the file ends without its trailer")
	}
	return sess, n, nil
}

// sameMessages reports whether a and b hold the same JSON messages, up to
// insignificant space (the journal keeps them compacted).
func sameMessages(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	var ca, cb bytes.Buffer
	for i := range a {
		ca.Reset()
		cb.Reset()
		if json.Compact(&ca, a[i]) != nil || json.Compact(&cb, b[i]) != nil || !bytes.Equal(ca.Bytes(), cb.Bytes()) {
			return false
		}
	}
	return true
}

func sessionFrom(r *sessionRecord) store.Session {
	s := store.Session{
		SessionID: r.SessionID, Workdir: r.Workdir, Mode: r.Mode, Provider: r.Provider, Model: r.Model, Agent: r.Agent,
		Kind: r.Kind, ParentSessionID: r.ParentSessionID, JobID: r.JobID, Title: r.Title, LastPrompt: r.LastPrompt,
		CreatedAt: r.CreatedAt, Closed: r.Closed, Archived: r.Archived, Backend: r.Backend, Owner: r.Owner,
		Workspace: r.Workspace,
	}
	if r.LastActivityAt != nil {
		s.LastActivityAt = *r.LastActivityAt
	}
	return s
}
