package agents

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/trellis-run/trellis/internal/atomicfile"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// SharedStore keeps the agent definitions of several daemons on one store
// (a PostgreSQL store's settings table): a definition is one row, created
// only if its name is free (InitSetting keeps the first writer's value) and
// deleted at once, so that every daemon lists and spawns the same agents.
type SharedStore interface {
	InitSetting(ctx context.Context, namespace, key string, value json.RawMessage) (json.RawMessage, error)
	GetSetting(ctx context.Context, namespace, key string) (json.RawMessage, error)
	ListSettings(ctx context.Context, namespace string) ([]store.Setting, error)
	DeleteSetting(ctx context.Context, w store.Writer, namespace, key string) error
}

// sharedNamespace is the settings namespace of shared definitions (key:
// the agent's name).
const sharedNamespace = "agents.definitions"

// copyMarker is the front matter comment of a definition file that is a
// copy of a shared definition: such a file is rewritten or removed to match
// the store; a file without it is never touched (nor read).
const copyMarker = "# trellis: a copy of this cluster's agent definition, kept in the database; change it with agent.delete and agent.create\n"

// sharedTimeout bounds each store call of a shared definition.
const sharedTimeout = 30 * time.Second

// sharedRow is the stored value of a shared definition: the definition as
// markdown, and a random id telling its creator that the row is its own.
type sharedRow struct {
	ID       string `json:"id"`
	Markdown string `json:"markdown"`
}

// NewSharedDefinitions returns the definitions of a cluster: kept in shared,
// with each daemon writing a copy to dir/<name>.md (the Path it reports), so
// that the file still shows what the agent is. Files in dir that are not
// such copies are ignored.
func NewSharedDefinitions(dir string, shared SharedStore) *Definitions {
	return &Definitions{dir: dir, shared: shared}
}

func sharedCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sharedTimeout)
}

// copyText is the content of the copy of d.
func copyText(d Definition) []byte {
	m := d.Marshal()
	return append([]byte("---\n"+copyMarker), bytes.TrimPrefix(m, []byte("---\n"))...)
}

func isCopy(data []byte) bool { return bytes.HasPrefix(data, []byte("---\n"+copyMarker)) }

// syncCopy makes dir/<name>.md the copy of d (when it is missing, or a copy
// with other content) and returns d with its Path; a file someone put there
// by hand is left alone. Path is "" when no copy could be written.
func (s *Definitions) syncCopy(d Definition) Definition {
	p := s.path(d.Name)
	want := copyText(d)
	old, err := os.ReadFile(p)
	switch {
	case err == nil && bytes.Equal(old, want):
	case err == nil && !isCopy(old):
	case err == nil || errors.Is(err, os.ErrNotExist):
		if os.MkdirAll(s.dir, 0o755) != nil || atomicfile.Write(p, want) != nil {
			d.Path = ""
			return d
		}
	default:
		d.Path = ""
		return d
	}
	d.Path = p
	return d
}

// dropCopy removes dir/<name>.md if it is a copy of a shared definition.
func (s *Definitions) dropCopy(name string) {
	p := s.path(name)
	if data, err := os.ReadFile(p); err == nil && isCopy(data) {
		os.Remove(p)
	}
}

func (s *Definitions) parseShared(name string, raw json.RawMessage) (Definition, error) {
	var row sharedRow
	if err := json.Unmarshal(raw, &row); err != nil {
		return Definition{}, fmt.Errorf("agent %s: the stored definition is not valid: %w", name, err)
	}
	d, err := ParseDefinition([]byte(row.Markdown))
	if err != nil {
		return d, errs.New(errcode.InvalidParams, "agent %s (stored in the database): %v", name, err)
	}
	d.Name = name
	return s.syncCopy(d), nil
}

func (s *Definitions) createShared(d Definition) (Definition, error) {
	ctx, cancel := sharedCtx()
	defer cancel()
	b := make([]byte, 12)
	rand.Read(b)
	row := sharedRow{ID: hex.EncodeToString(b), Markdown: string(d.Marshal())}
	val, _ := json.Marshal(row)
	got, err := s.shared.InitSetting(ctx, sharedNamespace, d.Name, val)
	if err != nil {
		return d, fmt.Errorf("store agent %s: %w", d.Name, err)
	}
	var stored sharedRow
	if json.Unmarshal(got, &stored) != nil || stored.ID != row.ID {
		return d, errs.Wrap(errcode.InvalidParams, ErrExists, "agent %s already exists in this cluster's database: delete it first to replace it", d.Name)
	}
	d = s.syncCopy(d)
	if d.Path == "" {
		// No copy: the definition is not half made.
		if err := s.shared.DeleteSetting(context.WithoutCancel(ctx), store.Unfenced(), sharedNamespace, d.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return d, fmt.Errorf("agent %s: its file copy in %s could not be written, and undoing the stored definition failed: %w", d.Name, s.dir, err)
		}
		return d, fmt.Errorf("agent %s: could not write its file copy %s: nothing was created", d.Name, s.path(d.Name))
	}
	return d, nil
}

func (s *Definitions) deleteShared(name string) error {
	ctx, cancel := sharedCtx()
	defer cancel()
	err := s.shared.DeleteSetting(ctx, store.Unfenced(), sharedNamespace, name)
	if errors.Is(err, store.ErrNotFound) {
		s.dropCopy(name)
		return errs.Wrap(errcode.NotFound, ErrNotFound, "no agent named %s in this cluster's database (agent.list shows them)", name)
	}
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", name, err)
	}
	s.dropCopy(name)
	return nil
}

func (s *Definitions) getShared(name string) (Definition, error) {
	ctx, cancel := sharedCtx()
	defer cancel()
	raw, err := s.shared.GetSetting(ctx, sharedNamespace, name)
	if errors.Is(err, store.ErrNotFound) {
		s.dropCopy(name) // deleted through another daemon
		return Definition{}, errs.Wrap(errcode.NotFound, ErrNotFound, "no agent named %s in this cluster's database (agent.list shows them)", name)
	}
	if err != nil {
		return Definition{}, fmt.Errorf("read agent %s: %w", name, err)
	}
	return s.parseShared(name, raw)
}

func (s *Definitions) listShared() ([]Definition, error) {
	ctx, cancel := sharedCtx()
	defer cancel()
	rows, err := s.shared.ListSettings(ctx, sharedNamespace)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	var out []Definition
	kept := map[string]bool{}
	for _, r := range rows {
		if ValidName(r.Key) != nil {
			continue
		}
		d, err := s.parseShared(r.Key, r.Value)
		if err != nil {
			continue
		}
		kept[r.Key] = true
		out = append(out, d)
	}
	// Copies of definitions deleted through another daemon go.
	if entries, err := os.ReadDir(s.dir); err == nil {
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".md"); ok && !e.IsDir() && !kept[name] && ValidName(name) == nil {
				s.dropCopy(name)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Definitions) nameTaken(name string) (bool, error) {
	if s.shared == nil {
		_, err := os.Stat(s.path(name))
		return !errors.Is(err, os.ErrNotExist), nil
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	_, err := s.shared.GetSetting(ctx, sharedNamespace, name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
