package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trellis-run/trellis/daemon"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/codec"
	"github.com/trellis-run/trellis/runtime/store/sqlite" // also registers the "sqlite" driver
)

// bigPrompt is a prompt of about 20 MB (the size of a large attachment).
var bigPrompt = "hello " + strings.Repeat("x", 20<<20)

// resumeGRPC pages through gRPC ResumeSession from seq 0 with a client
// whose receive limit is limit bytes; it returns the seqs and the number of
// answers.
func resumeGRPC(t *testing.T, d *daemon.Daemon, id string, limit int) (seqs []int64, answers int) {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := &grpcClient{token: d.Token(), origin: "resume-" + t.Name()}
	sessions := trellisv1.NewSessionServiceClient(conn)
	var after int64
	for {
		res, err := sessions.ResumeSession(g.outgoing(context.Background()), &trellisv1.ResumeSessionRequest{SessionId: id, AfterSeq: &after})
		if err != nil {
			t.Fatalf("gRPC ResumeSession after %d (answer %d): %v", after, answers+1, err)
		}
		answers++
		if res.GetEvents() != nil {
			if _, err := codec.PageObjects(res.GetEvents(), nil); err != nil {
				t.Fatalf("gRPC ResumeSession after %d: %v", after, err)
			}
		}
		for _, seq := range res.GetEvents().GetSeqs() {
			seqs = append(seqs, seq)
			after = seq
		}
		if !res.GetMore() {
			return seqs, answers
		}
		if len(res.GetEvents().GetSeqs()) == 0 {
			t.Fatalf("gRPC ResumeSession: more without events after %d", after)
		}
	}
}

func checkResumeSeqs(t *testing.T, what string, seqs []int64, last int64) {
	t.Helper()
	if int64(len(seqs)) != last {
		t.Fatalf("%s: %d events, want %d", what, len(seqs), last)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("%s: seq %d at position %d", what, s, i)
		}
	}
}

// TestLargeSessionResumesPaged: a session with three 20 MB prompts stays
// resumable from seq 0 over gRPC (answers paged under the message limit,
// more set until the end) and over the WebSocket (an answer bounded in
// bytes, the rest as session.event, no gap and no duplicate).
func TestLargeSessionResumesPaged(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	for i := 0; i < 3; i++ {
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": bigPrompt}, nil); err != nil {
			t.Fatalf("prompt %d: %v", i, err)
		}
		collect(t, c.Events(id), "turn.done", 1)
	}
	last := storedSeq(t, c, id)
	if last < 6 {
		t.Fatalf("the session has %d events", last)
	}

	// gRPC: each answer fits a client that reads 32 MiB messages.
	seqs, answers := resumeGRPC(t, d, id, 32<<20)
	checkResumeSeqs(t, "gRPC ResumeSession", seqs, last)
	if answers < 3 {
		t.Errorf("gRPC ResumeSession: %d answers for three 20 MB events, want them paged", answers)
	}

	// WebSocket: a fresh connection resumes; the answer says more and the
	// rest arrives as session.event.
	w := helloWS(t, d)
	var res struct {
		Events []struct {
			Seq  int64  `json:"seq"`
			Kind string `json:"kind"`
		} `json:"events"`
		More bool `json:"more"`
	}
	if err := w.Call(ctx, "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, &res); err != nil {
		t.Fatalf("session.resume: %v", err)
	}
	if !res.More || int64(len(res.Events)) >= last {
		t.Fatalf("session.resume: %d of %d events, more=%v; want a bounded answer", len(res.Events), last, res.More)
	}
	seqs = seqs[:0]
	for _, ev := range res.Events {
		seqs = append(seqs, ev.Seq)
	}
	deadline := time.After(2 * time.Minute)
	for int64(len(seqs)) < last {
		select {
		case ev := <-w.Events(id):
			seqs = append(seqs, seqOf(ev))
		case <-deadline:
			t.Fatalf("session.resume: %d of %d events arrived", len(seqs), last)
		}
	}
	checkResumeSeqs(t, "session.resume + session.event", seqs, last)
}

// TestEventTooLargeForAMessage: an event larger than any gRPC message
// (written by hand into the store) makes resume answer payload_too_large
// with the limit, over gRPC and over the WebSocket, never overloaded.
func TestEventTooLargeForAMessage(t *testing.T) {
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	if err := os.WriteFile(script, []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{Home: home, Provider: "fake:" + script}
	d, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := helloWS(t, d)
	id := createSession(t, c, nil)
	if err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	last := seqOf(evs[len(evs)-1])
	c.Close()
	d.Stop()

	db, err := sql.Open("sqlite", filepath.Join(home, sqlite.FileName))
	if err != nil {
		t.Fatal(err)
	}
	huge := `{"turnId":"t-huge","text":"` + strings.Repeat("y", 65<<20) + `"}`
	if _, err := db.Exec(`INSERT INTO events (session_id, seq, kind, payload, ts) VALUES (?, ?, 'message.delta', ?, ?)`,
		id, last+1, []byte(huge), time.Now().UnixMicro()); err != nil {
		t.Fatal(err)
	}
	db.Close()

	d, err = daemon.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	g := dialGRPC(t, d)
	err2 := g.Call(context.Background(), "session.resume", map[string]any{"sessionId": id, "afterSeq": last}, nil)
	if err2 == nil || !err2.HasCode("payload_too_large") || fmt.Sprint(err2.Data["limit"]) != fmt.Sprint(64<<20) {
		t.Fatalf("gRPC ResumeSession of a 65 MiB event: %v, want payload_too_large with limit %d", err2, 64<<20)
	}
	w := helloWS(t, d)
	err2 = w.Call(context.Background(), "session.resume", map[string]any{"sessionId": id, "afterSeq": 0}, nil)
	if err2 == nil || !err2.HasCode("payload_too_large") {
		t.Fatalf("session.resume over a 65 MiB event: %v, want payload_too_large", err2)
	}
	if fmt.Sprint(err2.Data["limit"]) != fmt.Sprint(64<<20) {
		t.Fatalf("session.resume: data %v, want limit %d", err2.Data, 64<<20)
	}

	// On a SubscribeSessions stream the watch that meets it ends with
	// payload_too_large; a watch after it on the same stream goes on.
	ctx, cancel := context.WithCancel(g.outgoing(context.Background()))
	defer cancel()
	stream, err := trellisv1.NewSessionServiceClient(g.conn).SubscribeSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := newMuxWatcher(t, stream, 16)
	m.watch(1, id, last)
	m.watch(2, id, last+1)
	m.until("the huge event's watch to end and the other to catch up", func() bool {
		return m.watches[1].ended != nil && m.watches[2].caughtUp > 0
	})
	if e := m.watches[1].ended; e.GetCode() != "payload_too_large" || !strings.Contains(e.GetMessage(), fmt.Sprint(64<<20)) {
		t.Errorf("the watch over a 65 MiB event ended %v, want payload_too_large naming the limit", e)
	}
}

// storedSeq is the session's latest stored seq, as session.list reports it
// (0 when the list does not hold the session).
func storedSeq(t *testing.T, c *wsClient, id string) int64 {
	t.Helper()
	var sum struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
			Seq       int64  `json:"seq"`
		} `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{}, &sum); err != nil {
		t.Fatal(err)
	}
	for _, s := range sum.Sessions {
		if s.SessionID == id {
			return s.Seq
		}
	}
	return 0
}

// TestResumePagingWhileAppending: a client paging through gRPC
// ResumeSession (whose later pages the daemon reads ahead) while the
// session grows gets every event once, in order, to the new end, each the
// same object a second paging of the finished session gets.
func TestResumePagingWhileAppending(t *testing.T) {
	d := startDaemon(t)
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, nil)
	prompt := func() {
		t.Helper()
		if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hello " + strings.Repeat("z", 24<<10)}, nil); err != nil {
			t.Fatal(err)
		}
		collect(t, c.Events(id), "turn.done", 1)
	}
	for range 10 {
		prompt()
	}
	g := dialGRPC(t, d)
	sessions := trellisv1.NewSessionServiceClient(g.conn)
	page := func(after int64) (*trellisv1.ResumeSessionResponse, [][]byte) {
		t.Helper()
		res, err := sessions.ResumeSession(g.outgoing(ctx), &trellisv1.ResumeSessionRequest{SessionId: id, AfterSeq: &after})
		if err != nil {
			t.Fatalf("gRPC ResumeSession after %d: %v", after, err)
		}
		var objs [][]byte
		if res.GetEvents() != nil {
			if objs, err = codec.PageObjects(res.GetEvents(), nil); err != nil {
				t.Fatal(err)
			}
		}
		return res, objs
	}
	readAll := func(grow bool) (seqs []int64, objs map[int64]string, answers int) {
		objs = map[int64]string{}
		var after int64
		for {
			res, pageObjs := page(after)
			if answers++; grow && answers == 2 {
				prompt() // the third page is being read ahead now
			}
			for i, seq := range res.GetEvents().GetSeqs() {
				seqs = append(seqs, seq)
				objs[seq] = string(pageObjs[i])
				after = seq
			}
			if !res.GetMore() {
				return seqs, objs, answers
			}
		}
	}
	seqs, objs, answers := readAll(true)
	last := storedSeq(t, c, id)
	checkResumeSeqs(t, "gRPC ResumeSession while appending", seqs, last)
	if answers < 4 {
		t.Fatalf("%d answers for %d events, want at least 4 pages", answers, last)
	}
	again, objs2, _ := readAll(false)
	checkResumeSeqs(t, "gRPC ResumeSession again", again, last)
	for _, seq := range again {
		if objs[seq] != objs2[seq] {
			t.Fatalf("event %d differs between the two readings:\n%.200s\n%.200s", seq, objs[seq], objs2[seq])
		}
	}
}
