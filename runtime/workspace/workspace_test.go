package workspace_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/runtime/workspace"
)

// memBlobs is a Blobs in memory that counts what it stores.
type memBlobs struct {
	mu     sync.Mutex
	blobs  map[string][][]byte
	puts   int
	chunks int
}

func newMemBlobs() *memBlobs { return &memBlobs{blobs: map[string][][]byte{}} }

func (b *memBlobs) Missing(_ context.Context, hashes []string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, h := range hashes {
		if _, ok := b.blobs[h]; !ok {
			out = append(out, h)
		}
	}
	return out, nil
}

func (b *memBlobs) Put(_ context.Context, sources []workspace.Source) error {
	read := make([][][]byte, len(sources))
	for i, src := range sources {
		for {
			c, err := src.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			read[i] = append(read[i], bytes.Clone(c)) // c is only read until the next call
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, src := range sources {
		if _, ok := b.blobs[src.Hash]; !ok {
			b.blobs[src.Hash] = read[i]
			b.puts++
			b.chunks += len(read[i])
		}
	}
	return nil
}

// save stores m as a checkpoint does.
func save(ctx context.Context, blobs workspace.Blobs, dir string, m workspace.Manifest) (string, error) {
	missing, err := workspace.Missing(ctx, blobs, m, nil)
	if err != nil {
		return "", err
	}
	return workspace.Save(ctx, blobs, dir, m, missing)
}

// asking counts the hashes Missing asks a Blobs about.
type asking struct {
	workspace.Blobs
	asked int
}

func (a *asking) Missing(ctx context.Context, hashes []string) ([]string, error) {
	a.asked += len(hashes)
	return a.Blobs.Missing(ctx, hashes)
}

// TestMissingAsksOnlyNewContents: given the latest stored manifest,
// Missing asks the store only about the contents it does not name.
func TestMissingAsksOnlyNewContents(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 20 {
		write(fmt.Sprintf("f%d", i), fmt.Sprint("content ", i), 0o644)(t, dir)
	}
	bl := &asking{Blobs: newMemBlobs()}
	first, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := save(ctx, bl, dir, first); err != nil {
		t.Fatal(err)
	}
	write("f3", "changed", 0o644)(t, dir)
	write("new", "content 4", 0o644)(t, dir) // a content the store holds, under a new name
	next, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bl.asked = 0
	missing, err := workspace.Missing(ctx, bl, next, &first)
	if err != nil {
		t.Fatal(err)
	}
	if bl.asked != 1 || len(missing) != 1 || missing[0].Path != "f3" {
		t.Fatalf("asked about %d contents, missing %+v; want 1 asked, f3 missing", bl.asked, missing)
	}
}

func (b *memBlobs) Read(_ context.Context, hash string, fn func([]byte) error) error {
	b.mu.Lock()
	chunks, ok := b.blobs[hash]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("no blob %s", hash)
	}
	for _, c := range chunks {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// step changes the workdir; want says what its snapshot records.
type step struct {
	name string
	do   func(t *testing.T, dir string)
}

func write(rel, content string, mode os.FileMode) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func must(f func() error) func(*testing.T, string) {
	return func(t *testing.T, _ string) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

// binaryContent is not text: NUL bytes and invalid UTF-8.
var binaryContent = string([]byte{0x89, 'P', 'N', 'G', 0, 0, 0xff, 0xfe, 1, 2, 3})

// TestSnapshotRestoreRoundTrip plays a scripted sequence of changes
// (writes, edits, deletes, renames, a binary file, symlinks, a mode
// change, an ignored directory, a file over the size limit), snapshots
// after each step, and restores every snapshot both into a fresh directory
// and into the workdir as the last step left it: each restore holds
// exactly the snapshot's entries (by hash, mode, link target), and the
// ignored and over-limit paths are listed as skipped and left alone.
func TestSnapshotRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	outside := t.TempDir()
	const maxFile = 64
	big := strings.Repeat("x", maxFile+1)
	steps := []step{
		{"empty", func(*testing.T, string) {}},
		{"write", write("a.txt", "one\ntwo\n", 0o644)},
		{"nested and ignore rules", func(t *testing.T, d string) {
			write("src/main.go", "package main\n", 0o644)(t, d)
			write(".gitignore", "build/\n*.log\n!keep.log\n", 0o644)(t, d)
			write("build/out.bin", "ignored", 0o644)(t, d)
			write("run.log", "ignored too", 0o644)(t, d)
			write("keep.log", "not ignored", 0o644)(t, d)
			write(".git/HEAD", "ref: refs/heads/main\n", 0o644)(t, d)
		}},
		{"edit", write("a.txt", "one\nTWO\nthree", 0o644)},
		{"binary and big", func(t *testing.T, d string) {
			write("img.png", binaryContent, 0o644)(t, d)
			write("big.dat", big, 0o644)(t, d)
		}},
		{"symlinks", func(t *testing.T, d string) {
			must(func() error { return os.Symlink("a.txt", filepath.Join(d, "link")) })(t, d)
			must(func() error { return os.Symlink(outside, filepath.Join(d, "out")) })(t, d)
			must(func() error { return os.Symlink("missing", filepath.Join(d, "dangling")) })(t, d)
		}},
		{"executable", write("src/run.sh", "#!/bin/sh\necho hi\n", 0o755)},
		{"rename", must(func() error { return os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")) })},
		{"delete", must(func() error { return os.Remove(filepath.Join(dir, "src/main.go")) })},
		{"duplicate content", write("copy.txt", "one\nTWO\nthree", 0o644)},
		{"file becomes dir", func(t *testing.T, d string) {
			must(func() error { return os.Remove(filepath.Join(d, "copy.txt")) })(t, d)
			write("copy.txt/inner", "inside", 0o600)(t, d)
			must(func() error { return os.Mkdir(filepath.Join(d, "empty"), 0o750) })(t, d)
		}},
	}
	blobs := newMemBlobs()
	var snaps []workspace.Manifest
	var prev *workspace.Manifest
	for _, s := range steps {
		s.do(t, dir)
		m, err := workspace.Snapshot(ctx, dir, workspace.Options{MaxFile: maxFile, Previous: prev})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if _, err := save(ctx, blobs, dir, m); err != nil {
			t.Fatalf("%s: save: %v", s.name, err)
		}
		snaps = append(snaps, m)
		prev = &snaps[len(snaps)-1]
	}

	last := snaps[len(snaps)-1]
	wantSkipped := map[string]string{".git": workspace.SkipIgnored, "build": workspace.SkipIgnored, "run.log": workspace.SkipIgnored, "big.dat": workspace.SkipTooLarge}
	gotSkipped := map[string]string{}
	for _, s := range last.Skipped {
		gotSkipped[s.Path] = s.Reason
	}
	if fmt.Sprint(gotSkipped) != fmt.Sprint(wantSkipped) {
		t.Errorf("skipped %v, want %v", gotSkipped, wantSkipped)
	}
	if e, ok := last.Lookup("out"); !ok || e.Kind != workspace.KindSymlink || e.Target != outside {
		t.Errorf("symlink out recorded as %+v, want a link to %s", e, outside)
	}
	if _, ok := last.Lookup("keep.log"); !ok {
		t.Error("keep.log (negated rule) not recorded")
	}
	// "one\nTWO\nthree" is held by b.txt and was by copy.txt: stored once;
	// each snapshot's manifest is a blob too.
	if want := len(distinctHashes(snaps)) + len(snaps); blobs.puts != want {
		t.Errorf("stored %d blobs for %d distinct contents and %d manifests", blobs.puts, len(distinctHashes(snaps)), len(snaps))
	}

	for i, m := range snaps {
		t.Run(fmt.Sprintf("%02d-%s/fresh", i, steps[i].name), func(t *testing.T) {
			fresh := t.TempDir()
			restoreInto(t, fresh, m, blobs)
			assertHolds(t, fresh, m, false)
		})
	}
	// Into the live workdir: to later states first, then down to the first
	// one. An ignored file stays while the restored state has the
	// .gitignore that ignores it (from step 2 on); the file over the limit
	// while the restored state skipped it (from step 4 on).
	order := []int{len(snaps) - 1, 7, 5, 4}
	for i := len(snaps) - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for _, i := range order {
		restoreInto(t, dir, snaps[i], blobs)
		assertHolds(t, dir, snaps[i], true)
		if i < 2 {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "build/out.bin")); err != nil || string(b) != "ignored" {
			t.Fatalf("restore of %s touched an ignored file: %q, %v", steps[i].name, b, err)
		}
		if _, err := os.Stat(filepath.Join(dir, ".git/HEAD")); err != nil {
			t.Fatalf("restore of %s touched .git: %v", steps[i].name, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "big.dat")); i >= 4 && (err != nil || string(b) != big) {
			t.Fatalf("restore of %s touched the skipped big.dat: %v", steps[i].name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".git/HEAD")); err != nil {
		t.Errorf("restores touched .git: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a restore wrote outside the workdir: %v", entries)
	}
}

func restoreInto(t *testing.T, dir string, m workspace.Manifest, blobs workspace.Blobs) {
	t.Helper()
	if _, err := workspace.Restore(context.Background(), dir, m, blobs); err != nil {
		t.Fatalf("restore: %v", err)
	}
}

// assertHolds checks that dir holds exactly m's entries; in place, the
// skipped paths may be there too.
func assertHolds(t *testing.T, dir string, m workspace.Manifest, inPlace bool) {
	t.Helper()
	got, err := workspace.Snapshot(context.Background(), dir, workspace.Options{Ignore: append(m.Ignore, "build/", "*.log", "!keep.log")})
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]bool{}
	for _, s := range m.Skipped {
		skipped[s.Path] = true
	}
	var gotLines, wantLines []string
	for _, e := range got.Entries {
		if inPlace && (skipped[e.Path] || skipped[strings.SplitN(e.Path, "/", 2)[0]]) {
			continue
		}
		gotLines = append(gotLines, line(e))
	}
	for _, e := range m.Entries {
		wantLines = append(wantLines, line(e))
	}
	if g, w := strings.Join(gotLines, "\n"), strings.Join(wantLines, "\n"); g != w {
		t.Fatalf("restored directory holds\n%s\nwant\n%s", g, w)
	}
}

func line(e workspace.Entry) string {
	return fmt.Sprintf("%s %s %o %s %s", e.Path, e.Kind, e.Mode, e.SHA256, e.Target)
}

func distinctHashes(snaps []workspace.Manifest) map[string]bool {
	out := map[string]bool{}
	for _, m := range snaps {
		for _, h := range m.Hashes() {
			out[h] = true
		}
	}
	return out
}

// TestDiff renders the changes between two snapshots, and between a
// snapshot and the directory, as git does.
func TestDiff(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blobs := newMemBlobs()
	write("a.txt", "one\ntwo\n", 0o644)(t, dir)
	write("gone.txt", "bye\n", 0o644)(t, dir)
	write("img.bin", binaryContent, 0o644)(t, dir)
	before, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := save(ctx, blobs, dir, before); err != nil {
		t.Fatal(err)
	}
	write("a.txt", "one\n2\n", 0o755)(t, dir)
	must(func() error { return os.Remove(filepath.Join(dir, "gone.txt")) })(t, dir)
	write("img.bin", binaryContent+"x", 0o644)(t, dir)
	must(func() error { return os.Symlink("a.txt", filepath.Join(dir, "link")) })(t, dir)
	after, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	changes, err := workspace.Diff(ctx, workspace.StoredSide(before, blobs), workspace.DirSide(after, dir))
	if err != nil {
		t.Fatal(err)
	}
	got := workspace.Unified(changes)
	for _, want := range []string{
		"diff --git a/a.txt b/a.txt\nold mode 100644\nnew mode 100755\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n",
		"diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
		"Binary files a/img.bin and b/img.bin differ\n",
		"diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+a.txt\n\\ No newline at end of file\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks\n%s\nin\n%s", want, got)
		}
	}
	var statuses []string
	for _, c := range changes {
		statuses = append(statuses, c.Path+":"+c.Status)
	}
	if s := strings.Join(statuses, " "); s != "a.txt:modified gone.txt:deleted img.bin:modified link:added" {
		t.Errorf("changes %s", s)
	}
	same, err := workspace.Diff(ctx, workspace.DirSide(after, dir), workspace.DirSide(after, dir))
	if err != nil || len(same) != 0 {
		t.Errorf("a state against itself: %v, %v", same, err)
	}
}

// TestLargeBlobStreams stores a file of several chunks and reads it back;
// a file that changes between its snapshot and its save is refused.
func TestLargeBlobStreams(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var buf bytes.Buffer
	for i := 0; buf.Len() < 3*workspace.ChunkSize; i++ {
		fmt.Fprintf(&buf, "%d %x\n", i, i*7919) // compresses little enough to need chunks
	}
	big := buf.Bytes()
	// Random-looking bytes so that gzip cannot shrink them below a chunk.
	for i := range big {
		big[i] ^= byte(i * 2654435761 >> 13)
	}
	write("big", string(big), 0o644)(t, dir)
	m, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	blobs := newMemBlobs()
	if _, err := save(ctx, blobs, dir, m); err != nil {
		t.Fatal(err)
	}
	if blobs.chunks < 2 {
		t.Fatalf("a %d-byte file was stored in %d chunk(s)", len(big), blobs.chunks)
	}
	e, _ := m.Lookup("big")
	got, err := workspace.ReadAll(ctx, blobs, e.SHA256)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(big))
	}

	write("changed", "before", 0o644)(t, dir)
	m2, err := workspace.Snapshot(ctx, dir, workspace.Options{Previous: &m})
	if err != nil {
		t.Fatal(err)
	}
	write("changed", "after!", 0o644)(t, dir)
	if _, err := save(ctx, blobs, dir, m2); !errors.Is(err, workspace.ErrChanged) {
		t.Fatalf("save of a file changed since its snapshot: %v, want ErrChanged", err)
	}
}

// TestSnapshotRereadsRecentFiles: a file rewritten with the same size and
// modification time is read again while that time is recent for the
// previous snapshot, and trusted once it is old.
func TestSnapshotRereadsRecentFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write("f", "aaaa", 0o644)(t, dir)
	mtime := time.Now()
	must(func() error { return os.Chtimes(p, mtime, mtime) })(t, dir)
	first, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	write("f", "bbbb", 0o644)(t, dir)
	must(func() error { return os.Chtimes(p, mtime, mtime) })(t, dir)
	second, err := workspace.Snapshot(ctx, dir, workspace.Options{Previous: &first})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := first.Lookup("f")
	b, _ := second.Lookup("f")
	if a.SHA256 == b.SHA256 {
		t.Fatal("a file rewritten with its size and time, within the racy window, kept its old hash")
	}
	// An old time is trusted: the hash comes from the previous manifest
	// (which here says something the file no longer holds).
	old := mtime.Add(-time.Hour)
	must(func() error { return os.Chtimes(p, old, old) })(t, dir)
	third, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := third
	fake.Entries = append([]workspace.Entry(nil), third.Entries...)
	fake.Entries[0].SHA256 = a.SHA256
	fourth, err := workspace.Snapshot(ctx, dir, workspace.Options{Previous: &fake})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fourth.Lookup("f"); d.SHA256 != a.SHA256 {
		t.Error("a file with an old, unchanged size and time was read again")
	}
}

// TestSaveStoresKeptContent: content a snapshot kept (Options.Keep) is
// stored as it was hashed, even when the file changed since; content it
// did not keep is read again and checked.
func TestSaveStoresKeptContent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write("small", "as it was", 0o644)(t, dir)
	write("large", strings.Repeat("large ", 100), 0o644)(t, dir)
	m, err := workspace.Snapshot(ctx, dir, workspace.Options{Keep: 100})
	if err != nil {
		t.Fatal(err)
	}
	write("small", "changed since", 0o644)(t, dir)
	blobs := newMemBlobs()
	if _, err := save(ctx, blobs, dir, m); err != nil {
		t.Fatalf("save of kept content: %v", err)
	}
	e, _ := m.Lookup("small")
	if got, err := workspace.ReadAll(ctx, blobs, e.SHA256); err != nil || string(got) != "as it was" {
		t.Fatalf("stored %q (%v), want the snapshot's content", got, err)
	}

	write("large", strings.Repeat("LARGE ", 100), 0o644)(t, dir)
	if _, err := save(ctx, newMemBlobs(), dir, m); !errors.Is(err, workspace.ErrChanged) {
		t.Fatalf("save of a file past Keep changed since its snapshot: %v, want ErrChanged", err)
	}
	m.Release()
	if _, err := save(ctx, newMemBlobs(), dir, m); !errors.Is(err, workspace.ErrChanged) {
		t.Fatalf("save after Release of a file changed since its snapshot: %v, want ErrChanged", err)
	}
}

// TestIncompressibleContentStored: content gzip cannot shrink (random
// bytes) is stored in gzip's uncompressed blocks, content it can (text)
// at its fastest level; both read back as they were. The gzip header's
// XFL byte says which: 4 for the fastest level, 0 for none.
func TestIncompressibleContentStored(t *testing.T) {
	ctx := context.Background()
	random := make([]byte, 300<<10)
	crand.Read(random)
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog\n", 7000))
	for _, tc := range []struct {
		name    string
		content []byte
		xfl     byte
	}{
		{"random", random, 0},
		{"text", text, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, keep := range []int64{0, 1 << 20} {
				dir := t.TempDir()
				write("f", string(tc.content), 0o644)(t, dir)
				m, err := workspace.Snapshot(ctx, dir, workspace.Options{Keep: keep})
				if err != nil {
					t.Fatal(err)
				}
				blobs := newMemBlobs()
				if _, err := save(ctx, blobs, dir, m); err != nil {
					t.Fatal(err)
				}
				e, _ := m.Lookup("f")
				if first := blobs.blobs[e.SHA256][0]; len(first) < 10 || first[8] != tc.xfl {
					t.Errorf("keep %d: stored with XFL %d, want %d", keep, first[8], tc.xfl)
				}
				if got, err := workspace.ReadAll(ctx, blobs, e.SHA256); err != nil || !bytes.Equal(got, tc.content) {
					t.Fatalf("keep %d: read back %d bytes (%v), want %d", keep, len(got), err, len(tc.content))
				}
			}
		})
	}
}

// TestSnapshotExcludes: a path Options.Exclude names inside the root (the
// daemon's home) is left out as ignored, whatever the root's ignore files
// say; one outside the root, or holding it, changes nothing; Without takes
// it out of a manifest recorded with it, and a restore then leaves it
// alone.
func TestSnapshotExcludes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write("home/token", "secret", 0o644)(t, dir)
	write("home/db/trellis.db", "rows", 0o644)(t, dir)
	write("src/a.go", "package a", 0o644)(t, dir)
	write(".gitignore", "!home/\n!home/token\n", 0o644)(t, dir)
	home := filepath.Join(dir, "home")

	with, err := workspace.Snapshot(ctx, dir, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := with.Lookup("home/token"); !ok {
		t.Fatal("without Exclude, the snapshot left home/token out")
	}
	for _, tc := range []struct {
		name    string
		exclude []string
		want    bool // home left out
	}{
		{"inside", []string{home}, true},
		{"inside, not clean", []string{dir + "/src/../home/"}, true},
		{"outside", []string{t.TempDir()}, false},
		{"the root itself", []string{dir}, false},
		{"holding the root", []string{filepath.Dir(dir)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := workspace.Snapshot(ctx, dir, workspace.Options{Exclude: tc.exclude})
			if err != nil {
				t.Fatal(err)
			}
			_, kept := m.Lookup("home/token")
			if kept == tc.want {
				t.Errorf("home/token recorded: %v, want %v", kept, !tc.want)
			}
			if _, ok := m.Lookup("src/a.go"); !ok {
				t.Error("src/a.go was left out")
			}
			skipped := false
			for _, sk := range m.Skipped {
				skipped = skipped || sk == (workspace.Skip{Path: "home", Reason: workspace.SkipIgnored})
			}
			if skipped != tc.want {
				t.Errorf("home listed as ignored: %v, want %v (%v)", skipped, tc.want, m.Skipped)
			}
		})
	}

	// A manifest recorded with the home: Without takes it out, and a
	// restore leaves the home as it is now.
	blobs := newMemBlobs()
	if _, err := save(ctx, blobs, dir, with); err != nil {
		t.Fatal(err)
	}
	write("home/token", "rotated", 0o644)(t, dir)
	m := with.Without(workspace.Exclude(dir, []string{home}))
	if _, ok := m.Lookup("home/token"); ok {
		t.Fatal("Without kept home/token")
	}
	if _, ok := m.Lookup("home"); ok {
		t.Fatal("Without kept the home directory")
	}
	if _, err := workspace.Restore(ctx, dir, m, blobs); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, "token")); err != nil || string(b) != "rotated" {
		t.Fatalf("after a restore the home's token holds %q (%v), want it left alone", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "src", "a.go")); err != nil || string(b) != "package a" {
		t.Fatalf("src/a.go after the restore: %q (%v)", b, err)
	}
}
