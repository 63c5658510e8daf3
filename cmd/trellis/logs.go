package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/daemon"
)

// logsPoll is how often `trellis logs -f` looks for new lines.
const logsPoll = 200 * time.Millisecond

func newLogsCmd(a *app) *cobra.Command {
	var follow bool
	var lines int
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "Print the daemon's log (JSON lines); -f follows it across rotations",
		Long: `Print the daemon's log file (<home>/logs/trellisd.log), one JSON object a line.
With -n, only the last N lines. With -f, keep printing new lines as the daemon
writes them, also after the file is rotated, until interrupted (Ctrl-C).
Rotated files sit beside it (trellisd-<time>.log).`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lines < 0 {
				return usageError{fmt.Errorf("-n %d: want 0 (all lines) or more", lines)}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return printLogs(ctx, a.stdout, daemon.LogPath(a.home), lines, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	cmd.Flags().IntVarP(&lines, "lines", "n", 0, "print only the last N lines (0 = all)")
	return cmd
}

// printLogs copies the log at path to w (its last n lines when n > 0), then,
// when follow is set, what is appended to it until ctx ends. A rotation
// (the file renamed and a new one created) or a truncation is noticed and
// the new file is read from its start.
func printLogs(ctx context.Context, w io.Writer, path string, n int, follow bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no log at %s: no daemon has run with this home yet (see --home)", path)
	}
	if err != nil {
		return fmt.Errorf("open the log: %w", err)
	}
	defer func() { f.Close() }()
	if n > 0 {
		if err := seekLastLines(f, n); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
	}
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(logsPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		cur, err := f.Stat()
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		pos, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		latest, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // between the rename and the new file
		case err != nil:
			return fmt.Errorf("read the log: %w", err)
		case !os.SameFile(cur, latest):
			// Rotated: the old file is complete (read above); go on with
			// the new one from its start.
			nf, err := os.Open(path)
			if err != nil {
				continue
			}
			f.Close()
			f = nf
		case cur.Size() < pos:
			// Truncated in place: start again from the top.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("read the log: %w", err)
			}
		}
	}
}

// seekLastLines moves f to the start of its last n lines.
func seekLastLines(f *os.File, n int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	end := st.Size()
	const block = 64 << 10
	buf := make([]byte, block)
	count := 0
	pos := end
	for pos > 0 {
		size := int64(block)
		if pos < size {
			size = pos
		}
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		chunk := buf[:size]
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			if pos+int64(i) == end-1 {
				continue // the final newline ends the last line
			}
			count++
			if count == n {
				_, err := f.Seek(pos+int64(i)+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}
