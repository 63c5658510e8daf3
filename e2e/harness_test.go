package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/facade/methods"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// testScript is the fake model of these tests.
const testScript = `{"steps":[
 {"match":"hello","text":"Hello from the scripted model, streamed in small chunks."},
 {"match":"slow","text":"SLOWTEXT","delaySec":60},
 {"match":"many","text":"MANYTEXT","delaySec":3},
 {"match":"flood","text":"FLOODTEXT"},
 {"match":"run ls","text":"Running ls.","tool_calls":[{"name":"shell","arguments":{"command":"ls"}}]},
 {"after_tool":"shell","text":"That was the listing."},
 {"match":"write","tool_calls":[{"name":"write_file","arguments":{"path":"a.txt","content":"x"}}]},
 {"after_tool":"write_file","text":"Written (or not)."},
 {"match":"read passwd","tool_calls":[{"name":"read_file","arguments":{"path":"../../etc/passwd"}}]},
 {"match":"read link","tool_calls":[{"name":"read_file","arguments":{"path":"link"}}]},
 {"after_tool":"read_file","text":"Read (or not)."},
 {"match":"ask me","tool_calls":[{"name":"ask_user","arguments":{"questions":[{"question":"Which colour?","options":[{"label":"Blue"},{"label":"Green"}]}]}}]},
 {"after_tool":"ask_user","text":"Thanks for the answer."},
 {"default":true,"text":"Default answer."}
],"repeat":true}`

// floodDeltas is how many model chunks the "flood" step streams (the fake
// model sends three words per chunk); the daemon may carry several chunks
// in one message.delta event, so tests count floodText, not events.
const floodDeltas = 100_000

// floodText is the whole answer of the "flood" step.
var floodText = strings.Repeat("w ", 3*floodDeltas)

// startDaemon runs a daemon in this process with a fresh home and the test
// script as its model.
func startDaemon(t testing.TB) *daemon.Daemon {
	t.Helper()
	return startDaemonWith(t, daemon.Config{})
}

// startDaemonWith is startDaemon with some configuration set.
func startDaemonWith(t testing.TB, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	home := t.TempDir()
	scriptPath := filepath.Join(home, "script.json")
	text := strings.ReplaceAll(testScript, "SLOWTEXT", strings.Repeat("slow ", 600))
	text = strings.ReplaceAll(text, "MANYTEXT", strings.Repeat("many ", 3000))
	text = strings.ReplaceAll(text, "FLOODTEXT", floodText)
	if err := os.WriteFile(scriptPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Home, cfg.Provider = home, "fake:"+scriptPath
	logOnFailure(t, home)
	d, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// logOnFailure prints, once the test has failed, the last warnings and
// errors the daemon of home logged: its log file goes with the test's
// temporary directories, and the cause of an internal error a call
// answered (its errorId) is only there. Call it before the daemon starts,
// so that it runs after the daemon stops.
func logOnFailure(t testing.TB, home string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, err := os.ReadFile(daemon.LogPath(home))
		if err != nil {
			return
		}
		var lines []string
		for l := range strings.Lines(string(b)) {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
				lines = append(lines, strings.TrimSuffix(l, "\n"))
			}
		}
		const most = 100
		if len(lines) > most {
			lines = lines[len(lines)-most:]
		}
		t.Logf("the daemon of %s logged %d warnings and errors (the last %d at most):\n%s", home, len(lines), most, strings.Join(lines, "\n"))
	})
}

// client is what a behaviour test needs of a transport.
type client interface {
	// Call invokes a protocol method with JSON params and decodes the
	// JSON result into result (which may be nil).
	Call(ctx context.Context, method string, params any, result any) *errcode.Error
	// Events returns the session.event objects the client receives for a
	// session it created, resumed or prompted.
	Events(sessionID string) <-chan map[string]any
	Close()
}

// grpcClient calls the runtime's gRPC services directly, using the same
// JSON params as the WebSocket protocol (decoded into the request message).
type grpcClient struct {
	conn   *grpc.ClientConn
	token  string
	origin string

	mu   sync.Mutex
	subs map[string]chan map[string]any // a session's events, made by Events or subscribe
	// streams are the sessions whose Subscribe stream runs: Events makes
	// a session's channel without starting one.
	streams map[string]bool
	stop    context.CancelFunc
	ctx     context.Context
}

func dialGRPC(t testing.TB, d *daemon.Daemon) *grpcClient {
	t.Helper()
	return dialGRPCAddr(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), d.Token())
}

func dialGRPCAddr(t testing.TB, addr, token string) *grpcClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &grpcClient{conn: conn, token: token, origin: "grpc-test-" + t.Name(), subs: map[string]chan map[string]any{}, ctx: ctx, stop: cancel}
	t.Cleanup(c.Close)
	return c
}

func (c *grpcClient) outgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token, "trellis-origin", c.origin)
}

func (c *grpcClient) Call(ctx context.Context, method string, params any, result any) *errcode.Error {
	m := methods.Lookup(method)
	if m == nil {
		return errcode.NewMethodNotFound(method)
	}
	raw, _ := json.Marshal(params)
	req := m.NewParams()
	if err := protojson.Unmarshal(raw, req); err != nil {
		return errcode.NewInvalidParams(err.Error())
	}
	if strings.HasPrefix(method, "session.prompt") || method == "command.run" {
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(raw, &p)
		c.subscribe(p.SessionID, -1)
	}
	resp, err := m.Invoke(c.outgoing(ctx), c.conn, req)
	if err != nil {
		return grpcerr.FromError(ctx, err)
	}
	out := codec.Marshal(resp)
	if method == "session.create" {
		var r struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(out, &r)
		c.subscribe(r.SessionID, 0)
	}
	if method == "session.resume" {
		var r struct {
			SessionID string           `json:"sessionId"`
			Events    []map[string]any `json:"events"`
		}
		_ = json.Unmarshal(out, &r)
		after := int64(0)
		if p, ok := params.(map[string]any); ok {
			if v, ok := p["afterSeq"].(int); ok {
				after = int64(v)
			}
		}
		if n := len(r.Events); n > 0 {
			after = int64(r.Events[n-1]["seq"].(float64))
		}
		c.subscribe(r.SessionID, after)
	}
	if result != nil {
		if err := json.Unmarshal(out, result); err != nil {
			return errcode.NewInvalidParams("decode result: " + err.Error())
		}
	}
	return nil
}

func (c *grpcClient) channel(id string) chan map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.subs[id]
	if !ok {
		ch = make(chan map[string]any, 1<<16)
		c.subs[id] = ch
	}
	return ch
}

// subscribe starts one Subscribe stream per session (the first wins).
func (c *grpcClient) subscribe(id string, after int64) {
	c.mu.Lock()
	started := c.streams[id]
	if c.streams == nil {
		c.streams = map[string]bool{}
	}
	c.streams[id] = true
	c.mu.Unlock()
	if started {
		return
	}
	ch := c.channel(id)
	stream, err := trellisv1.NewSessionServiceClient(c.conn).Subscribe(c.outgoing(c.ctx), &trellisv1.SubscribeRequest{SessionId: id, AfterSeq: after, Typed: true})
	if err != nil {
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
		return
	}
	ready := make(chan struct{})
	go func() {
		once := sync.OnceFunc(func() { close(ready) })
		defer once()
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			if resp.GetCaughtUp() != nil {
				once()
				continue
			}
			var ev map[string]any
			_ = json.Unmarshal(codec.Marshal(resp.GetEvent()), &ev)
			ch <- ev
		}
	}()
	<-ready
}

func (c *grpcClient) Events(id string) <-chan map[string]any { return c.channel(id) }

func (c *grpcClient) Close() {
	c.stop()
	c.conn.Close()
}

// collect reads events until one of kind arrives n times, or fails after
// the deadline.
func collect(t testing.TB, ch <-chan map[string]any, kind string, n int) []map[string]any {
	t.Helper()
	var out []map[string]any
	seen := 0
	// An idle limit, not a total one: a long turn on a busy machine is slow,
	// a stream with no event for this long has stopped.
	const idle = 30 * time.Second
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case ev := <-ch:
			out = append(out, ev)
			if ev["kind"] == kind {
				seen++
				if seen == n {
					return out
				}
			}
			timer.Reset(idle)
		case <-timer.C:
			kinds := eventKinds(out)
			if len(kinds) > 50 {
				kinds = append(kinds[:25:25], append([]string{"…"}, kinds[len(kinds)-25:]...)...)
			}
			t.Fatalf("no %d×%s before the stream stopped (no event for %v); got %d events: %v", n, kind, idle, len(out), kinds)
		}
	}
}

func eventKinds(evs []map[string]any) []string {
	var k []string
	for _, e := range evs {
		k = append(k, fmt.Sprint(e["kind"]))
	}
	return k
}

func seqOf(ev map[string]any) int64 { return int64(ev["seq"].(float64)) }

func payloadOf(ev map[string]any) map[string]any {
	p, _ := ev["payload"].(map[string]any)
	return p
}

func httpGet(t testing.TB, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if validatedByOpenAPI(req.URL.Path) {
		checkOpenAPI(t, "GET", url, nil, resp.StatusCode, resp.Header, b)
	}
	return resp.StatusCode, b
}
