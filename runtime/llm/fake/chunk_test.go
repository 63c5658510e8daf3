package fake

import (
	"strings"
	"testing"
)

func TestChunkWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"one", []string{"one"}},
		{"  lead and trail  ", []string{"  lead and trail  "}},
		{"a b c d e f g", []string{"a b c ", "d e f ", "g"}},
		{"line one\nline two", []string{"line one\nline ", "two"}},
	}
	for _, tt := range tests {
		if got := chunkWords(tt.in, 3); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("chunkWords(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzChunkWords(f *testing.F) {
	for _, s := range []string{"", "a b c d", " x\t\ny  z ", "日本語 の テキスト です よ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		chunks := chunkWords(s, wordsPerChunk)
		if strings.Join(chunks, "") != s {
			t.Fatalf("chunks %q do not add up to %q", chunks, s)
		}
		for _, c := range chunks {
			if c == "" || len(strings.Fields(c)) > wordsPerChunk {
				t.Fatalf("bad chunk %q of %q", c, s)
			}
		}
	})
}
