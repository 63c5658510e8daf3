package main

import (
	"bytes"
	"io"
	"sync"

	"github.com/chzyer/readline"
)

// screen shares the chat's terminal between what the chat writes (the
// answer's text, the lines about tools, the chat's own messages) and the line
// editor, which draws the line being read (its prompt and what is typed on
// it) at the cursor, and cleans the terminal line the cursor is on before
// each redraw: at the start of a read, at every key.
//
// The editor's line stays below the output. Output first cleans the editor's
// line away, and each line it ends draws the editor's line again below it.
// While the output's last line is unfinished (an answer streaming) the editor
// draws nothing: cleaning that line would erase the answer's text. What it
// would have drawn is drawn once the output ends the line; except the line
// the editor ends itself (Enter, Ctrl-C, Ctrl-D): that ends the output's
// line at once and shows below it, so that what the chat says about the line
// comes after it.
//
// A spinner (app.spin) draws over the line the cursor is on, the editor's
// included, and is not output: it writes to the terminal directly.
type screen struct {
	term io.Writer          // the terminal the editor draws on
	rl   *readline.Instance // the editor, set once it exists

	outMu sync.Mutex // one output write (with its cleaning and redraw) at a time

	mu    sync.Mutex // orders the writes to the terminal; guards the fields below
	open  bool       // the output's last line is unfinished
	shown bool       // the editor's line may be on the terminal, at the cursor
	mute  bool       // the editor's writes are dropped (redraw, while it forgets its line)
}

// editorWriter is what the editor draws through (its Config.Stdout).
type editorWriter struct{ s *screen }

func (w editorWriter) Write(b []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	// A drawing that ends with a newline is the editor's last one of its
	// line (after Enter, Ctrl-C or Ctrl-D): it stays, as output. (A line
	// that fills the terminal's width is drawn with " \b" after it.)
	ended := bytes.HasSuffix(bytes.TrimSuffix(b, []byte(" \b")), []byte("\n"))
	if len(b) == 0 || (s.open || s.mute) && !ended {
		return len(b), nil // drawn again by redraw
	}
	if s.open {
		// Below the output's line, which it ends (the cleaning before
		// it was dropped).
		s.open = false
		if _, err := io.WriteString(s.term, "\n"); err != nil {
			return 0, err
		}
	}
	s.shown = !ended
	return s.term.Write(b)
}

// screenOutput is a stream of the chat's output on the terminal (stdout or
// stderr), written through the screen.
type screenOutput struct {
	s *screen
	w io.Writer
}

func (o screenOutput) Write(b []byte) (int, error) { return o.s.output(o.w, b) }

// direct returns the terminal a screen's output stream writes to, w itself
// when it is no such stream.
func direct(w io.Writer) io.Writer {
	if o, ok := w.(screenOutput); ok {
		return o.w
	}
	return w
}

// output writes b to w, the editor's line cleaned away first and drawn again
// below b when b ends a line.
func (s *screen) output(w io.Writer, b []byte) (int, error) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.mu.Lock()
	for s.shown {
		// The editor cleans what it drew (its writes go through: the
		// output's line is not open), unless it draws again meanwhile.
		s.shown = false
		s.mu.Unlock()
		s.rl.Clean()
		s.mu.Lock()
	}
	n, err := w.Write(b)
	if n > 0 {
		s.open = b[n-1] != '\n'
	}
	ended := n > 0 && !s.open
	s.mu.Unlock()
	if ended {
		s.redraw()
	}
	return n, err
}

// redraw draws the editor's line at the cursor, which is at the start of a
// line the output does not hold, when it is not there already. The editor
// first forgets what it drew, silenced: that is not on the terminal (the
// output cleaned it away, or it was dropped), and cleaning it now would
// clean lines of output instead. Called under outMu.
func (s *screen) redraw() {
	s.mu.Lock()
	if s.shown || s.open {
		s.mu.Unlock()
		return
	}
	s.mute = true
	s.mu.Unlock()
	s.rl.Clean()
	s.mu.Lock()
	s.mute = false
	s.mu.Unlock()
	// Through the editor's writer: a Ctrl-R search or a completion menu is
	// drawn again too; nothing is drawn when no line is being read.
	_, _ = s.rl.Stdout().Write(nil)
}

// Redraw draws the editor's line again, below the output, after a spinner
// drew over it.
func (s *screen) Redraw() {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.mu.Lock()
	shown := s.shown
	s.mu.Unlock()
	if shown {
		_, _ = s.rl.Stdout().Write(nil) // cleans its line and draws it again
		return
	}
	s.redraw()
}
