package skill

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Read returns the SKILL.md of the installed skill called name and where
// it is.
func (s *Service) Read(name string) (content, path string, err error) {
	sk, ok := s.Get(name)
	if !ok {
		return "", "", notInstalled(name)
	}
	path = filepath.Join(sk.Path, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", notInstalled(name)
	}
	if err != nil {
		return "", "", fmt.Errorf("skill: read %s: %w", path, err)
	}
	return string(b), path, nil
}

// Write replaces the SKILL.md of the installed skill called name with
// content, verbatim; content must be a valid SKILL.md naming the skill
// name. It publishes ReasonWrite.
func (s *Service) Write(name, content string) (Skill, error) {
	if _, ok := s.Get(name); !ok {
		return Skill{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no skill %q is installed (skill.list shows them; skill.create makes a new one)", name)
	}
	return s.save(name, content, true)
}

// Create writes a new skill called name whose SKILL.md is content,
// verbatim; an installed skill of that name is replaced only when force is
// set. It publishes ReasonWrite.
func (s *Service) Create(name, content string, force bool) (Skill, error) {
	if !namePattern.MatchString(name) || len(name) > MaxNameLen {
		return Skill{}, errs.Wrap(errcode.InvalidParams, ErrInvalidSkill, "name %q is not a skill name: lower-case letters, digits and hyphens, at most %d", name, MaxNameLen)
	}
	return s.save(name, content, force)
}

// save validates content and writes it as name's SKILL.md; replace allows
// an existing skill folder to be overwritten.
func (s *Service) save(name, content string, replace bool) (Skill, error) {
	m, err := ParseManifest([]byte(content))
	if err == nil {
		err = m.Validate()
	}
	if err == nil && m.Name != name {
		err = fmt.Errorf("%s names the skill %q, not %q", ManifestFile, m.Name, name)
	}
	if err != nil {
		return Skill{}, errs.Wrap(errcode.InvalidParams, errors.Join(ErrInvalidSkill, err), "invalid skill %s: %v", name, err)
	}
	s.op.Lock()
	defer s.op.Unlock()
	dir := filepath.Join(s.dir, name)
	if _, err := os.Lstat(dir); err == nil && !replace {
		return Skill{}, errs.Wrap(errcode.InvalidParams, ErrNameTaken, "a skill named %s already exists; pass force to overwrite its %s", name, ManifestFile)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Skill{}, fmt.Errorf("skill: create %s: %w", dir, err)
	}
	// Written aside and renamed, so that a reader never sees half a file.
	tmp, err := os.CreateTemp(dir, ".SKILL.md-")
	if err != nil {
		return Skill{}, fmt.Errorf("skill: write %s: %w", name, err)
	}
	_, werr := tmp.WriteString(content)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(dir, ManifestFile))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return Skill{}, fmt.Errorf("skill: write %s: %w", name, werr)
	}
	sk := Skill{Name: name, Description: m.Description, Instructions: m.Instructions, Source: readSource(dir), Path: dir, Installed: true}
	s.mu.Lock()
	s.skills[name] = sk
	s.mu.Unlock()
	s.watchers.Publish(Event{Reason: ReasonWrite, Name: name})
	return sk, nil
}

func notInstalled(name string) error {
	return errs.Wrap(errcode.NotFound, ErrNotFound, "no skill %q is installed (skill.list shows them)", name)
}
