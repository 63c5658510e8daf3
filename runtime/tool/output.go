package tool

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// outputLimits bounds what a streaming tool keeps of its output.
type outputLimits struct {
	// Model is the most the model sees; past it, the first and last halves
	// are kept with a notice between them.
	Model int
	// Disk is the most kept in the full-output file.
	Disk int64
	// Chunk is the size at which pending progress is flushed at once.
	Chunk int
	// Stream is the most streamed as progress per stream (stdout, stderr).
	Stream int64
}

var defaultOutputLimits = outputLimits{
	Model:  30 << 10,
	Disk:   64 << 20,
	Chunk:  8 << 10,
	Stream: 1 << 20,
}

// capture collects a tool's output as it streams: it keeps the head and the
// tail for the model in fixed buffers, spills everything (up to a cap) to a
// file once the head overflows, and forwards coalesced chunks to Progress.
// Its memory use is bounded whatever the output's size.
type capture struct {
	mu     sync.Mutex
	lim    outputLimits
	dir    string // where the full output goes; "" = not kept
	name   string // file name within dir
	notify ProgressFunc

	total int64
	head  []byte // the first lim.Model bytes
	tail  ring   // the last lim.Model/2 bytes

	file      *os.File
	filePath  string
	fileBytes int64
	fileErr   error

	pendStream string
	pend       []byte
	streamed   map[string]int64
	cut        map[string]bool // streaming stopped for this stream
}

func newCapture(lim outputLimits, dir, name string, notify ProgressFunc) *capture {
	if notify == nil {
		notify = func(string, string, bool) {}
	}
	return &capture{
		lim: lim, dir: dir, name: name, notify: notify,
		head:     make([]byte, 0, lim.Model),
		tail:     ring{buf: make([]byte, lim.Model/2)},
		streamed: map[string]int64{},
		cut:      map[string]bool{},
	}
}

// Write records p as output of stream.
func (c *capture) Write(stream string, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	c.tail.write(p)
	n := min(c.lim.Model-len(c.head), len(p))
	c.head = append(c.head, p[:n]...)
	if c.total > int64(c.lim.Model) {
		c.spill(p[n:])
	}
	c.queue(stream, p)
}

// spill appends p to the full-output file, opening it on first use and
// writing the head collected so far first.
func (c *capture) spill(p []byte) {
	if c.dir == "" || c.fileErr != nil {
		return
	}
	if c.file == nil {
		if err := os.MkdirAll(c.dir, 0o700); err != nil {
			c.fileErr = err
			return
		}
		c.filePath = filepath.Join(c.dir, c.name)
		f, err := os.OpenFile(c.filePath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			c.fileErr = err
			return
		}
		c.file = f
		c.writeFile(c.head)
	}
	c.writeFile(p)
}

func (c *capture) writeFile(p []byte) {
	if room := c.lim.Disk - c.fileBytes; int64(len(p)) > room {
		p = p[:max(room, 0)]
	}
	if c.fileErr != nil || len(p) == 0 {
		return
	}
	n, err := c.file.Write(p)
	c.fileBytes += int64(n)
	if err != nil {
		c.fileErr = err
	}
}

// queue adds p to the pending progress chunk, flushing when the stream
// changes (so the order of stdout and stderr is kept) or the chunk is full.
func (c *capture) queue(stream string, p []byte) {
	if c.cut[stream] {
		return
	}
	if stream != c.pendStream && len(c.pend) > 0 {
		c.flush(false)
	}
	c.pendStream = stream
	c.pend = append(c.pend, p...)
	for len(c.pend) >= c.lim.Chunk && !c.cut[stream] {
		c.emit(c.lim.Chunk)
	}
}

// Flush sends the pending chunk, holding back a rune cut in half.
func (c *capture) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flush(false)
}

func (c *capture) flush(final bool) {
	if len(c.pend) == 0 || c.cut[c.pendStream] {
		c.pend = c.pend[:0]
		return
	}
	n := len(c.pend)
	if !final {
		n = completeRunes(c.pend)
	}
	if n > 0 {
		c.emit(n)
	}
}

// emit streams the first n pending bytes (fewer if the stream's budget
// runs out, in which case the chunk is marked truncated) and drops them.
func (c *capture) emit(n int) {
	n = min(n, len(c.pend))
	if n < len(c.pend) {
		n = completeRunes(c.pend[:n]) // never split a rune between chunks
		if n == 0 {
			n = min(len(c.pend), utf8.UTFMax)
		}
	}
	s := c.pendStream
	chunk, truncated := c.pend[:n], false
	if left := c.lim.Stream - c.streamed[s]; int64(len(chunk)) >= left {
		chunk, truncated = chunk[:completeRunes(chunk[:int(left)])], true
		c.cut[s] = true
	}
	c.streamed[s] += int64(len(chunk))
	c.notify(s, strings.ToValidUTF8(string(chunk), "\uFFFD"), truncated)
	if c.cut[s] {
		c.pend = c.pend[:0]
		return
	}
	c.pend = append(c.pend[:0], c.pend[n:]...)
}

// finish flushes what is pending, closes the file and returns the text for
// the model and the file holding the whole output ("" when none was needed).
func (c *capture) finish() (text, fullPath string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flush(true)
	if c.file != nil {
		if err := c.file.Close(); err != nil && c.fileErr == nil {
			c.fileErr = err
		}
	}
	if c.total <= int64(c.lim.Model) {
		return strings.ToValidUTF8(string(c.head), "\uFFFD"), ""
	}
	half := c.lim.Model / 2
	headPart := c.head[:completeRunes(c.head[:half])]
	tailPart := c.tail.bytes()
	tailPart = tailPart[leadingContinuation(tailPart):]
	omitted := c.total - int64(len(headPart)) - int64(len(tailPart))
	var where string
	switch {
	case c.dir == "":
		where = "the full output was not kept"
	case c.filePath == "":
		where = fmt.Sprintf("the full output could not be kept: %v", c.fileErr)
	case c.fileErr != nil:
		where = fmt.Sprintf("the first %d bytes are in %s (writing more failed: %v)", c.fileBytes, c.filePath, c.fileErr)
		fullPath = c.filePath
	case c.fileBytes < c.total:
		where = fmt.Sprintf("the first %d bytes of it are kept in %s", c.fileBytes, c.filePath)
		fullPath = c.filePath
	default:
		where = "the full output is kept in " + c.filePath
		fullPath = c.filePath
	}
	if fullPath != "" {
		where += " (read parts of it with the shell: grep, tail, sed -n)"
	}
	text = fmt.Sprintf("%s\n\n[output truncated: %d bytes in all, %d omitted here; %s]\n\n%s",
		strings.ToValidUTF8(string(headPart), "\uFFFD"), c.total, omitted, where,
		strings.ToValidUTF8(string(tailPart), "\uFFFD"))
	return text, fullPath
}

// completeRunes returns the length of b without a rune cut at its end.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// leadingContinuation returns how many bytes at the start of b continue a
// rune that began before b (at most 3).
func leadingContinuation(b []byte) int {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return i
}

// ring keeps the last len(buf) bytes written to it.
type ring struct {
	buf  []byte
	pos  int
	full bool
}

func (r *ring) write(p []byte) {
	n := len(r.buf)
	if n == 0 {
		return
	}
	if len(p) >= n {
		copy(r.buf, p[len(p)-n:])
		r.pos, r.full = 0, true
		return
	}
	k := copy(r.buf[r.pos:], p)
	if k < len(p) {
		copy(r.buf, p[k:])
		r.full = true
	}
	r.pos = (r.pos + len(p)) % n
	if r.pos == 0 && len(p) > 0 {
		r.full = true
	}
}

func (r *ring) bytes() []byte {
	if !r.full {
		return append([]byte(nil), r.buf[:r.pos]...)
	}
	return append(append([]byte(nil), r.buf[r.pos:]...), r.buf[:r.pos]...)
}

// StreamedOutput gathers a command's stdout and stderr together, in the
// order the writes arrive, and streams each write to a ProgressFunc as it
// comes: the remote backends' commands (ssh, docker) write into it.
type StreamedOutput struct {
	mu       sync.Mutex
	b        strings.Builder
	progress ProgressFunc
}

// NewStreamedOutput returns an empty output streaming to progress (nil:
// nothing is streamed).
func NewStreamedOutput(progress ProgressFunc) *StreamedOutput {
	return &StreamedOutput{progress: progress}
}

// Stdout returns the writer of the command's stdout.
func (o *StreamedOutput) Stdout() io.Writer { return streamWriter{o, "stdout"} }

// Stderr returns the writer of the command's stderr.
func (o *StreamedOutput) Stderr() io.Writer { return streamWriter{o, "stderr"} }

// String returns all that was written so far.
func (o *StreamedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// streamWriter writes one stream of a StreamedOutput.
type streamWriter struct {
	o      *StreamedOutput
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	w.o.b.Write(p)
	w.o.mu.Unlock()
	if w.o.progress != nil {
		w.o.progress(w.stream, string(p), false)
	}
	return len(p), nil
}
