//go:build !trellis_lean

package sshbackend

import (
	"bytes"
	"os/exec"
	"testing"
)

// TestPGIDWriter: the first stdout line names the process group and is not
// output, however the writes split it; a first line that is not the tag is
// output like the rest.
func TestPGIDWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		pgid   int
		out    string
	}{
		{"one write", []string{"trellis-pgid 4242\nhello\n"}, 4242, "hello\n"},
		{"split", []string{"trellis-", "pgid 42", "42\nhel", "lo\n"}, 4242, "hello\n"},
		{"no tag", []string{"hello\nworld\n"}, 0, "hello\nworld\n"},
		{"long first line", []string{string(bytes.Repeat([]byte("x"), 100))}, 0, string(bytes.Repeat([]byte("x"), 100))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &pgidWriter{next: &out}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if w.group() != tc.pgid || out.String() != tc.out {
				t.Errorf("pgid %d, output %q; want %d, %q", w.group(), out.String(), tc.pgid, tc.out)
			}
		})
	}
}

// TestQuote runs quoted strings through a real shell.
func TestQuote(t *testing.T) {
	for _, s := range []string{"plain", "it's", `a "b" $HOME $(id) ; rm -rf /`, "new\nline"} {
		out, err := exec.Command("sh", "-c", "printf %s "+quote(s)).Output()
		if err != nil || string(out) != s {
			t.Fatalf("quote(%q) came back as %q (%v)", s, out, err)
		}
	}
}
