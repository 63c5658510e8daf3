package workspace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// TestWatchMatchesWalk changes a workdir at random between snapshots and
// checks that each snapshot a Watch makes from the previous one records
// exactly what a snapshot that reads every file records.
func TestWatchMatchesWalk(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a Watch walks everything on this system")
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			outside := t.TempDir()
			rng := rand.New(rand.NewPCG(seed, 7))
			o := Options{MaxFile: 3000, Ignore: nil}
			w := NewWatch()
			defer w.Close()
			o.Watch = w
			prev, err := Snapshot(ctx, root, o)
			if err != nil {
				t.Fatal(err)
			}
			var ops []string
			for step := range 150 {
				for range 1 + rng.IntN(4) {
					ops = append(ops, change(t, rng, root, outside))
				}
				o.Previous = &prev
				got, err := Snapshot(ctx, root, o)
				if err != nil {
					t.Fatal(err)
				}
				want, err := Snapshot(ctx, root, Options{MaxFile: 3000})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Entries, want.Entries) || !slices.Equal(got.Skipped, want.Skipped) || got.Digest() != want.Digest() {
					t.Fatalf("step %d, after %q:\nwatched %+v\n%+v\nwalked  %+v\n%+v", step, ops[max(0, len(ops)-4):], got.Entries, got.Skipped, want.Entries, want.Skipped)
				}
				got.Release()
				prev = got
			}
			if w.updates < 100 {
				t.Fatalf("%d of 150 snapshots were updates of the one before (%d walks): want most", w.updates, w.walks)
			}
			t.Logf("%d updates, %d walks", w.updates, w.walks)
		})
	}
}

// change makes one random change under root and says what it did.
func change(t *testing.T, rng *rand.Rand, root, outside string) string {
	t.Helper()
	dirs := []string{"", "a", "a/b", "c", "node_modules", "d/e/f"}
	names := []string{"x", "y", "z.txt", "w.log"}
	dir := dirs[rng.IntN(len(dirs))]
	p := filepath.Join(root, dir, names[rng.IntN(len(names))])
	content := func() []byte {
		b := make([]byte, []int{0, 5, 5, 100, 4000}[rng.IntN(5)]) // 4000: past MaxFile
		for i := range b {
			b[i] = byte('a' + rng.IntN(3))
		}
		return b
	}
	do := func(what string, err error) string {
		if err != nil && !os.IsNotExist(err) && !os.IsExist(err) {
			t.Logf("%s: %v", what, err) // a path in the way: fine, it is a random walk
		}
		return what
	}
	switch rng.IntN(14) {
	case 0, 1, 2:
		os.MkdirAll(filepath.Dir(p), 0o755)
		return do("write "+p, os.WriteFile(p, content(), 0o644))
	case 3:
		return do("remove "+p, os.Remove(p))
	case 4:
		q := filepath.Join(root, dirs[rng.IntN(len(dirs))], names[rng.IntN(len(names))])
		return do("rename "+p+" "+q, os.Rename(p, q))
	case 5:
		return do("mkdir "+p, os.MkdirAll(filepath.Join(p, "in"), 0o755))
	case 6:
		d := filepath.Join(root, dir)
		if dir == "" {
			d = filepath.Join(root, "a")
		}
		return do("removeall "+d, os.RemoveAll(d))
	case 7:
		d := filepath.Join(root, dirs[1+rng.IntN(len(dirs)-1)])
		return do("rename dir "+d, os.Rename(d, d+"2"))
	case 8:
		return do("chmod "+p, os.Chmod(p, []os.FileMode{0o600, 0o755}[rng.IntN(2)]))
	case 9:
		os.Remove(p)
		return do("symlink "+p, os.Symlink(names[rng.IntN(len(names))], p))
	case 10: // a file with another name outside the root, written through it
		o := filepath.Join(outside, "linked")
		os.Remove(o)
		os.WriteFile(o, content(), 0o644)
		os.Remove(p)
		return do("link "+p, os.Link(o, p))
	case 11:
		o := filepath.Join(outside, "linked")
		f, err := os.OpenFile(o, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			f.Write([]byte("more"))
			f.Close()
		}
		return "append to the outside link"
	case 12:
		rules := [][]byte{nil, []byte("*.log\n"), []byte("a/b/\n")}
		return do(".gitignore", os.WriteFile(filepath.Join(root, ".gitignore"), rules[rng.IntN(len(rules))], 0o644))
	default: // the same size, maybe within the same clock tick
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			b[0] ^= 1
			return do("rewrite "+p, os.WriteFile(p, b, 0o644))
		}
		return "nothing"
	}
}

// TestWatchWalksFromAnotherManifest: a snapshot whose Previous is not the
// manifest of the Watch's last snapshot (that one was not kept: its
// checkpoint failed) walks everything, so the changes that snapshot saw
// are not lost.
func TestWatchWalksFromAnotherManifest(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	w := NewWatch()
	defer w.Close()
	kept, err := Snapshot(ctx, root, Options{Watch: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Snapshot(ctx, root, Options{Watch: w, Previous: &kept}); err != nil { // dropped
		t.Fatal(err)
	}
	got, err := Snapshot(ctx, root, Options{Watch: w, Previous: &kept})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := got.Lookup("f"); !ok || e.Size != 3 {
		t.Fatalf("the file written before the dropped snapshot: %+v, %v; want it recorded", e, ok)
	}
}
