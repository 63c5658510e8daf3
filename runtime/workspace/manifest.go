package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Entry kinds.
const (
	KindFile    = "file"
	KindDir     = "dir"
	KindSymlink = "symlink"
)

// Reasons an entry was skipped.
const (
	// SkipIgnored: an ignore rule matches the path (a directory is
	// recorded once, not what it holds).
	SkipIgnored = "ignored"
	// SkipTooLarge: a regular file larger than the size limit.
	SkipTooLarge = "too_large"
	// SkipSpecial: neither a regular file, a directory nor a symlink (a
	// socket, a device, a named pipe).
	SkipSpecial = "special"
	// SkipUnreadable: the file could not be read when it was recorded.
	SkipUnreadable = "unreadable"
)

// Entry is one path of a manifest.
type Entry struct {
	// Path is relative to the root, with forward slashes.
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Mode holds the permission bits (and setuid, setgid, sticky).
	Mode fs.FileMode `json:"mode"`
	// Size and SHA256 describe a file's content.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's target, as written.
	Target string `json:"target,omitempty"`
	// MTime is the file's modification time in nanoseconds: not part of
	// the recorded state (Digest leaves it out), it lets the next snapshot
	// reuse this hash for a file whose size and time did not change.
	MTime int64 `json:"mtime,omitempty"`
}

// Skip is a path a snapshot did not record, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Size is a skipped file's size (0 for directories and ignored paths).
	Size int64 `json:"size,omitempty"`
}

// Manifest is the recorded state of a directory.
type Manifest struct {
	// Entries are sorted by Path.
	Entries []Entry `json:"entries"`
	// Skipped are sorted by Path.
	Skipped []Skip `json:"skipped"`
	// Ignore are the ignore rules the snapshot applied; Restore applies
	// them again, so that what they match is left alone.
	Ignore []string `json:"ignore"`
	// At is when the snapshot began, in nanoseconds: a later snapshot
	// reuses a file's hash only when the file was last modified well
	// before it (not part of the recorded state).
	At int64 `json:"at,omitempty"`

	// kept holds contents the snapshot read, by hash (Options.Keep).
	kept map[string][]byte
	// gen is the generation of the Watch snapshot that made it (0: none):
	// the next snapshot with that Watch reads only what changed since.
	gen uint64
}

func (m *Manifest) keep(hash string, content []byte) {
	if m.kept == nil {
		m.kept = map[string][]byte{}
	}
	m.kept[hash] = content
}

// Without returns m without the entries and skipped paths that rules
// (Exclude's) match or hold, and with rules among its Ignore, so that a
// restore of it leaves those paths alone.
func (m Manifest) Without(rules []string) Manifest {
	if len(rules) == 0 {
		return m
	}
	ign := newMatcher(rules)
	out := m
	out.Entries = make([]Entry, 0, len(m.Entries))
	for _, e := range m.Entries {
		if !ign.under(e.Path, e.Kind == KindDir) {
			out.Entries = append(out.Entries, e)
		}
	}
	out.Skipped = make([]Skip, 0, len(m.Skipped))
	for _, sk := range m.Skipped {
		if !ign.under(sk.Path, true) {
			out.Skipped = append(out.Skipped, sk)
		}
	}
	out.Ignore = union(m.Ignore, rules)
	return out
}

// Release lets go of the contents the snapshot kept (Options.Keep): a
// manifest kept for later snapshots should not hold them.
func (m *Manifest) Release() { m.kept = nil }

// Digest is a hash of the recorded state: the entries without their
// times, and the skipped paths. Two snapshots of an unchanged directory
// have the same digest.
func (m Manifest) Digest() string {
	h := sha256.New()
	for _, e := range m.Entries {
		fmt.Fprintf(h, "%s\x00%s\x00%o\x00%d\x00%s\x00%s\n", e.Path, e.Kind, uint32(e.Mode), e.Size, e.SHA256, e.Target)
	}
	h.Write([]byte{0})
	for _, s := range m.Skipped {
		fmt.Fprintf(h, "%s\x00%s\x00%d\n", s.Path, s.Reason, s.Size)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Bytes is the total size of the manifest's files.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

// Files counts the manifest's files and symlinks.
func (m Manifest) Files() int {
	n := 0
	for _, e := range m.Entries {
		if e.Kind != KindDir {
			n++
		}
	}
	return n
}

// Hashes lists the distinct contents of the manifest's files, sorted.
func (m Manifest) Hashes() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range m.Entries {
		if e.Kind == KindFile && !seen[e.SHA256] {
			seen[e.SHA256] = true
			out = append(out, e.SHA256)
		}
	}
	sort.Strings(out)
	return out
}

// Lookup returns the entry at p.
func (m Manifest) Lookup(p string) (Entry, bool) {
	i := sort.Search(len(m.Entries), func(i int) bool { return m.Entries[i].Path >= p })
	if i < len(m.Entries) && m.Entries[i].Path == p {
		return m.Entries[i], true
	}
	return Entry{}, false
}

// Check reports the first entry a restore must not write: a path that is
// absolute, not clean, or climbs out of the root; an unknown kind; a file
// without a hash.
func (m Manifest) Check() error {
	for _, e := range m.Entries {
		if !validPath(e.Path) {
			return fmt.Errorf("workspace: manifest path %q is not a clean relative path", e.Path)
		}
		switch e.Kind {
		case KindDir, KindSymlink:
		case KindFile:
			if len(e.SHA256) != sha256.Size*2 {
				return fmt.Errorf("workspace: manifest file %q has no content hash", e.Path)
			}
		default:
			return fmt.Errorf("workspace: manifest path %q has unknown kind %q", e.Path, e.Kind)
		}
	}
	return nil
}

func validPath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../") && !strings.ContainsRune(p, 0)
}

// Marshal renders m as JSON.
func (m Manifest) Marshal() ([]byte, error) { return json.Marshal(m) }

// Unmarshal reads a manifest Marshal wrote.
func Unmarshal(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("workspace: read a manifest: %w", err)
	}
	return m, m.Check()
}
