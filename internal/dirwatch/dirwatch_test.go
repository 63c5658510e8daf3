package dirwatch_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/trellis-run/trellis/internal/dirwatch"
)

// TestDrain makes each kind of change in a watched directory and checks
// what one Drain after it reports, without waiting.
func TestDrain(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := dirwatch.New(dirwatch.Created); !errors.Is(err, dirwatch.ErrUnsupported) {
			t.Fatalf("New: %v, want ErrUnsupported", err)
		}
		return
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := dirwatch.Created | dirwatch.Removed | dirwatch.Written | dirwatch.Moved
	for _, tc := range []struct {
		name string
		ops  dirwatch.Op
		do   func() error
		want []dirwatch.Event
	}{
		{"create", all, func() error { return os.WriteFile(filepath.Join(dir, "new"), nil, 0o644) },
			[]dirwatch.Event{{Path: filepath.Join(dir, "new"), Op: dirwatch.Created}, {Path: filepath.Join(dir, "new"), Op: dirwatch.Written}}},
		{"write", all, func() error { return os.WriteFile(filepath.Join(dir, "new"), []byte("abc"), 0o644) },
			[]dirwatch.Event{{Path: filepath.Join(dir, "new"), Op: dirwatch.Written}}},
		{"chmod", all, func() error { return os.Chmod(filepath.Join(dir, "new"), 0o600) },
			[]dirwatch.Event{{Path: filepath.Join(dir, "new"), Op: dirwatch.Written}}},
		{"chmod the directory", all, func() error { return os.Chmod(dir, 0o750) },
			[]dirwatch.Event{{Path: dir, Op: dirwatch.Written, Dir: true}}},
		{"rename", all, func() error { return os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "renamed")) },
			[]dirwatch.Event{{Path: filepath.Join(dir, "new"), Op: dirwatch.Removed}, {Path: filepath.Join(dir, "renamed"), Op: dirwatch.Created}}},
		{"remove", all, func() error { return os.Remove(filepath.Join(dir, "renamed")) },
			[]dirwatch.Event{{Path: filepath.Join(dir, "renamed"), Op: dirwatch.Removed}}},
		{"move a watched directory", all, func() error { return os.Rename(sub, sub+"2") },
			[]dirwatch.Event{{Path: sub, Op: dirwatch.Removed, Dir: true}, {Path: sub + "2", Op: dirwatch.Created, Dir: true}, {Path: sub, Op: dirwatch.Moved, Dir: true}}},
		{"names only", dirwatch.Created | dirwatch.Removed, func() error {
			if err := os.WriteFile(filepath.Join(dir, "old"), []byte("y"), 0o644); err != nil {
				return err
			}
			return os.Remove(filepath.Join(dir, "old"))
		}, []dirwatch.Event{{Path: filepath.Join(dir, "old"), Op: dirwatch.Removed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := dirwatch.New(tc.ops)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for _, d := range []string{dir, sub} {
				if _, err := os.Stat(d); err == nil {
					if err := w.Add(d); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			var got []dirwatch.Event
			if w.Drain(func(e dirwatch.Event) { got = append(got, e) }) {
				t.Fatal("overflow")
			}
			got = slices.Compact(got) // a write may be reported as a modification and a close
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if w.Drain(func(e dirwatch.Event) { t.Errorf("drained again: %+v", e) }) {
				t.Fatal("overflow")
			}
		})
	}
}

// TestAdd: a directory that is gone or not one fails; Watching follows
// the kernel's end of a watch; Close ends everything.
func TestAdd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no notifications here")
	}
	dir := t.TempDir()
	w, err := dirwatch.New(dirwatch.Created | dirwatch.Removed)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Add(missing): %v, want not exist", err)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(f); err == nil {
		t.Fatal("Add(a file): no error")
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(sub); err != nil || !w.Watching(sub) {
		t.Fatalf("Add(sub): %v, watching %v", err, w.Watching(sub))
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	w.Drain(func(dirwatch.Event) {})
	if w.Watching(sub) {
		t.Fatal("a removed directory is still watched after a drain")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err == nil {
		t.Fatal("Add after Close: no error")
	}
}
