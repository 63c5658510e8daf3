package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/telemetry"
)

// CheckpointOptions configure Checkpoint.
type CheckpointOptions struct {
	Daemon
	// Turns is how many turns each daemon runs, each one write tool call
	// (default 20).
	Turns int
	// ChangeKiB is what each call changes: a file of that many KiB of
	// fresh random bytes, written over the last one (default 1024).
	ChangeKiB int
	// Files is how many other files (4 KiB each) the workdir holds, which
	// every checkpoint walks (default 200).
	Files int
	// Rounds alternates the two daemons this many times (default 3).
	Rounds int
}

func (o *CheckpointOptions) defaults() {
	orDefault(&o.Turns, 20)
	orDefault(&o.ChangeKiB, 1024)
	orDefault(&o.Files, 200)
	orDefault(&o.Rounds, 3)
}

// Checkpoint measures what recording checkpoints costs a write tool call:
// the same turns (one shell call that writes ChangeKiB KiB over a file of
// a workdir of Files files) on a daemon that records checkpoints and on
// one that does not (--checkpoints=false), alternated Rounds times, the
// cost being the difference of their median turn times (a turn's shell
// command varies by as much as the cost; the median of every round's turns
// holds still where a round's mean does not). It also reports
// the time the daemon itself spent recording a call's checkpoints in its
// best round, from its trellis_checkpoint_seconds histogram (what the
// difference measures, without the noise of the turns around it), and how much
// the store grows per turn with checkpoints, as the pages each daemon's
// store has in use grew.
func Checkpoint(ctx context.Context, opts CheckpointOptions) (Result, error) {
	opts.defaults()
	r := Result{Bench: "checkpoint", Title: "what recording checkpoints costs a write tool call, and the store's growth per turn",
		Params: []Param{{"turns", opts.Turns}, {"change_kib", opts.ChangeKiB}, {"files", opts.Files}, {"rounds", opts.Rounds}}}
	script := []byte(`{"steps":[{"match":"change","repeat":true,"tool_calls":[{"name":"shell","arguments":{"command":"head -c ` +
		strconv.Itoa(opts.ChangeKiB<<10) + ` /dev/urandom > change.bin"}}]},` +
		`{"after_tool":"shell","text":"Done.","repeat":true}]}`)
	off := opts.Daemon
	off.noCheckpoints = true
	type side struct {
		h      *daemonHandle
		driver *grpc.ClientConn
		sid    string
		turns  []time.Duration
		grown  int64
		spent  time.Duration // recording a call's checkpoints in the best round, by the daemon's histogram
	}
	start := func(d Daemon, param string) (*side, error) {
		h, err := d.start(ctx, script)
		if err != nil {
			return nil, err
		}
		r.param(param, h.describe())
		driver, err := h.dialGRPC()
		if err != nil {
			h.close()
			return nil, err
		}
		h.cleanup = append(h.cleanup, func() { driver.Close() })
		if err := fillWorkdir(h.workdir, opts.Files); err != nil {
			h.close()
			return nil, err
		}
		mode := "auto"
		res, err := trellisv1.NewSessionServiceClient(driver).CreateSession(ctx, &trellisv1.CreateSessionRequest{Workdir: h.workdir, Mode: &mode})
		if err != nil {
			h.close()
			return nil, fmt.Errorf("bench: session.create: %w", err)
		}
		return &side{h: h, driver: driver, sid: res.GetSessionId()}, nil
	}
	on, err := start(opts.Daemon, "daemon")
	if err != nil {
		return r, err
	}
	defer on.h.close()
	without, err := start(off, "baseline_daemon")
	if err != nil {
		return r, err
	}
	defer without.h.close()
	for round := 0; round < opts.Rounds; round++ {
		for _, s := range []*side{on, without} {
			label := "with checkpoints"
			if s == without {
				label = "without"
			}
			s.h.logf("checkpoint round %d: %s, %d turns", round+1, label, opts.Turns)
			before, err := storeSize(s.h.home)
			if err != nil {
				return r, err
			}
			recording, err := checkpointSeconds(ctx, s.h)
			if err != nil {
				return r, err
			}
			for i := 0; i < opts.Turns; i++ {
				t0 := time.Now()
				if err := runTurn(ctx, s.h, s.driver, s.sid, "change "+strconv.Itoa(i)); err != nil {
					return r, err
				}
				s.turns = append(s.turns, time.Since(t0))
			}
			recorded, err := checkpointSeconds(ctx, s.h)
			if err != nil {
				return r, err
			}
			if spent := (recorded - recording) / time.Duration(opts.Turns); s.spent == 0 || spent < s.spent {
				s.spent = spent
			}
			after, err := storeSize(s.h.home)
			if err != nil {
				return r, err
			}
			s.grown += after - before
		}
	}
	turns := float64(opts.Turns * opts.Rounds)
	with, bare := percentile(on.turns, 50), percentile(without.turns, 50)
	r.figure("turn_ms_with", ms(with), "ms", "median turn time, recording checkpoints")
	r.figure("turn_ms_without", ms(bare), "ms", "median turn time, --checkpoints=false")
	cost := ms(with - bare)
	r.figure("cost_ms_per_call", cost, "ms", fmt.Sprintf("checkpoints' cost per write tool call (%d KiB changed, %d files)", opts.ChangeKiB, opts.Files))
	r.figure("recording_ms_per_call", float64(on.spent)/float64(time.Millisecond), "ms",
		"the daemon's time recording a call's checkpoints, best round (trellis_checkpoint_seconds)")
	r.figure("growth_kib_per_turn", float64(on.grown)/1024/turns, "KiB", "store growth per turn, recording checkpoints")
	r.figure("growth_kib_per_turn_without", float64(without.grown)/1024/turns, "KiB", "store growth per turn, --checkpoints=false")
	r.target("cost_ms_per_call", "<=", 5)
	r.finish()
	return r, nil
}

// checkpointSeconds is the time the daemon has spent recording
// checkpoints, whatever their outcome, by its /metrics.
func checkpointSeconds(ctx context.Context, h *daemonHandle) (time.Duration, error) {
	var names []string
	for _, o := range []string{telemetry.CheckpointRecorded, telemetry.CheckpointUnchanged, telemetry.CheckpointFailed} {
		names = append(names, `trellis_checkpoint_seconds_sum{outcome="`+o+`"}`)
	}
	m, err := h.scrapeMetrics(ctx, names...)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, n := range names {
		sum += m[n]
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// fillWorkdir writes n files of 4 KiB under dir, in ten subdirectories,
// dated an hour ago: the files of a project that the turns do not touch,
// which a checkpoint knows by their size and time instead of reading them
// (only a file changed within two seconds of the last checkpoint is read
// again: workspace.Snapshot).
func fillWorkdir(dir string, n int) error {
	buf := make([]byte, 4<<10)
	old := time.Now().Add(-time.Hour)
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, "src", strconv.Itoa(i%10))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
		buf[0], buf[1] = byte(i), byte(i>>8)
		p := filepath.Join(sub, "f"+strconv.Itoa(i)+".txt")
		if err := os.WriteFile(p, buf, 0o600); err != nil {
			return err
		}
		if err := os.Chtimes(p, old, old); err != nil {
			return err
		}
	}
	return nil
}

// storeSize is the bytes a daemon's store has in use: the database's
// pages less its free list, as one read transaction sees them, the
// write-ahead log's commits included, and the files of its checkpoint
// blobs (sqlite.BlobDir). It reads no database file size: a copy of the
// log into the database (a checkpoint) stops at the oldest page a reader
// of the daemon still holds, so the file's size lags the store by
// whatever the log had not copied yet.
func storeSize(home string) (int64, error) {
	path := filepath.Join(home, sqlite.FileName)
	var files int64
	err := filepath.WalkDir(sqlite.BlobDir(path), func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			files += fi.Size()
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read the size of %s's blob files: %w", path, err)
	}
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		return 0, fmt.Errorf("read the size of %s: %w", path, err)
	}
	defer tx.Rollback()
	var pages, free, size int64
	for _, q := range []struct {
		pragma string
		into   *int64
	}{{"page_count", &pages}, {"freelist_count", &free}, {"page_size", &size}} {
		if err := tx.QueryRow("PRAGMA " + q.pragma).Scan(q.into); err != nil {
			return 0, fmt.Errorf("read the size of %s: PRAGMA %s: %w", path, q.pragma, err)
		}
	}
	return (pages-free)*size + files, nil
}
