package pricing

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/llm"
)

// TestFileReload: a changed file is read again; one that no longer parses
// is logged, once, and the last good table stays.
func TestFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.toml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("[openai.mine]\ninput = 1\noutput = 1\n")
	var logs bytes.Buffer
	f, err := Open(path, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.recheck = 0
	u := llm.Usage{InputTokens: 1_000_000}
	cost := func() int64 {
		c, ok := f.Cost("openai", "mine", u)
		if !ok {
			t.Fatal("mine is not priced")
		}
		return c
	}
	if c := cost(); c != 1_000_000 {
		t.Fatalf("cost %d", c)
	}
	write("[openai.mine]\ninput = 2\noutput = 1\n")
	if c := cost(); c != 2_000_000 {
		t.Fatalf("after a change: cost %d", c)
	}
	write("[openai.mine]\ninput = -2\noutput = 1\n")
	cost()
	if c := cost(); c != 2_000_000 {
		t.Fatalf("after a bad change: cost %d, want the last good table's", c)
	}
	if n := strings.Count(logs.String(), "price file changed but is refused"); n != 1 || !strings.Contains(logs.String(), "openai.\\\"mine\\\".input: -2 is negative") {
		t.Errorf("logged %d times:\n%s", n, logs.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if c := cost(); c != 2_000_000 {
		t.Fatalf("file gone: cost %d", c)
	}
	write("[openai.mine]\ninput = 3\noutput = 1\n")
	if c := cost(); c != 3_000_000 {
		t.Fatalf("file back: cost %d", c)
	}
	if _, ok := f.Cost("anthropic", "claude-sonnet-4-5", u); !ok {
		t.Error("the default table is not under the file's")
	}
}

func TestOpenRefusesABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.toml")
	if err := os.WriteFile(path, []byte("[openai.mine]\ninput = \"x\"\noutput = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, nil, slog.Default()); err == nil || !strings.Contains(err.Error(), `prices.toml:2: openai."mine".input: want a number`) {
		t.Fatalf("err %v", err)
	}
	if _, err := Open(path+".missing", nil, slog.Default()); err == nil || !strings.Contains(err.Error(), "cannot read the price file") {
		t.Fatalf("err %v", err)
	}
}
