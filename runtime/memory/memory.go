package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/ids"
	"github.com/trellis-run/trellis/runtime/store"
)

// Defaults and limits of notes and searches.
const (
	// DefaultNamespace is the namespace of a write or search that names none.
	DefaultNamespace = "default"
	// DefaultLimit is how many hits a search returns when it sets no limit.
	DefaultLimit = 10
	// MaxLimit is the largest limit a search may ask for.
	MaxLimit = 100
	// MaxTextBytes bounds a note's text.
	MaxTextBytes = 64 << 10
	// MaxTags bounds a note's tags; MaxNameBytes bounds a tag or namespace.
	MaxTags      = 32
	MaxNameBytes = 100
)

// ErrInvalid is wrapped by every invalid_params error of this package.
var ErrInvalid = errors.New("invalid memory request")

// Service stores and searches notes. It is safe for concurrent use.
type Service struct {
	st  store.MemoryStore
	now func() time.Time
}

// NewService returns a Service keeping notes in st.
func NewService(st store.MemoryStore) *Service {
	return &Service{st: st, now: time.Now}
}

// Write stores a note and returns its id ("m-…"). text must not be blank;
// tags are trimmed and deduplicated; namespace "" means DefaultNamespace.
func (s *Service) Write(ctx context.Context, text string, tags []string, namespace string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", invalid("text is empty: a note needs some text")
	}
	if len(text) > MaxTextBytes {
		return "", invalid("text is %d bytes, more than the %d a note may hold: split it into several notes", len(text), MaxTextBytes)
	}
	if strings.ContainsRune(text, 0) {
		return "", invalid("text contains a NUL byte, which cannot be stored")
	}
	ns, err := namespaceOf(namespace)
	if err != nil {
		return "", err
	}
	clean, err := cleanTags(tags)
	if err != nil {
		return "", err
	}
	m := store.Memory{ID: ids.New("m"), Text: text, Tags: clean, Namespace: ns, CreatedAt: s.now().UTC()}
	if err := s.st.WriteMemory(ctx, m); err != nil {
		return "", storeErr("write the note", err)
	}
	return m.ID, nil
}

// Search returns the notes of namespace ("" = DefaultNamespace) holding
// any word of query, most relevant first, at most limit of them (0 =
// DefaultLimit, at most MaxLimit).
func (s *Service) Search(ctx context.Context, query string, limit int, namespace string) ([]store.MemoryHit, error) {
	if strings.TrimSpace(query) == "" {
		return nil, invalid("query is empty: give the words to search the notes for")
	}
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return nil, invalid("limit %d is out of range: it must be between 1 and %d", limit, MaxLimit)
	}
	ns, err := namespaceOf(namespace)
	if err != nil {
		return nil, err
	}
	hits, err := s.st.SearchMemory(ctx, query, limit, ns)
	if err != nil {
		return nil, storeErr("search the notes", err)
	}
	return hits, nil
}

// List returns the notes of namespace ("" = every namespace), newest
// first, at most limit of them (0 = DefaultLimit, at most MaxLimit). A
// non-blank query keeps the notes holding any of its words, most relevant
// first (as Search does).
func (s *Service) List(ctx context.Context, query, namespace string, limit int) ([]store.Memory, error) {
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return nil, invalid("limit %d is out of range: it must be between 1 and %d", limit, MaxLimit)
	}
	ns := ""
	if strings.TrimSpace(namespace) != "" {
		var err error
		if ns, err = namespaceOf(namespace); err != nil {
			return nil, err
		}
	}
	if strings.TrimSpace(query) != "" {
		hits, err := s.st.SearchMemory(ctx, query, limit, ns)
		if err != nil {
			return nil, storeErr("search the notes", err)
		}
		ms := make([]store.Memory, len(hits))
		for i, h := range hits {
			ms[i] = h.Memory
		}
		return ms, nil
	}
	ms, err := s.st.ListMemory(ctx, ns, limit)
	if err != nil {
		return nil, storeErr("list the notes", err)
	}
	return ms, nil
}

// Delete forgets the note id; an unknown id is not_found.
func (s *Service) Delete(ctx context.Context, id string) error {
	if strings.TrimSpace(id) == "" {
		return invalid("id is empty: name the note to forget")
	}
	err := s.st.DeleteMemory(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return errs.Wrap(errcode.NotFound, err, "no note %q: memory.list shows the stored notes", id)
	}
	if err != nil {
		return storeErr("forget the note", err)
	}
	return nil
}

func namespaceOf(namespace string) (string, error) {
	ns := strings.TrimSpace(namespace)
	switch {
	case ns == "":
		return DefaultNamespace, nil
	case len(ns) > MaxNameBytes:
		return "", invalid("namespace is longer than %d bytes", MaxNameBytes)
	case strings.ContainsFunc(ns, isControl):
		return "", invalid("namespace %q contains control characters", ns)
	}
	return ns, nil
}

// cleanTags trims the tags and drops repeats, keeping the first order.
func cleanTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, invalid("a note may have at most %d tags, not %d", MaxTags, len(tags))
	}
	out := make([]string, 0, len(tags))
	seen := map[string]bool{}
	for i, t := range tags {
		t = strings.TrimSpace(t)
		switch {
		case t == "":
			return nil, invalid("tag %d is empty", i)
		case len(t) > MaxNameBytes:
			return nil, invalid("tag %d is longer than %d bytes", i, MaxNameBytes)
		case strings.ContainsFunc(t, isControl):
			return nil, invalid("tag %q contains control characters", t)
		case seen[t]:
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return out, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func invalid(format string, args ...any) error {
	return errs.Wrap(errcode.InvalidParams, ErrInvalid, format, args...)
}

// storeErr reports a value the store refused as invalid_params and
// anything else as an internal error.
func storeErr(op string, err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return errs.Wrap(errcode.InvalidParams, errors.Join(ErrInvalid, err), "cannot %s: %v", op, err)
	}
	return fmt.Errorf("memory: %s: %w", op, err)
}
