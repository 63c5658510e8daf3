package tool

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

type chunk struct {
	stream, text string
	truncated    bool
}

func collect(chunks *[]chunk) ProgressFunc {
	return func(stream, text string, truncated bool) {
		*chunks = append(*chunks, chunk{stream, text, truncated})
	}
}

func TestCaptureSmallOutputStaysInMemory(t *testing.T) {
	var got []chunk
	dir := t.TempDir()
	c := newCapture(outputLimits{Model: 100, Disk: 1000, Chunk: 10, Stream: 1000}, dir, "x.log", collect(&got))
	c.Write("stdout", []byte("hello "))
	c.Write("stderr", []byte("oops\n"))
	c.Write("stdout", []byte("world\n"))
	text, full := c.finish()
	if text != "hello oops\nworld\n" || full != "" {
		t.Errorf("finish = %q, %q", text, full)
	}
	want := []chunk{{"stdout", "hello ", false}, {"stderr", "oops\n", false}, {"stdout", "world\n", false}}
	if len(got) != len(want) {
		t.Fatalf("chunks %+v, want %+v (one per stream switch)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunk %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a file was kept for a small output: %v", entries)
	}
}

func TestCaptureKeepsHeadTailAndFile(t *testing.T) {
	var got []chunk
	dir := t.TempDir()
	c := newCapture(outputLimits{Model: 100, Disk: 1 << 20, Chunk: 16, Stream: 40}, dir, "x.log", collect(&got))
	var all strings.Builder
	for i := 0; i < 50; i++ {
		line := strings.Repeat(string(rune('a'+i%26)), 9) + "\n"
		all.WriteString(line)
		c.Write("stdout", []byte(line))
	}
	text, full := c.finish()
	if full == "" {
		t.Fatal("no full-output file for a truncated output")
	}
	b, err := os.ReadFile(full)
	if err != nil || string(b) != all.String() {
		t.Errorf("full file holds %d bytes (%v), want the whole %d", len(b), err, all.Len())
	}
	s := all.String()
	if !strings.HasPrefix(text, s[:50]) || !strings.HasSuffix(text, s[len(s)-50:]) {
		t.Errorf("model text does not keep head and tail: %q", text)
	}
	if !strings.Contains(text, "[output truncated: 500 bytes in all, 400 omitted here; the full output is kept in "+full+" (read parts of it with the shell: grep, tail, sed -n)]") {
		t.Errorf("no truncation notice naming the file: %q", text)
	}
	var streamed strings.Builder
	for i, ch := range got {
		streamed.WriteString(ch.text)
		if ch.truncated != (i == len(got)-1) {
			t.Errorf("chunk %d truncated = %v", i, ch.truncated)
		}
	}
	if streamed.String() != s[:40] {
		t.Errorf("streamed %q, want the first 40 bytes", streamed.String())
	}
}

func TestCaptureDiskCap(t *testing.T) {
	dir := t.TempDir()
	c := newCapture(outputLimits{Model: 10, Disk: 64, Chunk: 8, Stream: 8}, dir, "x.log", nil)
	for i := 0; i < 100; i++ {
		c.Write("stdout", []byte("0123456789"))
	}
	text, full := c.finish()
	fi, err := os.Stat(full)
	if err != nil || fi.Size() != 64 {
		t.Fatalf("file %s: %v, %v; want 64 bytes", full, fi, err)
	}
	if !strings.Contains(text, "the first 64 bytes of it are kept in "+full) {
		t.Errorf("notice %q", text)
	}
}

func TestCaptureWithoutOutputDir(t *testing.T) {
	c := newCapture(outputLimits{Model: 10, Disk: 64, Chunk: 8, Stream: 8}, "", "x.log", nil)
	c.Write("stdout", []byte(strings.Repeat("z", 100)))
	text, full := c.finish()
	if full != "" || !strings.Contains(text, "the full output was not kept") {
		t.Errorf("finish = %q, %q", text, full)
	}
}

func TestCaptureNeverSplitsRunes(t *testing.T) {
	var got []chunk
	c := newCapture(outputLimits{Model: 9, Disk: 1 << 10, Chunk: 5, Stream: 1 << 10}, t.TempDir(), "x.log", collect(&got))
	s := strings.Repeat("héllo wörld ", 5)
	for i := 0; i < len(s); i += 3 { // writes cut runes in half
		c.Write("stdout", []byte(s[i:min(i+3, len(s))]))
		c.Flush()
	}
	text, _ := c.finish()
	var streamed strings.Builder
	for _, ch := range got {
		if !utf8.ValidString(ch.text) || strings.ContainsRune(ch.text, utf8.RuneError) {
			t.Errorf("chunk %q splits a rune", ch.text)
		}
		streamed.WriteString(ch.text)
	}
	if streamed.String() != s {
		t.Errorf("streamed %q, want %q", streamed.String(), s)
	}
	if strings.ContainsRune(text, utf8.RuneError) {
		t.Errorf("model text %q splits a rune", text)
	}
}

func TestRing(t *testing.T) {
	r := ring{buf: make([]byte, 5)}
	for _, tc := range []struct{ in, want string }{
		{"ab", "ab"}, {"cd", "abcd"}, {"ef", "bcdef"}, {"g", "cdefg"}, {"0123456", "23456"}, {"xy", "456xy"},
	} {
		r.write([]byte(tc.in))
		if got := string(r.bytes()); got != tc.want {
			t.Errorf("after %q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStreamedOutput(t *testing.T) {
	var streamed []string
	out := NewStreamedOutput(func(stream, chunk string, truncated bool) {
		streamed = append(streamed, stream+":"+chunk)
	})
	fmt.Fprint(out.Stdout(), "one ")
	fmt.Fprint(out.Stderr(), "two ")
	fmt.Fprint(out.Stdout(), "three")
	if got := out.String(); got != "one two three" {
		t.Fatalf("String() = %q", got)
	}
	if got := strings.Join(streamed, "|"); got != "stdout:one |stderr:two |stdout:three" {
		t.Fatalf("streamed %q", got)
	}
	fmt.Fprint(NewStreamedOutput(nil).Stdout(), "nobody listens")
}
