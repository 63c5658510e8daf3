package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/wire/pagent"
	"github.com/trellis-run/trellis/facade/wire/pi"
)

// eventsURL is the HTTP event stream of a session.
func eventsURL(d *daemon.Daemon, id, query string) string {
	return fmt.Sprintf("http://127.0.0.1:%d/v1/sessions/%s/events?%s", d.HTTPPort(), id, query)
}

// openEvents starts a GET of the event stream; the caller closes the body.
func openEvents(t *testing.T, ctx context.Context, d *daemon.Daemon, url string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+d.Token())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return resp
}

// sseEvent is one SSE event: its id (may be empty) and data line.
type sseEvent struct{ id, data string }

// nextSSE reads the next SSE event that has data (comments skipped); ok is
// false at the end of the stream.
func nextSSE(t *testing.T, r *bufio.Reader) (ev sseEvent, ok bool) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF {
			return sseEvent{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.data != "" {
				return ev, true
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

func decodeEvent(t *testing.T, data string) map[string]any {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return ev
}

// An EventSource that drops after k events and reconnects with
// Last-Event-ID: k gets exactly events k+1… of the turn, live.
func TestEventsSSEResume(t *testing.T) {
	d := startDaemon(t)
	c := dialGRPC(t, d)
	id := createSession(t, c, nil)
	ctx := context.Background()

	first, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := openEvents(t, first, d, eventsURL(d, id, "format=events"), map[string]string{"Accept": "text/event-stream"})
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	want := collect(t, c.Events(id), "turn.done", 1)

	const k = 3
	r := bufio.NewReader(resp.Body)
	for i := 1; i <= k; i++ {
		ev, ok := nextSSE(t, r)
		if !ok {
			t.Fatalf("the stream ended after %d events", i-1)
		}
		if ev.id != fmt.Sprint(i) || !reflect.DeepEqual(decodeEvent(t, ev.data), want[i-1]) {
			t.Fatalf("event %d = %+v, want %v", i, ev, want[i-1])
		}
	}
	cancel() // the connection drops
	resp.Body.Close()

	again := openEvents(t, ctx, d, eventsURL(d, id, "format=events"), map[string]string{"Accept": "text/event-stream", "Last-Event-ID": fmt.Sprint(k)})
	defer again.Body.Close()
	r = bufio.NewReader(again.Body)
	for i := k + 1; i <= len(want); i++ {
		ev, ok := nextSSE(t, r)
		if !ok {
			t.Fatalf("the resumed stream ended before seq %d", i)
		}
		got := decodeEvent(t, ev.data)
		if ev.id != fmt.Sprint(i) || !reflect.DeepEqual(got, want[i-1]) {
			t.Fatalf("resumed event %d = %+v, want %v", i, ev, want[i-1])
		}
	}
}

// The same turn in the three formats, each ending once what is stored was
// sent (follow=false), and the endpoint's errors.
func TestEventsFormatsAndErrors(t *testing.T) {
	d := startDaemon(t)
	c := dialGRPC(t, d)
	wd := t.TempDir()
	id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
	ctx := context.Background()
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "run ls"}, nil); err != nil {
		t.Fatal(err)
	}
	want := collect(t, c.Events(id), "turn.done", 1)

	read := func(query string) []string {
		t.Helper()
		resp := openEvents(t, ctx, d, eventsURL(d, id, query), nil)
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("Content-Type %q", ct)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	}

	t.Run("events", func(t *testing.T) {
		lines := read("follow=false")
		if len(lines) != len(want) {
			t.Fatalf("%d lines for %d events", len(lines), len(want))
		}
		for i, l := range lines {
			if got := decodeEvent(t, l); !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("line %d = %v, want %v", i+1, got, want[i])
			}
		}
		if after := read("follow=false&afterSeq=5"); len(after) != len(want)-5 || !strings.Contains(after[0], `"seq":6,`) {
			t.Errorf("afterSeq=5 gave %d lines starting %s", len(after), after[0])
		}
	})

	t.Run("wire", func(t *testing.T) {
		var methods []string
		var end pagent.RunEnd
		for _, l := range read("follow=false&format=wire") {
			ev, err := pagent.DecodeEventLine([]byte(l))
			if err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			methods = append(methods, ev.Method())
			if e, ok := ev.(pagent.RunEnd); ok {
				end = e
			}
		}
		got := strings.Join(methods, " ")
		if !strings.HasPrefix(got, "RunBegin TurnBegin") || !strings.Contains(got, "StepEnd ToolCallBegin ToolResult TurnEnd TurnBegin") ||
			!strings.HasSuffix(got, "StepEnd TurnEnd RunEnd") || end.Content != "That was the listing." || end.Usage == nil {
			t.Errorf("wire: %s; RunEnd %+v", got, end)
		}
	})

	t.Run("pi", func(t *testing.T) {
		lines := read("follow=false&format=pi")
		var types []string
		for i, l := range lines {
			ev, err := pi.DecodeEventLine([]byte(l))
			if err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if h, ok := ev.(pi.SessionHeader); i == 0 && (!ok || h.ID != id || h.Cwd != wd || h.Version != 3) {
				t.Fatalf("header %s", l)
			}
			types = append(types, ev.Type())
		}
		got := strings.Join(types, " ")
		if !strings.HasPrefix(got, "session agent_start turn_start message_start message_end message_start") ||
			!strings.Contains(got, "tool_execution_start tool_execution_end message_start message_end turn_end turn_start") ||
			!strings.HasSuffix(got, "message_end turn_end agent_end agent_settled") {
			t.Errorf("pi: %s", got)
		}
		// Resumed in the middle of the run, the rendering goes on where an
		// unbroken stream would be, after a header of its own.
		if tail := read("follow=false&format=pi&afterSeq=5"); len(tail) >= len(lines) || !strings.Contains(tail[0], `"type":"session"`) ||
			strings.Join(tail[1:], "") != strings.Join(lines[len(lines)-len(tail)+1:], "") {
			t.Errorf("pi after seq 5:\n%s", strings.Join(tail, ""))
		}
	})

	t.Run("errors", func(t *testing.T) {
		base := fmt.Sprintf("http://127.0.0.1:%d/v1/sessions/", d.HTTPPort())
		for _, tt := range []struct {
			url, token string
			status     int
			code       string
		}{
			{base + id + "/events?follow=false", "", 401, "unauthorized"},
			{base + "s-nope/events?follow=false", d.Token(), 404, "not_found"},
			{base + "s-nope/events?follow=false&format=pi", d.Token(), 404, "not_found"},
			{base + id + "/events?format=yaml", d.Token(), 400, "invalid_params"},
			{base + id + "/events?afterSeq=-2", d.Token(), 400, "invalid_params"},
			{base + id + "/events?follow=sometimes", d.Token(), 400, "invalid_params"},
		} {
			status, body := httpGet(t, tt.url, tt.token)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Data    struct {
					Code string `json:"code"`
				} `json:"data"`
			}
			if err := json.Unmarshal(body, &e); err != nil || status != tt.status || e.Data.Code != tt.code || e.Message == "" || e.Code == 0 {
				t.Errorf("GET %s: %d %s, want %d %s", tt.url, status, body, tt.status, tt.code)
			}
		}
	})
}

// A client following a session's events does not delay the daemon's stop:
// its stream ends cleanly (an EventSource would reconnect later).
func TestEventsStreamEndsWhenTheDaemonStops(t *testing.T) {
	d := startDaemon(t)
	c := dialGRPC(t, d)
	id := createSession(t, c, nil)
	resp := openEvents(t, context.Background(), d, eventsURL(d, id, "format=pi"), map[string]string{"Accept": "text/event-stream"})
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if ev, ok := nextSSE(t, r); !ok || !strings.Contains(ev.data, `"type":"session"`) {
		t.Fatalf("first SSE event %+v", ev)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		ended <- err
	}()
	d.Stop()
	// A stream the stop had to cut would end with an unexpected EOF (its
	// chunked body unfinished); one that ended by itself ends cleanly.
	if err := <-ended; err != nil {
		t.Errorf("the stream ended with %v", err)
	}
}
