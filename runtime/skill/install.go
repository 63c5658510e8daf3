package skill

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Kinds of install source.
const (
	kindFolder = "folder"
	kindTarGz  = "tar.gz"
	kindZip    = "zip"
	kindGit    = "git"
)

// source is a classified install source.
type source struct {
	kind string
	// id is what .trellis-source records and reinstalls compare: the
	// absolute path of a local source, the URL of a git one.
	id string
}

// scpLike matches git's user@host:path form of an ssh URL.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:[^/\\]`)

// parseSource tells what kind of source raw is. A local path is relative
// to the daemon's working directory.
func parseSource(raw string) (source, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return source{}, badSource("source is required: a skill folder, a .tar.gz or .zip file, or a git URL")
	}
	if scheme, _, ok := strings.Cut(raw, "://"); ok && !strings.ContainsAny(scheme, `/\`) {
		switch strings.ToLower(scheme) {
		case "file", "https", "ssh":
			u, err := url.Parse(raw)
			if err != nil {
				return source{}, badSource("source %q is not a valid URL: %v", raw, err)
			}
			if u.Scheme != "file" && u.Host == "" {
				return source{}, badSource("source %q names no host", raw)
			}
			return source{kind: kindGit, id: raw}, nil
		case "http":
			return source{}, badSource("source %q: plain http is refused; use an https:// URL", raw)
		default:
			return source{}, badSource("source %q: git URLs must be file://, https://, ssh:// or user@host:path", raw)
		}
	}
	if _, err := os.Stat(raw); errors.Is(err, fs.ErrNotExist) && scpLike.MatchString(raw) {
		return source{kind: kindGit, id: raw}, nil
	}
	abs, err := filepath.Abs(raw)
	if err != nil {
		return source{}, badSource("source %q: %v", raw, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return source{}, errs.Wrap(errcode.NotFound, ErrBadSource, "source %s does not exist: give a skill folder, a .tar.gz or .zip file, or a git URL", abs)
	case err != nil:
		return source{}, badSource("source %s cannot be read: %v", abs, err)
	case fi.IsDir():
		return source{kind: kindFolder, id: abs}, nil
	case !fi.Mode().IsRegular():
		return source{}, badSource("source %s is neither a folder nor a file", abs)
	}
	lower := strings.ToLower(abs)
	switch {
	case strings.HasSuffix(lower, ".tar.gz") || strings.HasSuffix(lower, ".tgz"):
		return source{kind: kindTarGz, id: abs}, nil
	case strings.HasSuffix(lower, ".zip"):
		return source{kind: kindZip, id: abs}, nil
	}
	return source{}, badSource("source %s is a file but not a .tar.gz, .tgz or .zip archive", abs)
}

// Install installs the skill at rawSource (see the package doc) and
// publishes ReasonInstall. A skill of the same name installed from the
// same source is replaced; from another source it is ErrNameTaken.
func (s *Service) Install(ctx context.Context, rawSource string) (Skill, error) {
	src, err := parseSource(rawSource)
	if err != nil {
		return Skill{}, err
	}
	staging, err := os.MkdirTemp(s.dir, stagingPrefix)
	if err != nil {
		return Skill{}, fmt.Errorf("skill: stage %s: %w", src.id, err)
	}
	defer os.RemoveAll(staging)
	tree := filepath.Join(staging, "tree")
	switch src.kind {
	case kindFolder:
		err = copyFolder(src.id, tree, s.opts.Limits)
	case kindTarGz:
		err = extractTarGz(src.id, tree, s.opts.Limits)
	case kindZip:
		err = extractZip(src.id, tree, s.opts.Limits)
	case kindGit:
		err = s.clone(ctx, src.id, tree)
	}
	if err != nil {
		return Skill{}, err
	}
	root, err := skillRoot(tree)
	if err != nil {
		return Skill{}, err
	}
	if err := checkTree(root, s.opts.Limits); err != nil {
		return Skill{}, err
	}
	m, err := readManifest(root)
	if err != nil {
		return Skill{}, errs.Wrap(errcode.InvalidParams, errors.Join(ErrInvalidSkill, err), "invalid skill at %s: %v", src.id, err)
	}
	if err := writeSource(root, src.id); err != nil {
		return Skill{}, fmt.Errorf("skill: record the source of %s: %w", m.Name, err)
	}

	s.op.Lock()
	defer s.op.Unlock()
	final := filepath.Join(s.dir, m.Name)
	if old, ok := s.Get(m.Name); ok {
		if old.Source != src.id {
			return Skill{}, errs.Wrap(errcode.InvalidParams, ErrNameTaken,
				"a skill named %s is already installed from %s; remove it first (skill.remove) to install it from %s", m.Name, old.Source, src.id)
		}
		if err := s.discard(final); err != nil {
			return Skill{}, fmt.Errorf("skill: replace %s: %w", m.Name, err)
		}
	} else if _, err := os.Lstat(final); err == nil {
		return Skill{}, errs.Wrap(errcode.InvalidParams, ErrNameTaken,
			"%s exists but holds no skill that loads; remove it (skill.remove %s) before installing %s", final, m.Name, m.Name)
	}
	if err := os.Rename(root, final); err != nil {
		return Skill{}, fmt.Errorf("skill: move %s into place: %w", m.Name, err)
	}
	sk := Skill{Name: m.Name, Description: m.Description, Instructions: m.Instructions, Source: src.id, Path: final, Installed: true}
	s.mu.Lock()
	s.skills[m.Name] = sk
	s.mu.Unlock()
	s.watchers.Publish(Event{Reason: ReasonInstall, Name: m.Name})
	return sk, nil
}

// skillRoot returns tree when it holds SKILL.md, else its only folder
// (ignoring macOS archive debris) when that one does.
func skillRoot(tree string) (string, error) {
	if _, err := os.Lstat(filepath.Join(tree, ManifestFile)); err == nil {
		return tree, nil
	}
	entries, err := os.ReadDir(tree)
	if err != nil {
		return "", fmt.Errorf("skill: read the staged skill: %w", err)
	}
	var dirs []string
	for _, e := range entries {
		switch {
		case e.Name() == "__MACOSX" || e.Name() == ".DS_Store":
		case e.IsDir():
			dirs = append(dirs, e.Name())
		default:
			dirs = append(dirs, "") // a file: the top is not one folder
		}
	}
	if len(dirs) == 1 && dirs[0] != "" {
		sub := filepath.Join(tree, dirs[0])
		if _, err := os.Lstat(filepath.Join(sub, ManifestFile)); err == nil {
			return sub, nil
		}
	}
	return "", errs.Wrap(errcode.InvalidParams, ErrInvalidSkill,
		"no %s found: a skill has it at its top, or in the only folder of an archive or repository", ManifestFile)
}

func badSource(format string, args ...any) error {
	return errs.Wrap(errcode.InvalidParams, ErrBadSource, format, args...)
}
