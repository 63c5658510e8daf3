// Package transcript plays golden JSON-RPC transcripts (STYLE.md 12): txtar
// files whose comment names what the case pins, followed by alternating
// "-- client --" and "-- server --" sections holding one JSON frame per
// line. Client lines are sent byte for byte; server lines are compared with
// what the server sent, or rewritten with -update.
package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// update is the -update flag of every test binary that imports this package;
// do not define another flag of that name.
var update = flag.Bool("update", false, "rewrite the server sections of golden transcripts")

// EndProbe is the id of the request the harness sends after the last step:
// every frame that arrives before its reply is unexpected. The server
// answers it with whatever error it gives an unknown method.
const EndProbe = "transcript.end"

type config struct {
	redact  []string
	timeout time.Duration
	quiet   time.Duration
}

// Option adjusts Run.
type Option func(*config)

// Redact replaces the value of every member with one of these keys in
// server frames by "<key>" before comparing (for ids and times that the
// server cannot make deterministic).
func Redact(keys ...string) Option {
	return func(c *config) { c.redact = append(c.redact, keys...) }
}

// step is one exchange: client frames, then the frames they cause.
type step struct {
	client []string
	server []string
}

// RunDir runs every file matching pattern (e.g. "testdata/jsonrpc/*.txtar")
// as a subtest named after the file.
func RunDir(t *testing.T, pattern string, dial func(t *testing.T) jsonrpc.Transport, opts ...Option) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no transcripts match %s", pattern)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txtar"), func(t *testing.T) {
			Run(t, f, dial, opts...)
		})
	}
}

// Run plays the transcript at path over a fresh transport from dial (the
// client end of a connection to the server under test), step by step: it
// sends a step's client lines, then reads as many frames as the step's
// server section holds and compares them (as a set: replies to one step may
// come in any order); finally it sends EndProbe and fails on any frame that
// arrives before the probe's reply. With -update it instead records, for
// each step, the frames that arrive until the connection has been quiet for
// a moment, sorted, and rewrites the file.
func Run(t *testing.T, path string, dial func(t *testing.T) jsonrpc.Transport, opts ...Option) {
	t.Helper()
	cfg := config{timeout: 5 * time.Second, quiet: 300 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(ar.Comment)) == 0 {
		t.Fatalf("%s: the comment must name what the case pins", path)
	}
	steps, err := parseSteps(ar)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := dial(t)
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	frames := make(chan []byte, 1024)
	go func() {
		defer close(frames)
		for {
			b, err := tr.ReadMessage(ctx)
			if err != nil {
				return
			}
			frames <- b
		}
	}()

	for i := range steps {
		s := &steps[i]
		for _, line := range s.client {
			if err := tr.WriteMessage(ctx, []byte(line)); err != nil {
				t.Fatalf("step %d: sending %s: %v", i+1, line, err)
			}
		}
		if *update {
			s.server = cfg.normalizeAll(collectUntilQuiet(frames, cfg.quiet))
			sort.Strings(s.server)
			continue
		}
		got, ok := collectN(frames, len(s.server), cfg.timeout)
		got = cfg.normalizeAll(got)
		want := append([]string(nil), s.server...)
		sort.Strings(got)
		sort.Strings(want)
		if !ok || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s step %d (client %s):\n got server frames:\n%s\nwant:\n%s",
				path, i+1, strings.Join(s.client, " "), indent(got), indent(want))
		}
	}

	probe := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q}`, EndProbe, EndProbe)
	if err := tr.WriteMessage(ctx, []byte(probe)); err != nil {
		t.Fatalf("sending the end probe: %v", err)
	}
	extra, ok := collectUntilProbe(frames, cfg.timeout)
	if !ok {
		t.Fatalf("%s: no reply to the end probe within %v", path, cfg.timeout)
	}
	if len(extra) > 0 {
		t.Fatalf("%s: unexpected server frames after the last step:\n%s", path, indent(cfg.normalizeAll(extra)))
	}

	if *update {
		if err := os.WriteFile(path, format(ar.Comment, steps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parseSteps(ar *txtar.Archive) ([]step, error) {
	var steps []step
	for _, f := range ar.Files {
		lines := frameLines(f.Data)
		switch f.Name {
		case "client":
			steps = append(steps, step{client: lines})
		case "server":
			if len(steps) == 0 || steps[len(steps)-1].server != nil {
				return nil, fmt.Errorf("a server section must follow a client section")
			}
			if lines == nil {
				lines = []string{}
			}
			steps[len(steps)-1].server = lines
		default:
			return nil, fmt.Errorf("unknown section %q (want client or server)", f.Name)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no client section")
	}
	return steps, nil
}

func frameLines(data []byte) []string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func format(comment []byte, steps []step) []byte {
	ar := &txtar.Archive{Comment: comment}
	for _, s := range steps {
		ar.Files = append(ar.Files,
			txtar.File{Name: "client", Data: joinLines(s.client)},
			txtar.File{Name: "server", Data: joinLines(s.server)})
	}
	return txtar.Format(ar)
}

func joinLines(lines []string) []byte {
	if len(lines) == 0 {
		return nil
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

func collectN(frames <-chan []byte, n int, timeout time.Duration) ([]string, bool) {
	var got []string
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(got) < n {
		select {
		case b, ok := <-frames:
			if !ok {
				return got, false
			}
			got = append(got, string(b))
		case <-deadline.C:
			return got, false
		}
	}
	return got, true
}

// collectUntilQuiet is for -update only: it cannot know how many frames a
// step causes, so it waits until none has come for quiet.
func collectUntilQuiet(frames <-chan []byte, quiet time.Duration) []string {
	var got []string
	for {
		select {
		case b, ok := <-frames:
			if !ok {
				return got
			}
			got = append(got, string(b))
		case <-time.After(quiet):
			return got
		}
	}
}

func collectUntilProbe(frames <-chan []byte, timeout time.Duration) ([]string, bool) {
	var extra []string
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case b, ok := <-frames:
			if !ok {
				return extra, false
			}
			var r struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &r) == nil && r.ID == EndProbe {
				return extra, true
			}
			extra = append(extra, string(b))
		case <-deadline.C:
			return extra, false
		}
	}
}

func (c *config) normalizeAll(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = c.normalize(f)
	}
	return out
}

// normalize compacts a frame and redacts the configured keys.
func (c *config) normalize(frame string) string {
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(frame)) == nil {
		frame = buf.String()
	}
	for _, k := range c.redact {
		re := regexp.MustCompile(`("` + regexp.QuoteMeta(k) + `":)("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)`)
		frame = re.ReplaceAllString(frame, `${1}"<`+k+`>"`)
	}
	return frame
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "  (none)"
	}
	return "  " + strings.Join(lines, "\n  ")
}
