package sessionfile

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"

	"github.com/trellis-run/trellis/runtime/store"
)

// eventPage is how many events Export reads from the store at a time.
const eventPage = 1000

// Source is what Export reads of a store.
type Source interface {
	GetSession(ctx context.Context, sessionID string) (store.Session, error)
	ReadEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error)
	LoadHistory(ctx context.Context, sessionID string) ([]json.RawMessage, error)
	HistoryJournal(ctx context.Context, sessionID string) ([]store.JournalEntry, error)
	ListBlobs(ctx context.Context, sessionID string) ([]store.Blob, error)
	ReadBlob(ctx context.Context, sessionID, hash string, fn func(chunk []byte) error) error
	ListCheckpoints(ctx context.Context, sessionID string) ([]store.Checkpoint, error)
	CheckpointBlobs(ctx context.Context, sessionID, checkpointID string) ([]string, error)
}

// writer writes lines and hashes every byte it writes.
type writer struct {
	w   *bufio.Writer
	sum hash.Hash
	n   Counts
}

func (w *writer) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.sum.Write(b)
	_, err = w.w.Write(b)
	return err
}

// Export writes the session's file to out as it reads the store: events a
// page at a time, blobs a chunk at a time. It returns the counts written.
// An unknown session is store.ErrNotFound before anything is written.
func Export(ctx context.Context, src Source, sessionID string, out io.Writer) (Counts, error) {
	sess, err := src.GetSession(ctx, sessionID)
	if err != nil {
		return Counts{}, err
	}
	w := &writer{w: bufio.NewWriterSize(out, 64<<10), sum: sha256.New()}
	if err := w.line(header{Format: Format, Version: Version}); err != nil {
		return Counts{}, err
	}
	if err := w.line(record{T: tSession, Session: sessionOf(sess)}); err != nil {
		return Counts{}, err
	}
	for after := int64(0); ; {
		evs, err := src.ReadEvents(ctx, sessionID, after, eventPage)
		if err != nil {
			return w.n, err
		}
		for _, e := range evs {
			p, ts := string(e.Payload), e.TS.UTC()
			if e.Payload == nil {
				p = "null"
			}
			if err := w.line(record{T: tEvent, Seq: e.Seq, Kind: e.Kind, TS: &ts, Payload: &p}); err != nil {
				return w.n, err
			}
			w.n.Events++
			after = e.Seq
		}
		if len(evs) < eventPage {
			break
		}
	}
	hist, err := src.LoadHistory(ctx, sessionID)
	if err != nil {
		return w.n, err
	}
	for _, m := range hist {
		s := string(m)
		if err := w.line(record{T: tHistory, Message: &s}); err != nil {
			return w.n, err
		}
		w.n.History++
	}
	journal, err := src.HistoryJournal(ctx, sessionID)
	if err != nil {
		return w.n, err
	}
	for _, e := range journal {
		m := string(e.Messages)
		if err := w.line(record{T: tJournal, N: int(e.N), Seq: e.Seq, Op: e.Op, Messages: &m}); err != nil {
			return w.n, err
		}
		w.n.Journal++
	}
	blobs, err := src.ListBlobs(ctx, sessionID)
	if err != nil {
		return w.n, err
	}
	for _, b := range blobs {
		if err := w.line(record{T: tBlob, Hash: b.Hash, Size: b.Size, Stored: b.Stored}); err != nil {
			return w.n, err
		}
		w.n.Blobs++
		n := 0
		if err := src.ReadBlob(ctx, sessionID, b.Hash, func(chunk []byte) error {
			if err := w.line(record{T: tChunk, Hash: b.Hash, N: n, Data: chunk}); err != nil {
				return err
			}
			n++
			w.n.Chunks++
			return nil
		}); err != nil {
			return w.n, err
		}
	}
	cps, err := src.ListCheckpoints(ctx, sessionID)
	if err != nil {
		return w.n, err
	}
	for _, c := range cps {
		refs, err := src.CheckpointBlobs(ctx, sessionID, c.CheckpointID)
		if err != nil {
			return w.n, err
		}
		if refs == nil {
			refs = []string{}
		}
		if err := w.line(record{T: tCheckpoint, Checkpoint: &checkpointRecord{
			CheckpointID: c.CheckpointID, Seq: c.Seq, TurnID: c.TurnID, Reason: c.Reason, Tool: c.Tool, CallID: c.CallID,
			Manifest: c.Manifest, Digest: c.Digest, Files: c.Files, Bytes: c.Bytes, Skipped: c.Skipped, Blobs: refs,
			CreatedAt: c.CreatedAt.UTC(),
		}}); err != nil {
			return w.n, err
		}
		w.n.Checkpoints++
	}
	counts := w.n
	b, err := json.Marshal(record{T: tEnd, Counts: &counts, SHA256: hex.EncodeToString(w.sum.Sum(nil))})
	if err != nil {
		return counts, err
	}
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		return counts, err
	}
	if err := w.w.Flush(); err != nil {
		return counts, fmt.Errorf("write the file of session %s: %w", sessionID, err)
	}
	return counts, nil
}

func sessionOf(s store.Session) *sessionRecord {
	r := &sessionRecord{
		SessionID: s.SessionID, Workdir: s.Workdir, Mode: s.Mode, Provider: s.Provider, Model: s.Model, Agent: s.Agent,
		Kind: s.Kind, ParentSessionID: s.ParentSessionID, JobID: s.JobID, Title: s.Title, LastPrompt: s.LastPrompt,
		CreatedAt: s.CreatedAt.UTC(), Closed: s.Closed, Archived: s.Archived, Backend: s.Backend, Owner: s.Owner,
		Workspace: s.Workspace,
	}
	if !s.LastActivityAt.IsZero() {
		t := s.LastActivityAt.UTC()
		r.LastActivityAt = &t
	}
	return r
}
