package tool

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// Memory is what the memory tools need of the daemon's note memory
// (runtime/memory's Service); errors that carry invalid_params become
// failed results, any other error is the runtime's own failure.
type Memory interface {
	// Write stores a note and returns its id; namespace "" is the default one.
	Write(ctx context.Context, text string, tags []string, namespace string) (string, error)
	// Search returns the most relevant notes first; limit 0 is the default.
	Search(ctx context.Context, query string, limit int, namespace string) ([]store.MemoryHit, error)
}

// Limits of memory_search's output.
const (
	// maxHitChars is how much of one note memory_search shows.
	maxHitChars = 2000
)

// memoryWriteArgs are the arguments of memory_write.
type memoryWriteArgs struct {
	Text      string   `json:"text" jsonschema:"minLength=1" jsonschema_description:"The note, self-contained."`
	Tags      []string `json:"tags,omitempty" jsonschema:"maxItems=32,minLength=1" jsonschema_description:"Words to file it under."`
	Namespace string   `json:"namespace,omitempty" jsonschema_description:"Group of notes (default \"default\")."`
}

// NewMemoryWrite returns the `memory_write` tool, storing notes in mem.
// Its tag is write: a note is data the daemon keeps beyond the session,
// though outside the workdir.
func NewMemoryWrite(mem Memory) Tool {
	return NewFunc("memory_write", approval.TagWrite,
		"Save a note to long-term memory, kept across sessions: a fact, decision or preference "+
			"worth recalling later. Write self-contained text; tags and namespace help find it again "+
			"(memory_search).",
		memoryTools{mem}.write)
}

// memoryTools runs memory_write and memory_search.
type memoryTools struct{ mem Memory }

func (m memoryTools) write(ctx context.Context, call Call, args memoryWriteArgs) (Result, error) {
	id, err := m.mem.Write(ctx, args.Text, args.Tags, args.Namespace)
	if err != nil {
		return memoryFailure(err)
	}
	return Result{OK: true, Output: "Saved note " + id + "."}, nil
}

// memorySearchArgs are the arguments of memory_search.
type memorySearchArgs struct {
	Query     string `json:"query" jsonschema:"minLength=1" jsonschema_description:"Words to look for; any of them matches."`
	Limit     int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100" jsonschema_description:"Most notes to return (default 10)."`
	Namespace string `json:"namespace,omitempty" jsonschema_description:"Group of notes (default \"default\")."`
}

// NewMemorySearch returns the `memory_search` tool, searching mem.
func NewMemorySearch(mem Memory) Tool {
	return NewFunc("memory_search", approval.TagRead,
		"Search long-term memory (notes saved with memory_write, also in earlier sessions) by "+
			"words; notes holding more of the words rank first. Returns each note's id, score, tags and text.",
		memoryTools{mem}.search)
}

func (m memoryTools) search(ctx context.Context, call Call, args memorySearchArgs) (Result, error) {
	hits, err := m.mem.Search(ctx, args.Query, args.Limit, args.Namespace)
	if err != nil {
		return memoryFailure(err)
	}
	if len(hits) == 0 {
		return Result{OK: true, Output: "No notes match " + fmt.Sprintf("%q", args.Query) + "."}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d notes, most relevant first:\n", len(hits))
	for i, h := range hits {
		if b.Len() > defaultOutputLimits.Model {
			fmt.Fprintf(&b, "\n[%d more notes not shown: ask for fewer (limit) or search for more precise words]\n", len(hits)-i)
			break
		}
		text := h.Text
		if r := []rune(text); len(r) > maxHitChars {
			text = string(r[:maxHitChars]) + " […]"
		}
		fmt.Fprintf(&b, "\n%d. %s (score %.3g", i+1, h.ID, h.Score)
		if len(h.Tags) > 0 {
			fmt.Fprintf(&b, ", tags: %s", strings.Join(h.Tags, ", "))
		}
		fmt.Fprintf(&b, ", namespace %s)\n%s\n", h.Namespace, text)
	}
	return Result{OK: true, Output: b.String()}, nil
}

// memoryFailure turns a request the memory refused into a failed result;
// other errors are the runtime's.
func memoryFailure(err error) (Result, error) {
	if errs.CodeOf(err) == errcode.InvalidParams {
		return Failed("%v", err), nil
	}
	return Result{}, err
}
