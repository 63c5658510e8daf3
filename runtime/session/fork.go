package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/workspace"
)

// forkCopyPage is how many events a fork copies per store write.
const forkCopyPage = 512

// atSeq checks that seq names a point of session id's log: 0 (before its
// first event) to its latest event, which it returns.
func (s *Service) atSeq(ctx context.Context, id string, seq int64) (int64, error) {
	last, err := s.deps.Events.LastSeq(ctx, id)
	if err != nil {
		return 0, err
	}
	if seq < 0 || seq > last {
		return 0, errs.New(errcode.InvalidParams, "atSeq %d is not in the log of session %s: it runs from 0 to %d", seq, id, last).
			WithData("lastSeq", last)
	}
	return last, nil
}

// checkpointAt returns the latest checkpoint of session id recorded at or
// before event seq (ok false: none).
func (s *Service) checkpointAt(ctx context.Context, id string, seq int64) (store.Checkpoint, bool, error) {
	list, err := s.deps.Store.ListCheckpoints(ctx, id)
	if err != nil {
		return store.Checkpoint{}, false, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Seq <= seq {
			return list[i], true, nil
		}
	}
	return store.Checkpoint{}, false, nil
}

// modelHistoryAt returns the model history session id had at event seq,
// from the store's history journal (store.HistoryStore.HistoryAt).
func (s *Service) modelHistoryAt(ctx context.Context, id string, seq int64) ([]json.RawMessage, error) {
	raw, err := s.deps.Store.HistoryAt(ctx, id, seq)
	if errors.Is(err, store.ErrHistoryUnknown) {
		return nil, errs.NewUnsupported("atSeq", fmt.Sprint(seq), "the model history of session %s at seq %d is not known: the session was stored before Trellis journaled its history; pick a later seq", id, seq)
	}
	return raw, err
}

// ForkParams are the params of Fork.
type ForkParams struct {
	SessionID string
	AtSeq     int64
	// Workdir of the new session: empty or missing; "" makes a new
	// directory beside the original's.
	Workdir string
	Origin  string
	Owner   string
}

// Forked is what Fork made.
type Forked struct {
	SessionID string
	Workdir   string
	// CheckpointID is the original's checkpoint whose files the new
	// workdir holds ("" when none was recorded at or before the seq).
	CheckpointID string
	// Messages is the length of the new session's model history.
	Messages int
}

// Fork makes a new session from session p.SessionID as it was at event
// p.AtSeq: its log starts with a copy of the original's events up to that
// seq (same seqs, kinds and payloads), its model history is the one the
// original had then (the store's history journal), and its workdir holds
// the files of the original's latest checkpoint at or before that seq,
// after which the fork records its own checkpoint of them. The original
// is only read: it may be running.
func (s *Service) Fork(ctx context.Context, p ForkParams) (_ Forked, err error) {
	orig, err := s.row(ctx, p.SessionID)
	if err != nil {
		return Forked{}, err
	}
	if _, err := s.atSeq(ctx, orig.SessionID, p.AtSeq); err != nil {
		return Forked{}, err
	}
	history, err := s.modelHistoryAt(ctx, orig.SessionID, p.AtSeq)
	if err != nil {
		return Forked{}, err
	}
	cp, hasCP, err := s.checkpointAt(ctx, orig.SessionID, p.AtSeq)
	if err != nil {
		return Forked{}, err
	}
	var m workspace.Manifest
	if hasCP {
		if m, err = s.manifestOf(ctx, cp, orig.Workdir); err != nil {
			return Forked{}, err
		}
	}
	dir, made, err := forkWorkdir(orig, p.Workdir)
	if err != nil {
		return Forked{}, err
	}
	id, err := s.Create(ctx, CreateParams{Workdir: dir, Mode: orig.Mode, Provider: orig.Provider, Model: orig.Model,
		Agent: orig.Agent, Origin: p.Origin, Owner: p.Owner})
	if err != nil {
		if made {
			_ = os.RemoveAll(dir)
		}
		return Forked{}, err
	}
	defer func() {
		if err != nil {
			s.unfork(context.WithoutCancel(ctx), id, dir, made)
		}
	}()
	if err := s.copyEvents(ctx, orig.SessionID, id, p.AtSeq); err != nil {
		return Forked{}, fmt.Errorf("fork %s: copy its events: %w", orig.SessionID, err)
	}
	if err := s.deps.Store.ReplaceHistory(ctx, s.writer(id), id, history); err != nil {
		return Forked{}, fmt.Errorf("fork %s: its history: %w", orig.SessionID, s.refused(ctx, id, err))
	}
	if err := answerOpenCalls(ctx, s.deps.Store, s.writer, id, fmt.Sprintf("not run: this session is a fork of %s at an event before this call's result", orig.SessionID)); err != nil {
		return Forked{}, err
	}
	out := Forked{SessionID: id, Workdir: dir, Messages: len(history)}
	if hasCP {
		row, err := s.row(ctx, id)
		if err != nil {
			return Forked{}, err
		}
		m = m.Without(workspace.Exclude(row.Workdir, s.deps.Checkpoints.Exclude))
		if _, err := workspace.Restore(ctx, row.Workdir, m, blobs{s.deps.Store, orig.SessionID}); err != nil {
			return Forked{}, err
		}
		if _, _, err := s.record(ctx, row, recording{reason: store.CheckpointRestore, restoredFrom: cp.CheckpointID}); err != nil {
			return Forked{}, err
		}
		out.CheckpointID = cp.CheckpointID
	}
	return out, nil
}

// unfork deletes the session of a fork that failed half-way, and its
// workdir when the fork made it.
func (s *Service) unfork(ctx context.Context, id, dir string, made bool) {
	s.mu.Lock()
	s.forget(id)
	s.mu.Unlock()
	if _, err := s.deps.Store.DeleteSessions(ctx, s.writer(id), []string{id}); err != nil {
		s.deps.Log.WarnContext(ctx, "delete a failed fork", "sessionId", id, "err", err)
	}
	if s.deps.Leases != nil {
		s.deps.Leases.Release(ctx, id)
	}
	if made {
		if err := os.RemoveAll(dir); err != nil {
			s.deps.Log.WarnContext(ctx, "remove a failed fork's workdir", "sessionId", id, "workdir", dir, "err", err)
		}
	}
}

// forkWorkdir makes the directory of a fork of orig: dir when given
// (missing or empty), else a new one beside orig's workdir; made says
// whether it made it.
func forkWorkdir(orig store.Session, dir string) (_ string, made bool, _ error) {
	if dir == "" {
		dir = fmt.Sprintf("%s.fork-%s", orig.Workdir, ids.New("w"))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", false, errs.New(errcode.InvalidParams, "the fork's workdir %s cannot be made: %v; pass workdir", dir, err)
		}
		return dir, true, nil
	}
	if err := checkPathLen("workdir", dir); err != nil {
		return "", false, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false, errs.New(errcode.InvalidParams, "workdir %q: %v", dir, err)
	}
	f, err := os.Open(abs)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return "", false, errs.New(errcode.InvalidParams, "workdir %s cannot be made: %v", abs, err)
		}
		return abs, true, nil
	}
	if err != nil {
		return "", false, errs.New(errcode.InvalidParams, "workdir %s cannot be read: %v", abs, err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return "", false, errs.New(errcode.InvalidParams, "workdir %s is not an empty directory: a fork's files go into an empty or missing one", abs).
			WithData("workdir", abs)
	}
	return abs, false, nil
}

// copyEvents writes the events of session from up to seq into session to,
// which has none yet, keeping their seqs, kinds, payloads and times.
func (s *Service) copyEvents(ctx context.Context, from, to string, seq int64) error {
	after := int64(0)
	for after < seq {
		page, err := s.deps.Store.ReadEvents(ctx, from, after, forkCopyPage)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return fmt.Errorf("session %s has no event after %d", from, after)
		}
		batch := make([]store.Event, 0, len(page))
		for _, ev := range page {
			if ev.Seq > seq {
				break
			}
			ev.SessionID = to
			batch = append(batch, ev)
		}
		if err := s.deps.Store.AppendEvents(ctx, s.writer(to), batch); err != nil {
			return s.refused(ctx, to, err)
		}
		after = batch[len(batch)-1].Seq
	}
	return nil
}

// Rewound is what Rewind did.
type Rewound struct {
	// Seq is the session.rewound event's.
	Seq int64
	// CheckpointID is the checkpoint whose files were put back ("" when
	// none was recorded at or before the seq).
	CheckpointID string
	Messages     int
}

// Rewind puts the files and model history of idle session id back as they
// were at event atSeq; session_busy while a turn runs. The log is never
// rewritten: a session.rewound event names the seqs the model no longer
// reads. Files changed since the session's latest checkpoint refuse it
// (workspace_changed) unless force.
func (s *Service) Rewind(ctx context.Context, id string, atSeq int64, force bool) (Rewound, error) {
	l, err := s.load(ctx, id)
	if err != nil {
		return Rewound{}, err
	}
	release, err := s.claimIdle(ctx, l)
	if err != nil {
		return Rewound{}, err
	}
	defer release()
	last, err := s.atSeq(ctx, id, atSeq)
	if err != nil {
		return Rewound{}, err
	}
	history, err := s.modelHistoryAt(ctx, id, atSeq)
	if err != nil {
		return Rewound{}, err
	}
	row, err := s.row(ctx, id)
	if err != nil {
		return Rewound{}, err
	}
	cp, hasCP, err := s.checkpointAt(ctx, id, atSeq)
	if err != nil {
		return Rewound{}, err
	}
	out := Rewound{Messages: len(history)}
	if hasCP {
		if err := checkpointable(row); err != nil {
			return Rewound{}, err
		}
		m, err := s.manifestOf(ctx, cp, row.Workdir)
		if err != nil {
			return Rewound{}, err
		}
		if !force {
			if err := s.unchangedSinceLatest(ctx, row); err != nil {
				return Rewound{}, err
			}
		}
		if _, err := workspace.Restore(ctx, row.Workdir, m, blobs{s.deps.Store, id}); err != nil {
			return Rewound{}, err
		}
		if _, _, err := s.record(ctx, row, recording{reason: store.CheckpointRestore, restoredFrom: cp.CheckpointID}); err != nil {
			return Rewound{}, err
		}
		out.CheckpointID = cp.CheckpointID
	}
	// The event comes before the history's write, which the journal then
	// places at it: a fork at any earlier seq reads the history as it was.
	ev, err := s.deps.Events.Append(ctx, id, eventkind.SessionRewound, events.SessionRewoundEvent{
		ToSeq: atSeq, FromSeq: last, CheckpointID: optional(out.CheckpointID), Messages: len(history)})
	if err != nil {
		return Rewound{}, err
	}
	if err := s.deps.Store.ReplaceHistory(ctx, s.writer(id), id, history); err != nil {
		return Rewound{}, fmt.Errorf("rewind the history of %s: %w", id, s.refused(ctx, id, err))
	}
	if err := answerOpenCalls(ctx, s.deps.Store, s.writer, id, fmt.Sprintf("undone: session.rewind went back to an event before this call's result (seq %d)", atSeq)); err != nil {
		return Rewound{}, err
	}
	out.Seq = ev.Seq
	return out, nil
}
