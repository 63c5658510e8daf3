package auth

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadOrCreateToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) < 43 {
		t.Fatalf("token %q shorter than 32 random bytes", tok)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("token mode %v, want 0600", st.Mode().Perm())
	}
	again, err := LoadOrCreateToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if again != tok {
		t.Fatalf("token changed across loads: %q then %q", tok, again)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateToken(path); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("loose token mode not tightened: %v", st.Mode().Perm())
	}
}

func TestLoadOrCreateTokenRejectsShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateToken(path); err == nil {
		t.Fatal("a 5-character token was accepted")
	}
}

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"abc", "abc", true}, {"abc", "abd", false}, {"", "abc", false}, {"abcd", "abc", false}} {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("Equal(%q,%q)=%v want %v", c.a, c.b, got, c.want)
		}
	}
}
