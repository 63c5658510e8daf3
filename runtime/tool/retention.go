package tool

import (
	"os"
	"path/filepath"
	"sort"
	"time"
)

// OutputRetention bounds the full outputs kept for the model (up to 64
// MiB per command, under <outputs>/<session>/): files older than MaxAge go,
// then the oldest until the rest fit in MaxBytes. Zero leaves that rule off.
type OutputRetention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// Default retention of kept outputs: a week, 1 GiB in all.
const (
	DefaultOutputMaxAge   = 7 * 24 * time.Hour
	DefaultOutputMaxBytes = 1 << 30
)

// PruneOutputs applies r to the outputs kept under dir (one directory per
// session) as of now, and removes the session directories it empties. It
// returns how many files it removed and their bytes. A file being written
// is the newest, so the size rule takes it last; a file removed while its
// command still writes is gone from the directory, and its space comes
// back when the command ends.
func PruneOutputs(dir string, r OutputRetention, now time.Time) (removed int, freed int64, err error) {
	type kept struct {
		path string
		size int64
		mod  time.Time
	}
	var files []kept
	sessions, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, s := range sessions {
		if !s.IsDir() {
			continue
		}
		sdir := filepath.Join(dir, s.Name())
		entries, err := os.ReadDir(sdir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
				files = append(files, kept{filepath.Join(sdir, e.Name()), fi.Size(), fi.ModTime()})
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	var total int64
	for _, f := range files {
		total += f.size
	}
	drop := func(f kept) {
		if os.Remove(f.path) == nil {
			removed++
			freed += f.size
			total -= f.size
		}
	}
	for _, f := range files {
		if !(r.MaxAge > 0 && now.Sub(f.mod) > r.MaxAge) && !(r.MaxBytes > 0 && total > r.MaxBytes) {
			break // oldest first: the rest are newer, and fit
		}
		drop(f)
	}
	for _, s := range sessions {
		if s.IsDir() {
			_ = os.Remove(filepath.Join(dir, s.Name())) // only if empty
		}
	}
	return removed, freed, nil
}
