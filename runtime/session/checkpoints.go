package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/workspace"
	"github.com/trellis-run/trellis/telemetry"
)

// CheckpointSettings bound the checkpoints of sessions' workdirs
// (docs/workspaces.md). The zero value records none.
type CheckpointSettings struct {
	// Enabled: turns record checkpoints (trellisd --checkpoints). Stored
	// checkpoints are listed, diffed and restored either way.
	Enabled bool
	// MaxFile is the largest file a checkpoint records, in bytes; larger
	// ones are listed as skipped (0: no limit).
	MaxFile int64
	// Quota is the most bytes one session's checkpoints keep in the store
	// (0: no limit).
	Quota int64
	// Exclude are absolute paths no checkpoint records and no restore
	// touches, when a workdir holds them: the daemon's home (its store,
	// its token and secrets).
	Exclude []string
}

// snapshot records the workdir root as a checkpoint sees it.
func (s *Service) snapshot(ctx context.Context, root string, o workspace.Options) (workspace.Manifest, error) {
	o.MaxFile, o.Exclude = s.deps.Checkpoints.MaxFile, s.deps.Checkpoints.Exclude
	return workspace.Snapshot(ctx, root, o)
}

// checkpointState is what the daemon remembers of a session's latest
// checkpoint: its manifest (the next snapshot reuses its hashes, or reads
// only what the watch saw change since; a later snapshot of the same
// state replaces it, with fresher times), its digest and its id, and the
// watch of the workdir.
type checkpointState struct {
	mu     sync.Mutex
	last   *workspace.Manifest
	digest string
	id     string
	watch  *workspace.Watch // made by the first record
}

// maxWatchedWorkdirs is how many sessions' workdirs the daemon watches at
// once between checkpoints (a kernel descriptor each, of the 128 a user
// has by default); past it, the least recently recorded stops watching
// until its next checkpoint, which walks its workdir whole.
const maxWatchedWorkdirs = 32

// watchedWorkdirs keeps at most maxWatchedWorkdirs watches open, the
// most recently used.
type watchedWorkdirs struct {
	mu   sync.Mutex
	tick uint64
	used map[*workspace.Watch]uint64
}

// use marks w used now, suspending the least recently used watch when
// there are too many.
func (ws *watchedWorkdirs) use(w *workspace.Watch) {
	ws.mu.Lock()
	if ws.used == nil {
		ws.used = map[*workspace.Watch]uint64{}
	}
	ws.tick++
	ws.used[w] = ws.tick
	var oldest *workspace.Watch
	if len(ws.used) > maxWatchedWorkdirs {
		for o, t := range ws.used {
			if oldest == nil || t < ws.used[oldest] {
				oldest = o
			}
		}
		delete(ws.used, oldest)
	}
	ws.mu.Unlock()
	if oldest != nil {
		oldest.Suspend()
	}
}

// closeAll closes every open watch for good (the daemon stops).
func (ws *watchedWorkdirs) closeAll() {
	ws.mu.Lock()
	open := slices.Collect(maps.Keys(ws.used))
	clear(ws.used)
	ws.mu.Unlock()
	for _, w := range open {
		w.Close()
	}
}

// drop closes w (nil: none) for good.
func (ws *watchedWorkdirs) drop(w *workspace.Watch) {
	if w == nil {
		return
	}
	ws.mu.Lock()
	delete(ws.used, w)
	ws.mu.Unlock()
	go w.Close() // it may be in a snapshot; the caller holds the service's lock
}

func (s *Service) checkpointState(id string) *checkpointState {
	v, _ := s.checkpoints.LoadOrStore(id, &checkpointState{})
	return v.(*checkpointState)
}

// blobs is the store's CheckpointStore for one session, as a
// workspace.Blobs.
type blobs struct {
	st store.CheckpointStore
	id string
}

func (b blobs) Missing(ctx context.Context, hashes []string) ([]string, error) {
	return b.st.MissingBlobs(ctx, b.id, hashes)
}

func (b blobs) Put(ctx context.Context, sources []workspace.Source) error {
	put := make([]store.BlobSource, len(sources))
	for i, src := range sources {
		put[i] = store.BlobSource(src)
	}
	return b.st.PutBlobs(ctx, b.id, put)
}

func (b blobs) Read(ctx context.Context, hash string, fn func([]byte) error) error {
	return b.st.ReadBlob(ctx, b.id, hash, fn)
}

// checkpointable refuses a session whose workdir is not on this machine:
// an ssh backend's (a docker backend mounts the local workdir).
func checkpointable(row store.Session) error {
	if !localWorkdir(row) {
		return errs.NewUnsupported("backend", "ssh", "session %s runs its tools on an ssh backend: its workdir is on another machine and has no checkpoints", row.SessionID)
	}
	if _, err := os.Stat(row.Workdir); err != nil {
		return errs.New(errcode.InvalidParams, "the workdir of session %s cannot be read: %v", row.SessionID, err)
	}
	return nil
}

// manifestOf reads a stored checkpoint's manifest, without what
// Checkpoints.Exclude names inside roots (the workdir it was recorded in,
// and the one it is put back into): a checkpoint recorded before the
// daemon left its home out holds it.
func (s *Service) manifestOf(ctx context.Context, c store.Checkpoint, roots ...string) (workspace.Manifest, error) {
	b, err := workspace.ReadAll(ctx, blobs{s.deps.Store, c.SessionID}, c.Manifest)
	if err != nil {
		return workspace.Manifest{}, fmt.Errorf("checkpoint %s: %w", c.CheckpointID, err)
	}
	m, err := workspace.Unmarshal(b)
	for _, root := range roots {
		m = m.Without(workspace.Exclude(root, s.deps.Checkpoints.Exclude))
	}
	return m, err
}

// latestCheckpoint returns the session's latest checkpoint (ok false:
// none).
func (s *Service) latestCheckpoint(ctx context.Context, id string) (store.Checkpoint, bool, error) {
	c, err := s.deps.Store.LatestCheckpoint(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Checkpoint{}, false, nil
	}
	return c, err == nil, err
}

// load makes st hold the session's latest stored checkpoint, reading its
// manifest only when it is not the one st holds (another daemon of the
// store may have recorded or deleted checkpoints since).
func (st *checkpointState) load(ctx context.Context, s *Service, id, root string) error {
	c, ok, err := s.latestCheckpoint(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		st.last, st.digest, st.id = nil, "", ""
		return nil
	}
	if st.last != nil && st.id == c.CheckpointID {
		return nil
	}
	m, err := s.manifestOf(ctx, c, root)
	if err != nil {
		return err
	}
	st.last, st.digest, st.id = &m, m.Digest(), c.CheckpointID
	return nil
}

// keepBytes is how much of the files a checkpoint's snapshot reads it
// keeps in memory to store them without reading and hashing them again.
const keepBytes = 16 << 20

// recording says why a checkpoint is recorded.
type recording struct {
	reason, turnID, tool, callID, restoredFrom string
	// force records the state even when it equals the latest checkpoint
	// (a materialise says where the files came back).
	force bool
}

// record snapshots the session's workdir and stores it as a checkpoint,
// announced by a checkpoint event, unless it equals the session's latest
// checkpoint (recorded false, that checkpoint's id). The quota is checked
// before anything is stored: checkpoint_quota_exceeded.
func (s *Service) record(ctx context.Context, row store.Session, r recording) (checkpointID string, recorded bool, err error) {
	if err := checkpointable(row); err != nil {
		return "", false, err
	}
	defer func(start time.Time) {
		outcome := telemetry.CheckpointUnchanged
		if err != nil {
			outcome = telemetry.CheckpointFailed
		} else if recorded {
			outcome = telemetry.CheckpointRecorded
		}
		telemetry.CheckpointTaken(outcome, time.Since(start))
	}(time.Now())
	id := row.SessionID
	st := s.checkpointState(id)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.load(ctx, s, id, row.Workdir); err != nil {
		return "", false, err
	}
	if st.watch == nil {
		st.watch = workspace.NewWatch()
	}
	s.watched.use(st.watch)
	bl := blobs{s.deps.Store, id}
	var m workspace.Manifest
	var manifest, digest string
	defer func() { m.Release() }()
	for attempt := 0; ; attempt++ {
		var err error
		m, err = s.snapshot(ctx, row.Workdir, workspace.Options{Previous: st.last, Keep: keepBytes, Watch: st.watch})
		if err != nil {
			return "", false, err
		}
		digest = m.Digest()
		if st.last != nil && digest == st.digest && !r.force {
			m.Release()
			st.last = &m
			return st.id, false, nil
		}
		var stored *workspace.Manifest
		if st.id != "" {
			stored = st.last // the latest checkpoint's contents are in the store
		}
		missing, err := workspace.Missing(ctx, bl, m, stored)
		if err != nil {
			return "", false, err
		}
		if err := s.checkQuota(ctx, id, missing); err != nil {
			return "", false, err
		}
		manifest, err = workspace.Save(ctx, bl, row.Workdir, m, missing)
		if errors.Is(err, workspace.ErrChanged) && attempt == 0 {
			continue // a file changed while it was read: look again
		}
		if err != nil {
			return "", false, err
		}
		break
	}
	skipped := make([]events.CheckpointSkip, 0, len(m.Skipped))
	for _, sk := range m.Skipped {
		skipped = append(skipped, events.CheckpointSkip{Path: sk.Path, Reason: sk.Reason, Size: sk.Size})
	}
	cid := ids.New("c")
	payload := events.CheckpointEvent{CheckpointID: cid, Reason: r.reason, TurnID: optional(r.turnID), Tool: optional(r.tool),
		CallID: optional(r.callID), Files: m.Files(), Bytes: m.Bytes(), Skipped: skipped, RestoredFrom: optional(r.restoredFrom)}
	ev, err := s.deps.Events.Append(ctx, id, eventkind.Checkpoint, payload)
	if err != nil {
		return "", false, err
	}
	skippedJSON, err := json.Marshal(skipped)
	if err != nil {
		return "", false, err
	}
	c := store.Checkpoint{SessionID: id, CheckpointID: cid, Seq: ev.Seq, TurnID: r.turnID, Reason: r.reason, Tool: r.tool,
		CallID: r.callID, Manifest: manifest, Digest: digest, Files: m.Files(), Bytes: m.Bytes(), Skipped: skippedJSON,
		Blobs: m.Hashes(), CreatedAt: time.Now().UTC()}
	err = s.deps.Store.PutCheckpoint(ctx, c)
	if errors.Is(err, store.ErrNotFound) {
		// A checkpoint.delete collected blobs this one names between
		// their put and now: put them again.
		var missing []workspace.Entry
		if missing, err = workspace.Missing(ctx, bl, m, nil); err == nil {
			if _, err = workspace.Save(ctx, bl, row.Workdir, m, missing); err == nil {
				err = s.deps.Store.PutCheckpoint(ctx, c)
			}
		}
	}
	if err != nil {
		return "", false, err
	}
	m.Release()
	st.last, st.digest, st.id = &m, digest, cid
	return cid, true, nil
}

// checkQuota refuses to store missing, the contents a checkpoint of
// session id adds, when they would pass the session's quota; they are
// counted uncompressed.
func (s *Service) checkQuota(ctx context.Context, id string, missing []workspace.Entry) error {
	quota := s.deps.Checkpoints.Quota
	if quota <= 0 {
		return nil
	}
	var add int64
	for _, e := range missing {
		add += e.Size
	}
	used, err := s.deps.Store.CheckpointBytes(ctx, id)
	if err != nil {
		return err
	}
	if used+add > quota {
		return errs.New(errcode.CheckpointQuotaExceeded,
			"the checkpoint of session %s was not recorded: its checkpoints keep %d bytes and this one adds up to %d, past the quota of %d (trellisd --checkpoint-quota); checkpoint.delete makes room",
			id, used, add, quota).WithData("quota", quota).WithData("used", used)
	}
	return nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// turnCheckpoints records a turn's checkpoints (agent.Checkpoints). A
// checkpoint that cannot be recorded is said in an error event; the turn
// goes on without it.
type turnCheckpoints struct {
	s   *Service
	row store.Session
}

var _ agent.Checkpoints = turnCheckpoints{}

func (c turnCheckpoints) BeforeTool(ctx context.Context, call agent.ToolCall) {
	c.recordInTurn(ctx, recording{reason: store.CheckpointTool, turnID: call.TurnID, tool: call.Name, callID: call.CallID})
}

func (c turnCheckpoints) TurnEnd(ctx context.Context, turnID string) {
	c.recordInTurn(ctx, recording{reason: store.CheckpointTurn, turnID: turnID})
}

func (c turnCheckpoints) recordInTurn(ctx context.Context, r recording) {
	_, _, err := c.s.record(ctx, c.row, r)
	if err == nil {
		return
	}
	log := c.s.deps.Log.With("sessionId", c.row.SessionID, "turnId", r.turnID)
	code, msg := errs.CodeOf(err), err.Error()
	var e *errs.Error
	if !errors.As(err, &e) {
		code, msg = errcode.Internal, "the workdir's checkpoint could not be recorded (the daemon's log says why); the turn goes on without it"
	}
	log.WarnContext(ctx, "record a checkpoint", "reason", r.reason, "err", err)
	if _, err := c.s.deps.Events.Append(ctx, c.row.SessionID, eventkind.Error, events.ErrorEvent{Code: code, Message: msg}); err != nil {
		log.WarnContext(ctx, "emit a checkpoint's error", "err", err)
	}
}

// turnCheckpointsFor returns the recorder of a turn of row, nil when the
// daemon records no checkpoints or the workdir is not on this machine.
func (s *Service) turnCheckpointsFor(row store.Session) agent.Checkpoints {
	if !s.deps.Checkpoints.Enabled || checkpointable(row) != nil {
		return nil
	}
	return turnCheckpoints{s: s, row: row}
}

// checkpoint returns one stored checkpoint of session id.
func (s *Service) checkpoint(ctx context.Context, id, checkpointID string) (store.Checkpoint, error) {
	if checkpointID == "" {
		return store.Checkpoint{}, errs.New(errcode.InvalidParams, "checkpointId is required")
	}
	c, err := s.deps.Store.GetCheckpoint(ctx, id, checkpointID)
	if errors.Is(err, store.ErrNotFound) {
		return c, errs.New(errcode.NotFound, "checkpoint %s of session %s not found", checkpointID, id)
	}
	return c, err
}

// ListCheckpoints returns the session's checkpoints, oldest first.
func (s *Service) ListCheckpoints(ctx context.Context, id string) ([]store.Checkpoint, error) {
	if _, err := s.row(ctx, id); err != nil {
		return nil, err
	}
	return s.deps.Store.ListCheckpoints(ctx, id)
}

// DiffCheckpoints returns the changes from checkpoint from to checkpoint
// to, or to the session's current files when to is nil.
func (s *Service) DiffCheckpoints(ctx context.Context, id, from string, to *string) ([]workspace.Change, error) {
	row, err := s.row(ctx, id)
	if err != nil {
		return nil, err
	}
	a, err := s.checkpoint(ctx, id, from)
	if err != nil {
		return nil, err
	}
	am, err := s.manifestOf(ctx, a, row.Workdir)
	if err != nil {
		return nil, err
	}
	bl := blobs{s.deps.Store, id}
	var side workspace.Side
	if to != nil {
		b, err := s.checkpoint(ctx, id, *to)
		if err != nil {
			return nil, err
		}
		bm, err := s.manifestOf(ctx, b, row.Workdir)
		if err != nil {
			return nil, err
		}
		side = workspace.StoredSide(bm, bl)
	} else {
		if err := checkpointable(row); err != nil {
			return nil, err
		}
		cur, err := s.snapshot(ctx, row.Workdir, workspace.Options{})
		if err != nil {
			return nil, err
		}
		side = workspace.DirSide(cur, row.Workdir)
	}
	return workspace.Diff(ctx, workspace.StoredSide(am, bl), side)
}

// Restored is what RestoreCheckpoint did.
type Restored struct {
	workspace.Restored
	// CheckpointID is the checkpoint recorded after the restore (the
	// latest one, when the restore changed nothing).
	CheckpointID string
}

// RestoreCheckpoint puts checkpoint checkpointID back into the session's
// workdir; session_busy while a turn runs. Files changed since the
// session's latest checkpoint refuse it (workspace_changed, with the
// diff) unless force.
func (s *Service) RestoreCheckpoint(ctx context.Context, id, checkpointID string, force bool) (Restored, error) {
	l, err := s.load(ctx, id)
	if err != nil {
		return Restored{}, err
	}
	target, err := s.checkpoint(ctx, id, checkpointID)
	if err != nil {
		return Restored{}, err
	}
	release, err := s.claimIdle(ctx, l)
	if err != nil {
		return Restored{}, err
	}
	defer release()
	row, err := s.row(ctx, id)
	if err != nil {
		return Restored{}, err
	}
	if err := checkpointable(row); err != nil {
		return Restored{}, err
	}
	m, err := s.manifestOf(ctx, target, row.Workdir)
	if err != nil {
		return Restored{}, err
	}
	if !force {
		if err := s.unchangedSinceLatest(ctx, row); err != nil {
			return Restored{}, err
		}
	}
	res, err := workspace.Restore(ctx, row.Workdir, m, blobs{s.deps.Store, id})
	if err != nil {
		return Restored{}, err
	}
	cid, _, err := s.record(ctx, row, recording{reason: store.CheckpointRestore, restoredFrom: checkpointID})
	if err != nil {
		return Restored{}, err
	}
	return Restored{Restored: res, CheckpointID: cid}, nil
}

// sinceLatest is how a session's workdir stands against its latest
// checkpoint.
type sinceLatest struct {
	latest store.Checkpoint
	then   workspace.Manifest // the latest checkpoint's files
	now    workspace.Manifest // the workdir's files now
}

func (d sinceLatest) changed() bool { return d.now.Digest() != d.then.Digest() }

// sinceLatestCheckpoint compares row's workdir now with the session's
// latest checkpoint; ok is false when the session has none.
func (s *Service) sinceLatestCheckpoint(ctx context.Context, row store.Session) (d sinceLatest, ok bool, err error) {
	d.latest, ok, err = s.latestCheckpoint(ctx, row.SessionID)
	if err != nil || !ok {
		return d, false, err
	}
	if d.then, err = s.manifestOf(ctx, d.latest, row.Workdir); err != nil {
		return d, false, err
	}
	if d.now, err = s.snapshot(ctx, row.Workdir, workspace.Options{}); err != nil {
		return d, false, err
	}
	return d, true, nil
}

// unchangedSinceLatest refuses with workspace_changed when the workdir
// differs from the session's latest checkpoint.
func (s *Service) unchangedSinceLatest(ctx context.Context, row store.Session) error {
	d, ok, err := s.sinceLatestCheckpoint(ctx, row)
	if err != nil || !ok || !d.changed() {
		return err
	}
	changes, err := workspace.Diff(ctx, workspace.StoredSide(d.then, blobs{s.deps.Store, row.SessionID}), workspace.DirSide(d.now, row.Workdir))
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(changes))
	for _, c := range changes {
		paths = append(paths, c.Path)
	}
	shown := paths
	if len(shown) > 5 {
		shown = append(shown[:5:5], "…")
	}
	return errs.New(errcode.WorkspaceChanged,
		"the workdir of session %s changed since its latest checkpoint %s (%d paths: %s) other than by its tools: restoring would lose those changes; call again with force: true to restore anyway",
		row.SessionID, d.latest.CheckpointID, len(changes), strings.Join(shown, ", ")).
		WithData("checkpointId", d.latest.CheckpointID).WithData("paths", strings.Join(paths, "\n")).
		WithData("diff", workspace.Unified(changes))
}

// DeleteCheckpoint deletes one checkpoint of session id.
func (s *Service) DeleteCheckpoint(ctx context.Context, id, checkpointID string) error {
	row, err := s.row(ctx, id)
	if err != nil {
		return err
	}
	if row.Archived {
		return archived(id)
	}
	if checkpointID == "" {
		return errs.New(errcode.InvalidParams, "checkpointId is required")
	}
	err = s.deps.Store.DeleteCheckpoint(ctx, id, checkpointID)
	if errors.Is(err, store.ErrNotFound) {
		return errs.New(errcode.NotFound, "checkpoint %s of session %s not found", checkpointID, id)
	}
	if err != nil {
		return err
	}
	return nil
}
