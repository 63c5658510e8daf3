package rest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/facade/wire"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
)

const (
	testToken = "test-token"
	testID    = "s-1"
)

// storedLog is one session's log: two runs, the second with a tool call.
var storedLog = []string{
	`{"kind":"turn.started","payload":{"turnId":"t-1","prompt":"hi","queued":false}}`,
	`{"kind":"message.user","payload":{"text":"hi","attachments":[]}}`,
	`{"kind":"step.started","payload":{"step":0}}`,
	`{"kind":"message.delta","payload":{"text":"Hello "}}`,
	`{"kind":"message.delta","payload":{"text":"there."}}`,
	`{"kind":"usage","payload":{"inputTokens":3,"outputTokens":2,"provider":"fake","model":"fake-1"}}`,
	`{"kind":"step.done","payload":{"step":0,"text":"Hello there.","reasoning":"","toolCalls":[],"usage":{"inputTokens":3,"outputTokens":2},"stopReason":"stop","provider":"fake","model":"fake-1"}}`,
	`{"kind":"message.done","payload":{"text":"Hello there.","role":"assistant"}}`,
	`{"kind":"turn.done","payload":{"turnId":"t-1","reason":"complete","synthetic":false}}`,
	`{"kind":"turn.started","payload":{"turnId":"t-2","prompt":"ls","queued":false}}`,
	`{"kind":"message.user","payload":{"text":"ls","attachments":[]}}`,
	`{"kind":"step.started","payload":{"step":0}}`,
	`{"kind":"message.delta","payload":{"text":"Listing."}}`,
	`{"kind":"usage","payload":{"inputTokens":5,"outputTokens":4,"provider":"fake","model":"fake-1"}}`,
	`{"kind":"step.done","payload":{"step":0,"text":"Listing.","reasoning":"","toolCalls":[{"id":"c1","name":"shell","args":{"command":"ls"}}],"usage":{"inputTokens":5,"outputTokens":4},"stopReason":"tool_use","provider":"fake","model":"fake-1"}}`,
	`{"kind":"tool.call","payload":{"callId":"c1","name":"shell","args":{"command":"ls"}}}`,
	`{"kind":"tool.result","payload":{"callId":"c1","name":"shell","ok":true,"output":"a.txt","error":null}}`,
	`{"kind":"step.started","payload":{"step":1}}`,
	`{"kind":"message.delta","payload":{"text":"One file."}}`,
	`{"kind":"usage","payload":{"inputTokens":9,"outputTokens":3,"provider":"fake","model":"fake-1"}}`,
	`{"kind":"step.done","payload":{"step":1,"text":"One file.","reasoning":"","toolCalls":[],"usage":{"inputTokens":9,"outputTokens":3},"stopReason":"stop","provider":"fake","model":"fake-1"}}`,
	`{"kind":"message.done","payload":{"text":"Listing.One file.","role":"assistant"}}`,
	`{"kind":"turn.done","payload":{"turnId":"t-2","reason":"complete","synthetic":false}}`,
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// protoEvent builds the seq-th event of storedLog-like JSON.
func protoEvent(t testing.TB, seq int, line string) *trellisv1.SessionEvent {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	full := fmt.Sprintf(`{"sessionId":%q,"seq":%d,"kind":%s,"payload":%s,"ts":%q}`, testID, seq, m["kind"], m["payload"],
		epoch.Add(time.Duration(seq)*time.Second).Format(events.TimeFormat))
	ev, err := codec.DecodeEvent([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// fakeSessions is SessionService over an in-memory log.
type fakeSessions struct {
	stored []*trellisv1.SessionEvent
	live   chan *trellisv1.SessionEvent // after the replay, until the call ends
	failAt int64                        // Recv fails after this seq (0: never)

	mu   sync.Mutex
	reqs []*trellisv1.SubscribeRequest
}

func newFakeSessions(t testing.TB) *fakeSessions {
	f := &fakeSessions{live: make(chan *trellisv1.SessionEvent, 16)}
	for i, l := range storedLog {
		f.stored = append(f.stored, protoEvent(t, i+1, l))
	}
	return f
}

func (f *fakeSessions) Subscribe(ctx context.Context, in *trellisv1.SubscribeRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[trellisv1.SubscribeResponse], error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, in)
	f.mu.Unlock()
	s := &fakeStream{ctx: ctx, f: f}
	if in.GetSessionId() != testID {
		s.err = status.Error(codes.NotFound, "no session "+in.GetSessionId())
		return s, nil
	}
	for _, ev := range f.stored {
		if ev.GetSeq() > in.GetAfterSeq() {
			s.queue = append(s.queue, pageOf(ev))
		}
	}
	s.queue = append(s.queue, &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_CaughtUp{CaughtUp: &trellisv1.CaughtUp{Seq: int64(len(f.stored))}}})
	return s, nil
}

func (f *fakeSessions) ListSessions(context.Context, *trellisv1.ListSessionsRequest, ...grpc.CallOption) (*trellisv1.ListSessionsResponse, error) {
	return &trellisv1.ListSessionsResponse{Sessions: []*trellisv1.SessionSummary{
		{SessionId: "s-other", Workdir: "/elsewhere", CreatedAt: "2025-01-01T00:00:00.000Z"},
		{SessionId: testID, Workdir: "/home/dev/project", CreatedAt: "2026-01-02T03:04:05.678Z"},
	}}, nil
}

// pageOf is the runtime's item of one event: a page of its object.
func pageOf(ev *trellisv1.SessionEvent) *trellisv1.SubscribeResponse {
	obj := codec.Marshal(ev)
	return &trellisv1.SubscribeResponse{Item: &trellisv1.SubscribeResponse_Events{Events: &trellisv1.EventPage{
		Json: obj, Ends: []uint32{uint32(len(obj))}, Seqs: []int64{ev.GetSeq()}}}}
}

type fakeStream struct {
	grpc.ClientStream
	ctx   context.Context
	f     *fakeSessions
	queue []*trellisv1.SubscribeResponse
	err   error
}

func (s *fakeStream) Recv() (*trellisv1.SubscribeResponse, error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(s.queue) > 0 {
		r := s.queue[0]
		if page := r.GetEvents(); page != nil && s.f.failAt > 0 && page.GetSeqs()[0] > s.f.failAt {
			return nil, status.Error(codes.Internal, "the log broke")
		}
		s.queue = s.queue[1:]
		return r, nil
	}
	select {
	case ev := <-s.f.live:
		return pageOf(ev), nil
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func newTestServer(t *testing.T, f *fakeSessions, keepalive time.Duration) *httptest.Server {
	t.Helper()
	h := newEventStream(f, slog.New(slog.DiscardHandler), keepalive)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sessions/{id}/events", RequireBearer(testToken, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestEventsErrors(t *testing.T) {
	srv := newTestServer(t, newFakeSessions(t), time.Hour)
	for _, tt := range []struct {
		name   string
		path   string
		header map[string]string
		status int
		code   string
	}{
		{"no token", "/v1/sessions/s-1/events", map[string]string{"Authorization": ""}, 401, "unauthorized"},
		{"bad token", "/v1/sessions/s-1/events", map[string]string{"Authorization": "Bearer nope"}, 401, "unauthorized"},
		{"unknown session", "/v1/sessions/s-nope/events", nil, 404, "not_found"},
		{"unknown session, pi", "/v1/sessions/s-nope/events?format=pi", nil, 404, "not_found"},
		{"bad format", "/v1/sessions/s-1/events?format=xml", nil, 400, "invalid_params"},
		{"negative afterSeq", "/v1/sessions/s-1/events?afterSeq=-1", nil, 400, "invalid_params"},
		{"afterSeq not a number", "/v1/sessions/s-1/events?afterSeq=ten", nil, 400, "invalid_params"},
		{"bad follow", "/v1/sessions/s-1/events?follow=maybe", nil, 400, "invalid_params"},
		{"bad Last-Event-ID", "/v1/sessions/s-1/events", map[string]string{"Last-Event-ID": "x7"}, 400, "invalid_params"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := get(t, srv, tt.path, tt.header)
			var body errcode.Error
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || body.StringCode() != tt.code || body.Message == "" ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%d %+v, want %d %s", resp.StatusCode, body, tt.status, tt.code)
			}
		})
	}
}

// render is what an unbroken stream of format f carries: the Begin lines,
// then each event's lines, by seq.
func render(t *testing.T, f wire.Format, evs []*trellisv1.SessionEvent) (begin []string, bySeq map[int64][]string) {
	t.Helper()
	enc, err := wire.NewEncoder(f, wire.Header{SessionID: testID, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC), Cwd: "/home/dev/project"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := enc.Begin()
	for _, l := range b {
		begin = append(begin, string(l))
	}
	bySeq = map[int64][]string{}
	for _, pe := range evs {
		ev, err := events.DecodeEventLine(codec.Marshal(pe))
		if err != nil {
			t.Fatal(err)
		}
		lines, err := enc.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			bySeq[ev.Seq] = append(bySeq[ev.Seq], string(l))
		}
	}
	return begin, bySeq
}

func expected(begin []string, bySeq map[int64][]string, after int64, withBegin bool) string {
	var b strings.Builder
	if withBegin {
		b.WriteString(strings.Join(begin, ""))
	}
	for seq := after + 1; seq <= int64(len(storedLog)); seq++ {
		b.WriteString(strings.Join(bySeq[seq], ""))
	}
	return b.String()
}

// With follow=false the stored events come in full and the response ends;
// wire and pi resumed mid-run carry exactly the lines an unbroken stream
// would have carried after afterSeq.
func TestEventsNDJSON(t *testing.T) {
	f := newFakeSessions(t)
	srv := newTestServer(t, f, time.Hour)
	for _, format := range []wire.Format{wire.FormatEvents, wire.FormatWire, wire.FormatPi} {
		begin, bySeq := render(t, format, f.stored)
		for _, after := range []int64{0, 4, 13, 16, int64(len(storedLog))} {
			t.Run(fmt.Sprintf("%s after %d", format, after), func(t *testing.T) {
				resp := get(t, srv, fmt.Sprintf("/v1/sessions/s-1/events?format=%s&afterSeq=%d&follow=false", format, after), nil)
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
					t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
				}
				if want := expected(begin, bySeq, after, true); string(body) != want {
					t.Errorf("body:\n%s\nwant:\n%s", body, want)
				}
			})
		}
	}
}

// Only the events format subscribes from afterSeq; the renderings replay
// the session to render its runs whole.
func TestEventsSubscribeFrom(t *testing.T) {
	f := newFakeSessions(t)
	srv := newTestServer(t, f, time.Hour)
	for format, want := range map[string]int64{"events": 13, "wire": 0, "pi": 0} {
		resp := get(t, srv, "/v1/sessions/s-1/events?follow=false&afterSeq=13&format="+format, nil)
		_, _ = io.ReadAll(resp.Body)
		f.mu.Lock()
		got := f.reqs[len(f.reqs)-1].GetAfterSeq()
		f.mu.Unlock()
		if got != want {
			t.Errorf("%s: Subscribe after %d, want %d", format, got, want)
		}
	}
}

// sseEvent is one parsed SSE event.
type sseEvent struct {
	id   string
	data string
}

// readSSE reads SSE events until n data events came or the stream ended;
// comments are returned as data starting with ":".
func readSSE(t *testing.T, r *bufio.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	for n < 0 || len(out) < n {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
			cur.data = line
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Fatalf("two data lines in one SSE event")
			}
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

// SSE carries one line per event with id: <seq> on the last line of each
// session event; Last-Event-ID resumes after it, without a second header.
func TestEventsSSE(t *testing.T) {
	f := newFakeSessions(t)
	srv := newTestServer(t, f, time.Hour)
	for _, format := range []wire.Format{wire.FormatEvents, wire.FormatWire, wire.FormatPi} {
		t.Run(string(format), func(t *testing.T) {
			begin, bySeq := render(t, format, f.stored)
			resp := get(t, srv, "/v1/sessions/s-1/events?follow=false&format="+string(format), map[string]string{"Accept": "text/event-stream"})
			if resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			all := readSSE(t, bufio.NewReader(resp.Body), -1)
			var got strings.Builder
			lastID := ""
			for _, e := range all {
				got.WriteString(e.data + "\n")
				if e.id != "" {
					lastID = e.id
				}
			}
			if want := expected(begin, bySeq, 0, true); got.String() != want {
				t.Fatalf("SSE data:\n%s\nwant:\n%s", got.String(), want)
			}
			if lastID != fmt.Sprint(len(storedLog)) {
				t.Errorf("last id %q", lastID)
			}
			// Each event's lines end with its id.
			i := len(begin)
			for seq := int64(1); seq <= int64(len(storedLog)); seq++ {
				if n := len(bySeq[seq]); n > 0 {
					i += n
					if all[i-1].id != fmt.Sprint(seq) {
						t.Fatalf("the last line of seq %d has id %q", seq, all[i-1].id)
					}
				}
			}

			resp = get(t, srv, "/v1/sessions/s-1/events?follow=false&afterSeq=1&format="+string(format),
				map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "13"})
			var resumed strings.Builder
			for _, e := range readSSE(t, bufio.NewReader(resp.Body), -1) {
				resumed.WriteString(e.data + "\n")
			}
			if want := expected(begin, bySeq, 13, false); resumed.String() != want {
				t.Errorf("resumed:\n%s\nwant:\n%s", resumed.String(), want)
			}
		})
	}
}

// A followed stream sends live events, and SSE comments while idle.
func TestEventsFollowAndKeepalive(t *testing.T) {
	f := newFakeSessions(t)
	srv := newTestServer(t, f, 20*time.Millisecond)
	resp := get(t, srv, fmt.Sprintf("/v1/sessions/s-1/events?afterSeq=%d", len(storedLog)), map[string]string{"Accept": "text/event-stream"})
	r := bufio.NewReader(resp.Body)
	if got := readSSE(t, r, 1); got[0].data != ": keepalive" {
		t.Fatalf("first SSE event %+v, want a keepalive", got)
	}
	live := protoEvent(t, len(storedLog)+1, `{"kind":"mode.changed","payload":{"mode":"plan"}}`)
	f.live <- live
	for {
		e := readSSE(t, r, 1)
		if len(e) == 0 {
			t.Fatal("the stream ended")
		}
		if e[0].data == ": keepalive" {
			continue
		}
		if want := strings.TrimSuffix(string(codec.Marshal(live)), "\n"); e[0].data != want || e[0].id != fmt.Sprint(len(storedLog)+1) {
			t.Fatalf("live event %+v, want %s", e[0], want)
		}
		break
	}
}

// A runtime stream that breaks after the response started aborts it: the
// client sees a truncated body, not a clean end.
func TestEventsBrokenStreamAborts(t *testing.T) {
	f := newFakeSessions(t)
	f.failAt = 3
	srv := newTestServer(t, f, time.Hour)
	resp := get(t, srv, "/v1/sessions/s-1/events?follow=false", nil)
	body, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read: %v after %q", err, body)
	}
	if n := strings.Count(string(body), "\n"); n != 3 {
		t.Errorf("%d lines before the break, want 3", n)
	}
}

func TestAcceptsSSE(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/event-stream":                         true,
		"application/json, text/event-stream;q=0.9": true,
		"application/x-ndjson":                      false,
		"":                                          false,
		"text/*":                                    false,
	} {
		if got := acceptsSSE([]string{accept}); got != want {
			t.Errorf("acceptsSSE(%q) = %v", accept, got)
		}
	}
}

// A followed stream does not hold up the server's graceful shutdown: it
// ends cleanly as soon as Shutdown starts.
func TestEventsEndOnShutdown(t *testing.T) {
	srv := newTestServer(t, newFakeSessions(t), time.Hour)
	resp := get(t, srv, "/v1/sessions/s-1/events", nil)
	r := bufio.NewReader(resp.Body)
	for range storedLog {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	// Shutdown waits for every connection to end: it returns only if the
	// stream ends without being cut.
	if err := srv.Config.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after shutdown: %q, %v", rest, err)
	}
}

// A lease_lost notice (retracted) carries the SSE id of the event before
// its seq: a client reconnecting with Last-Event-ID gets the log's event
// under that seq, which follows the notice.
func TestEventsSSERetractedNotice(t *testing.T) {
	f := newFakeSessions(t)
	srv := newTestServer(t, f, time.Hour)
	n := len(storedLog)
	resp := get(t, srv, fmt.Sprintf("/v1/sessions/s-1/events?afterSeq=%d", n), map[string]string{"Accept": "text/event-stream"})
	notice := protoEvent(t, n+1, `{"kind":"error","payload":{"code":"lease_lost","message":"this daemon lost the lease"}}`)
	notice.Delivery = &trellisv1.SessionEvent_Retracted{Retracted: true}
	f.live <- notice
	f.live <- protoEvent(t, n+1, `{"kind":"turn.done","payload":{"turnId":"t-2","reason":"interrupted","synthetic":true}}`)
	got := readSSE(t, bufio.NewReader(resp.Body), 2)
	if len(got) != 2 || got[0].id != fmt.Sprint(n) || !strings.Contains(got[0].data, `"retracted":true`) {
		t.Fatalf("the notice: %+v, want id %d and retracted", got, n)
	}
	if got[1].id != fmt.Sprint(n+1) || !strings.Contains(got[1].data, `"synthetic":true`) {
		t.Fatalf("after the notice: %+v, want the log's seq %d", got[1], n+1)
	}
}
