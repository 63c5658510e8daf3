package skill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/trellis-run/trellis/internal/broadcast"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// CatalogEnv names the environment variable listing more catalog folders.
const CatalogEnv = "TRELLIS_SKILL_CATALOG"

// Files and folders of the service inside Home/skills.
const (
	// sourceFile records, inside an installed skill, where it came from.
	sourceFile = ".trellis-source"
	// stagingPrefix names the folders installs are staged in.
	stagingPrefix = ".install-"
	// trashPrefix names the folders removed skills are moved to.
	trashPrefix = ".remove-"
)

// Sentinel errors, wrapped by the *errs.Error values the Service returns.
var (
	// ErrInvalidSkill: the SKILL.md or the folder's layout is wrong (invalid_params).
	ErrInvalidSkill = errors.New("invalid skill")
	// ErrBadSource: the source cannot be read, fetched or is of no known kind (invalid_params).
	ErrBadSource = errors.New("unusable skill source")
	// ErrUnsafe: the source holds an entry that would leave the skill's
	// folder, or one that is not a file, folder or symbolic link (invalid_params).
	ErrUnsafe = errors.New("unsafe skill content")
	// ErrTooLarge: the skill holds more than Limits allow (invalid_params).
	ErrTooLarge = errors.New("skill too large")
	// ErrNameTaken: a skill of that name is installed from another source (invalid_params).
	ErrNameTaken = errors.New("skill name taken")
	// ErrNotFound: no skill of that name is installed (not_found).
	ErrNotFound = errors.New("skill not installed")
)

// Skill describes an installed skill or a catalog entry.
type Skill struct {
	Name         string
	Description  string
	Instructions string
	// Source is what Install was given (a local path made absolute, or a
	// git URL); for a catalog entry, its folder.
	Source string
	// Path is the skill's folder.
	Path      string
	Installed bool
}

// Limits bound what one skill may hold; zero fields take the defaults.
type Limits struct {
	// MaxFiles bounds the files, folders and links of a skill (default 1000).
	MaxFiles int
	// MaxBytes bounds the total size of its files (default 50 MiB).
	MaxBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = 1000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 50 << 20
	}
	return l
}

// Options configure a Service.
type Options struct {
	// Home is the daemon's home: skills are installed in Home/skills and
	// the catalog starts with Home/skill-catalog.
	Home string
	// Catalog lists more catalog folders (the daemon passes CatalogEnv's).
	Catalog []string
	// Limits bound an installed skill.
	Limits Limits
	// Git is the git program; "" means "git" found on PATH.
	Git string
	// Log receives warnings about skills that cannot be loaded; nil discards them.
	Log *slog.Logger
}

// Service keeps the installed skills. It is safe for concurrent use.
type Service struct {
	opts Options
	dir  string // Home/skills

	op sync.Mutex // serialises changes of dir: install, remove, reload

	mu     sync.RWMutex
	skills map[string]Skill

	watchers broadcast.Hub[Event]
}

// New returns a Service over opts.Home/skills (created if missing), with
// the skills found there loaded.
func New(opts Options) (*Service, error) {
	if opts.Home == "" {
		return nil, errors.New("skill: no home directory")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Git == "" {
		opts.Git = "git"
	}
	opts.Limits = opts.Limits.withDefaults()
	s := &Service{opts: opts, dir: filepath.Join(opts.Home, "skills"), skills: map[string]Skill{}}
	s.watchers.Limit = watchBacklog
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("skill: create %s: %w", s.dir, err)
	}
	// Leftovers of an install or removal a crash interrupted.
	for _, pattern := range []string{stagingPrefix + "*", trashPrefix + "*"} {
		leftovers, _ := filepath.Glob(filepath.Join(s.dir, pattern))
		for _, l := range leftovers {
			_ = os.RemoveAll(l)
		}
	}
	s.op.Lock()
	defer s.op.Unlock()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// List returns the installed skills sorted by name.
func (s *Service) List() []Skill {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Skill, 0, len(s.skills))
	for _, sk := range s.skills {
		out = append(out, sk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the installed skill called name.
func (s *Service) Get(name string) (Skill, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sk, ok := s.skills[name]
	return sk, ok
}

// Search returns the installed skills, then the catalog entries not
// installed, whose name or description holds every word of query
// (case-insensitive; "" matches all), each group sorted by name.
func (s *Service) Search(query string) []Skill {
	words := strings.Fields(strings.ToLower(query))
	matches := func(sk Skill) bool {
		hay := strings.ToLower(sk.Name + " " + sk.Description)
		for _, w := range words {
			if !strings.Contains(hay, w) {
				return false
			}
		}
		return true
	}
	var out []Skill
	installed := map[string]bool{}
	for _, sk := range s.List() {
		installed[sk.Name] = true
		if matches(sk) {
			out = append(out, sk)
		}
	}
	for _, sk := range s.catalog() {
		if !installed[sk.Name] && matches(sk) {
			out = append(out, sk)
		}
	}
	return out
}

// catalog reads the catalog folders; the first entry of a name wins.
func (s *Service) catalog() []Skill {
	dirs := append([]string{filepath.Join(s.opts.Home, "skill-catalog")}, s.opts.Catalog...)
	seen := map[string]bool{}
	var out []Skill
	add := func(dir string) bool {
		m, err := readManifest(dir)
		if err != nil {
			return false
		}
		if !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, Skill{Name: m.Name, Description: m.Description, Instructions: m.Instructions, Source: dir, Path: dir})
		}
		return true
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		d, err := filepath.Abs(d)
		if err != nil || add(d) {
			continue
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		var batch []string
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				batch = append(batch, filepath.Join(d, e.Name()))
			}
		}
		for _, sub := range batch {
			add(sub)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Remove uninstalls the skill called name.
func (s *Service) Remove(name string) error {
	if !namePattern.MatchString(name) {
		if name == "" {
			return errs.Wrap(errcode.InvalidParams, ErrInvalidSkill, "name is required: the skill to remove (skill.list shows them)")
		}
		return errs.Wrap(errcode.NotFound, ErrNotFound, "no skill %q is installed (skill.list shows them)", name)
	}
	s.op.Lock()
	defer s.op.Unlock()
	dir := filepath.Join(s.dir, name)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return errs.Wrap(errcode.NotFound, ErrNotFound, "no skill %q is installed (skill.list shows them)", name)
	}
	if err := s.discard(dir); err != nil {
		return fmt.Errorf("skill: remove %s: %w", name, err)
	}
	s.mu.Lock()
	delete(s.skills, name)
	s.mu.Unlock()
	s.watchers.Publish(Event{Reason: ReasonRemove, Name: name})
	return nil
}

// discard moves dir aside, then deletes it, so that a crash never leaves
// half a skill under its name.
func (s *Service) discard(dir string) error {
	trash, err := os.MkdirTemp(s.dir, trashPrefix)
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(trash, "old")); err != nil {
		os.RemoveAll(trash)
		return err
	}
	return os.RemoveAll(trash)
}

// Reload reads the installed skills from disk again (after edits by hand)
// and publishes ReasonReload.
func (s *Service) Reload() error {
	s.op.Lock()
	err := s.load()
	s.op.Unlock()
	if err != nil {
		return err
	}
	s.watchers.Publish(Event{Reason: ReasonReload})
	return nil
}

// load replaces the in-memory skills with those on disk; folders that do
// not hold a valid skill named like the folder are skipped with a warning.
// The caller holds s.op.
func (s *Service) load() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("skill: read %s: %w", s.dir, err)
	}
	skills := map[string]Skill{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(s.dir, e.Name())
		m, err := readManifest(dir)
		if err == nil && m.Name != e.Name() {
			err = fmt.Errorf("its %s names it %q", ManifestFile, m.Name)
		}
		if err != nil {
			s.opts.Log.Warn("skipping an installed skill that cannot be loaded", "path", dir, "err", err)
			continue
		}
		skills[m.Name] = Skill{Name: m.Name, Description: m.Description, Instructions: m.Instructions,
			Source: readSource(dir), Path: dir, Installed: true}
	}
	s.mu.Lock()
	s.skills = skills
	s.mu.Unlock()
	return nil
}

// readManifest parses and validates dir's SKILL.md, which must be a
// regular file.
func readManifest(dir string) (Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Manifest{}, fmt.Errorf("no %s in %s", ManifestFile, dir)
	case err != nil:
		return Manifest{}, err
	case !fi.Mode().IsRegular():
		return Manifest{}, fmt.Errorf("%s in %s is not a regular file", ManifestFile, dir)
	case fi.Size() > MaxManifestBytes:
		return Manifest{}, fmt.Errorf("%s is %d bytes, more than %d", ManifestFile, fi.Size(), MaxManifestBytes)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, err
	}
	return m, m.Validate()
}

type sourceRecord struct {
	Source string `json:"source"`
}

// readSource returns where the skill in dir was installed from; a folder
// put there by hand is its own source.
func readSource(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, sourceFile))
	if err != nil {
		return dir
	}
	var r sourceRecord
	if json.Unmarshal(b, &r) != nil || r.Source == "" {
		return dir
	}
	return r.Source
}

func writeSource(dir, source string) error {
	b, _ := json.Marshal(sourceRecord{Source: source})
	return os.WriteFile(filepath.Join(dir, sourceFile), append(b, '\n'), 0o600)
}

// Watch returns a stream of Events that ends with ctx.
func (s *Service) Watch(ctx context.Context) *Watch { return s.watchers.Add(ctx) }

// Close ends every Watch with ErrClosed.
func (s *Service) Close() { s.watchers.Close() }
