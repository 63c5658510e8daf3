package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	trellisclient "github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

// chaosScript: a prompt "append" makes the model call the shell tool,
// which appends one line to out.txt in the session's workdir.
const chaosScript = `{"steps":[
 {"match":"append","tool_calls":[{"name":"shell","arguments":{"command":"echo line >> out.txt"}}]},
 {"after_tool":"shell","text":"appended"}
],"repeat":true}`

// chaosRounds is how many prompts each chaos test sends
// (TRELLIS_CHAOS_ROUNDS; the default is small, so that the e2e package
// stays within go test's timeout; the run is 200).
func chaosRounds(t *testing.T) int {
	if v := os.Getenv("TRELLIS_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TRELLIS_CHAOS_ROUNDS=%q: want a positive number", v)
		}
		return n
	}
	return 20
}

// busyBackoff is how long the chaos clients wait before sending again a
// prompt the session answered session_busy (its queue of prompts was full:
// nothing was done, and the daemon keeps no receipt of it). They send it
// again with the same operation id, as a client backing off would.
const busyBackoff = 50 * time.Millisecond

// busyCode is the error code of a prompt a full queue refused.
const busyCode = "session_busy"

// chaosProxy forwards TCP connections to a daemon's port and cuts them at
// random points: a share (pass) of the connections pass whole, half of the
// others are cut after a random number of the client's bytes (before or in
// the middle of a request), half after a random number of the daemon's
// bytes (after the request, before or in the middle of the answer).
type chaosProxy struct {
	ln             net.Listener
	target         string
	pass           float64
	maxUp, maxDown int // the cut points are drawn below these byte counts

	mu   sync.Mutex
	rng  *rand.Rand
	cuts atomic.Int64
}

func startChaosProxy(t *testing.T, target string, pass float64, maxUp, maxDown int) *chaosProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos proxy seed %d", seed)
	p := &chaosProxy{ln: ln, target: target, pass: pass, maxUp: maxUp, maxDown: maxDown, rng: rand.New(rand.NewPCG(seed, seed>>1))}
	go p.serve()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *chaosProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *chaosProxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(down)
	}
}

func (p *chaosProxy) handle(down net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		down.Close()
		return
	}
	upLimit, downLimit := int64(-1), int64(-1)
	p.mu.Lock()
	switch {
	case p.rng.Float64() < p.pass:
	case p.rng.IntN(2) == 0:
		upLimit = int64(p.rng.IntN(p.maxUp))
	default:
		downLimit = int64(p.rng.IntN(p.maxDown))
	}
	p.mu.Unlock()
	var once sync.Once
	cut := func() {
		once.Do(func() {
			up.Close()
			down.Close()
		})
	}
	go p.pipe(up, down, upLimit, cut)
	p.pipe(down, up, downLimit, cut)
}

// pipe copies src to dst; past limit bytes (negative: none) it cuts both
// connections, the bytes before the limit forwarded.
func (p *chaosProxy) pipe(dst, src net.Conn, limit int64, cut func()) {
	defer cut()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if limit >= 0 && n+int64(k) > limit {
				_, _ = dst.Write(buf[:limit-n])
				p.cuts.Add(1)
				return
			}
			n += int64(k)
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chaosDaemon starts a daemon whose model appends a line per prompt, and a
// session in auto mode (no approval asked); it returns the session's id
// and workdir.
func chaosDaemon(t *testing.T) (*daemon.Daemon, string, string) {
	t.Helper()
	home := t.TempDir()
	path := filepath.Join(home, "script.json")
	if err := os.WriteFile(path, []byte(chaosScript), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	wd := t.TempDir()
	id := createSession(t, dialGRPC(t, d), map[string]any{"workdir": wd, "mode": "auto"})
	return d, id, wd
}

// checkChaos waits for the session's turns to end and checks that every
// prompt acted exactly once: rounds lines, rounds turns, and the turn ids
// the client was answered are those the log started.
func checkChaos(t *testing.T, d *daemon.Daemon, sessionID, workdir string, answered []string, cuts int64, busy int, took time.Duration) {
	t.Helper()
	logged := turnsOf(t, dialGRPC(t, d), sessionID)
	n := len(logged)
	b, err := os.ReadFile(filepath.Join(workdir, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte("\n"))
	t.Logf("%d prompts through %d cut connections (%d session_busy answers sent again) in %s: %d lines, %d turns",
		len(answered), cuts, busy, took.Round(time.Millisecond), lines, n)
	if lines != len(answered) || n != len(answered) || len(logged) != len(answered) {
		t.Fatalf("%d prompts: %d lines, %d turns, %d turn ids in the log; want %d of each", len(answered), lines, n, len(logged), len(answered))
	}
	for i, id := range answered {
		if !logged[id] {
			t.Fatalf("prompt %d was answered with turn %q, which the log did not start", i, id)
		}
	}
	if cuts == 0 {
		t.Fatal("the proxy cut no connection: the test tested nothing")
	}
}

// TestChaosWebSocket: the Go client (reconnecting) sends the prompts over
// a WebSocket that the proxy keeps cutting; it repeats each call whose
// answer was lost with the call's operation id.
func TestChaosWebSocket(t *testing.T) {
	rounds := chaosRounds(t)
	d, sessionID, wd := chaosDaemon(t)
	proxy := startChaosProxy(t, fmt.Sprintf("127.0.0.1:%d", d.HTTPPort()), 0, 2048, 8192)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	info := daemonfile.Info{Port: proxy.port(), Token: d.Token()}
	var c *trellisclient.Client
	for {
		var err error
		if c, err = trellisclient.DialInfo(ctx, info, trellisclient.Options{Reconnect: true}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	defer c.Close()
	start := time.Now()
	answered := make([]string, rounds)
	busy := 0
	for i := range answered {
		var r struct {
			TurnID string `json:"turnId"`
		}
		op := trellisclient.WithOperationID(ctx, fmt.Sprintf("chaos-ws-%d", i))
		for {
			err := c.Call(op, "session.prompt", map[string]any{"sessionId": sessionID, "text": "append"}, &r)
			var e *trellisclient.Error
			if errors.As(err, &e) && e.StringCode() == busyCode {
				busy++
				time.Sleep(busyBackoff)
				continue
			}
			if err != nil {
				t.Fatalf("prompt %d: %v", i, err)
			}
			break
		}
		answered[i] = r.TurnID
	}
	checkChaos(t, d, sessionID, wd, answered, proxy.cuts.Load(), busy, time.Since(start))
}

// TestChaosREST: each prompt is a POST with an Idempotency-Key, on a new
// connection, repeated until an answer comes back whole.
func TestChaosREST(t *testing.T) {
	rounds := chaosRounds(t)
	d, sessionID, wd := chaosDaemon(t)
	proxy := startChaosProxy(t, fmt.Sprintf("127.0.0.1:%d", d.HTTPPort()), 1.0/3, 512, 512)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/session/prompt", proxy.port())
	body := fmt.Sprintf(`{"sessionId":%q,"text":"append"}`, sessionID)
	start := time.Now()
	answered := make([]string, rounds)
	busy := 0
	for i := range answered {
		for try := 0; ; try++ {
			if try > 1000 {
				t.Fatalf("prompt %d: no whole answer in 1000 tries", i)
			}
			id, err := restPrompt(hc, url, d.Token(), body, fmt.Sprintf("chaos-rest-%d", i))
			if err == nil {
				answered[i] = id
				break
			}
			var answer *restAnswer
			switch {
			case errors.As(err, &answer) && answer.code() == busyCode:
				busy++
				time.Sleep(busyBackoff)
			case answer != nil:
				t.Fatalf("prompt %d: %v", i, err)
			}
		}
	}
	checkChaos(t, d, sessionID, wd, answered, proxy.cuts.Load(), busy, time.Since(start))
}

// restAnswer is a whole answer of the daemon other than 200.
type restAnswer struct {
	status int
	body   []byte
}

func (e *restAnswer) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// code is the answer's error code ("" when its body is not an error).
func (e *restAnswer) code() string {
	var b errcode.Error
	_ = json.Unmarshal(e.body, &b)
	return b.StringCode()
}

// restPrompt POSTs one prompt; a transport failure (a cut) is a plain
// error, a whole non-200 answer a *restAnswer.
func restPrompt(hc *http.Client, url, token, body, op string) (string, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", op)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusBadGateway || len(b) == 0 {
			return "", fmt.Errorf("HTTP %d, cut", resp.StatusCode)
		}
		return "", &restAnswer{resp.StatusCode, b}
	}
	var r struct {
		TurnID string `json:"turnId"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.TurnID == "" {
		return "", fmt.Errorf("a cut answer %q: %v", b, err)
	}
	return r.TurnID, nil
}

// TestChaosGRPC: a gRPC caller sends each prompt with idempotency-key
// metadata over a connection the proxy keeps cutting, repeating it until
// the daemon answers.
func TestChaosGRPC(t *testing.T) {
	rounds := chaosRounds(t)
	d, sessionID, wd := chaosDaemon(t)
	proxy := startChaosProxy(t, fmt.Sprintf("127.0.0.1:%d", d.GRPCPort()), 0, 2048, 2048)
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", proxy.port()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sessions := trellisv1.NewSessionServiceClient(conn)
	start := time.Now()
	answered := make([]string, rounds)
	busy := 0
	for i := range answered {
		for try := 0; ; try++ {
			if try > 1000 {
				t.Fatalf("prompt %d: no answer in 1000 tries", i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+d.Token(), "idempotency-key", fmt.Sprintf("chaos-grpc-%d", i))
			// WaitForReady: a try waits for the connection the proxy cut to come
			// back rather than failing at once while it is down.
			r, err := sessions.Prompt(ctx, &trellisv1.PromptRequest{SessionId: sessionID, Text: "append"}, grpc.WaitForReady(true))
			cancel()
			if err == nil {
				answered[i] = r.GetTurnId()
				break
			}
			if st, _ := status.FromError(err); errcodeOf(st) == busyCode {
				busy++
				time.Sleep(busyBackoff)
				continue
			}
			if daemonAnswered(err) {
				t.Fatalf("prompt %d: %v", i, err)
			}
		}
	}
	checkChaos(t, d, sessionID, wd, answered, proxy.cuts.Load(), busy, time.Since(start))
}

// daemonAnswered reports whether err is the daemon's own answer (it
// carries a Trellis ErrorInfo) rather than a transport failure.
func daemonAnswered(err error) bool {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return true
		}
	}
	return false
}

// TestPostgresChaosKillReceiver: three daemons on PostgreSQL; each prompt
// goes to a daemon that does not own the session (it forwards the call to
// the owner), and now and then that receiving daemon is killed with
// SIGKILL at a random moment of the call and started again. The client
// retries with the same operation id on another daemon until it gets an
// answer. The owner keeps the receipts, so the receiver's death loses no
// outcome: every prompt is answered with its turn id, and there are
// exactly as many lines and turns as prompts.
func TestPostgresChaosKillReceiver(t *testing.T) {
	rounds := chaosRounds(t)
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	homes := make([]string, 3)
	procs := make([]*proc, 3)
	for i := range procs {
		homes[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(homes[i], "script.json"), []byte(chaosScript), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = runClusterProc(t, homes[i], dsn)
	}
	wd := t.TempDir()
	sessionID := createSession(t, dialInfo(t, procs[0].info), map[string]any{"workdir": wd, "mode": "auto"})
	// The session's owner is daemon 0 (it created it, and nobody kills it).
	dial := func(i int) trellisv1.SessionServiceClient {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", procs[i].info.GRPCPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return trellisv1.NewSessionServiceClient(conn)
	}
	clients := []trellisv1.SessionServiceClient{dial(0), dial(1), dial(2)}
	token := procs[0].info.Token
	prompt := func(via trellisv1.SessionServiceClient, op string) (*trellisv1.PromptResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, "idempotency-key", op)
		return via.Prompt(ctx, &trellisv1.PromptRequest{SessionId: sessionID, Text: "append"}, grpc.WaitForReady(true))
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	const killEvery = 4
	var answered []string
	kills, busy := 0, 0
	start := time.Now()
	for i := range rounds {
		op := fmt.Sprintf("chaos-pg-%d", i)
		receiver := 1 + i%2
		if i%killEvery == killEvery-1 {
			// The receiver dies at a random moment of the call.
			first := clients[receiver]
			go func() { _, _ = prompt(first, op) }()
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			procs[receiver].kill()
			kills++
			procs[receiver] = runClusterProc(t, homes[receiver], dsn)
			clients[receiver] = dial(receiver)
			receiver = 3 - receiver
		}
		for try := 0; ; try++ {
			if try > 1000 {
				t.Fatalf("prompt %d: no answer in 1000 tries", i)
			}
			r, err := prompt(clients[receiver], op)
			if err == nil {
				answered = append(answered, r.GetTurnId())
				break
			}
			if st, _ := status.FromError(err); daemonAnswered(err) {
				if errcodeOf(st) == busyCode {
					busy++
					time.Sleep(busyBackoff)
					continue
				}
				t.Fatalf("prompt %d: %v", i, err)
			}
			receiver = 3 - receiver
		}
	}
	logged := turnsOf(t, dialInfo(t, procs[0].info), sessionID)
	b, err := os.ReadFile(filepath.Join(wd, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte("\n"))
	t.Logf("%d prompts, %d receivers killed, %d session_busy answers sent again, in %s: %d answered; %d lines, %d turns",
		rounds, kills, busy, time.Since(start).Round(time.Millisecond), len(answered), lines, len(logged))
	for i, id := range answered {
		if !logged[id] {
			t.Fatalf("answer %d names turn %q, which the log did not start", i, id)
		}
	}
	if len(answered) != rounds || lines != rounds || len(logged) != rounds {
		t.Fatalf("%d prompts: %d answered, %d lines, %d turns; want %d of each", rounds, len(answered), lines, len(logged), rounds)
	}
}

// errcodeOf is the Trellis error code a status carries ("" if none).
func errcodeOf(st *status.Status) string { return errorInfoOf(st).GetReason() }

// errorInfoOf is the ErrorInfo a status carries (nil if none): its reason
// is the error code, its metadata the error's data.
func errorInfoOf(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// TestPostgresChaosKillOwner: three daemons on PostgreSQL; the prompts go
// to any daemon, and now and then the session's owner is killed with
// SIGKILL at a random moment of a prompt sent to it. Another daemon takes
// the session over when the owner's lease expires: it closes the killed
// turn and the prompts queued behind it (turn.dequeued{dropped},
// turn.done{interrupted, synthetic}), so that no prompt the client was
// answered vanishes without an end in the log. The client retries each
// prompt with the same operation id until it gets an answer: its turn id,
// or operation_outcome_unknown, naming the turn id the call gave the
// prompt, when the owner died between beginning the call and storing its
// outcome. Every turn of the log is one an answer named; never an action
// twice: no operation makes more than one turn, no turn writes more than
// one line.
func TestPostgresChaosKillOwner(t *testing.T) {
	rounds := chaosRounds(t)
	dsn := pgtest.FreshDatabase(t, pgtest.Server(t))
	db := clusterDB(t, dsn)
	homes := make([]string, 3)
	procs := make([]*proc, 3)
	daemonIDs := make([]string, 3)
	for i := range procs {
		homes[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(homes[i], "script.json"), []byte(chaosScript), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = runClusterProc(t, homes[i], dsn)
		b, err := os.ReadFile(filepath.Join(homes[i], "daemon-id"))
		if err != nil {
			t.Fatal(err)
		}
		daemonIDs[i] = strings.TrimSpace(string(b))
	}
	wd := t.TempDir()
	sessionID := createSession(t, dialInfo(t, procs[0].info), map[string]any{"workdir": wd, "mode": "auto"})
	owner := func() int {
		var o string
		if err := db.QueryRow(context.Background(), `SELECT owner_id FROM session_leases WHERE session_id = $1`, sessionID).Scan(&o); err != nil {
			t.Fatal(err)
		}
		for i, d := range daemonIDs {
			if d == o {
				return i
			}
		}
		t.Fatalf("the lease names daemon %s, not one of %v", o, daemonIDs)
		return -1
	}
	dial := func(i int) trellisv1.SessionServiceClient {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", procs[i].info.GRPCPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return trellisv1.NewSessionServiceClient(conn)
	}
	clients := []trellisv1.SessionServiceClient{dial(0), dial(1), dial(2)}
	token := procs[0].info.Token
	prompt := func(via trellisv1.SessionServiceClient, op string) (*trellisv1.PromptResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, "idempotency-key", op)
		return via.Prompt(ctx, &trellisv1.PromptRequest{SessionId: sessionID, Text: "append"})
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	const killEvery = 10
	var answered []string
	var unknownTurns []string // the turns operation_outcome_unknown named
	kills, busy, refused := 0, 0, 0
	start := time.Now()
	via := 1
	for i := range rounds {
		op := fmt.Sprintf("chaos-owner-%d", i)
		down := -1
		if i%killEvery == killEvery/2 {
			// The owner dies at a random moment of a prompt sent to it.
			down = owner()
			first := clients[down]
			go func() { _, _ = prompt(first, op) }()
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			procs[down].kill()
			kills++
		}
		for try := 0; ; try++ {
			if try > 2000 {
				t.Fatalf("prompt %d: no answer in 2000 tries", i)
			}
			via = (via + 1) % len(clients)
			if via == down {
				continue
			}
			r, err := prompt(clients[via], op)
			if err == nil {
				answered = append(answered, r.GetTurnId())
				break
			}
			st, _ := status.FromError(err)
			code := errcodeOf(st)
			if code == "operation_outcome_unknown" {
				turn := errorInfoOf(st).GetMetadata()["turnId"]
				if turn == "" {
					t.Fatalf("prompt %d: operation_outcome_unknown names no turn: %v", i, err)
				}
				unknownTurns = append(unknownTurns, turn)
				break
			}
			switch {
			case code == busyCode:
				busy++
			case code == "overloaded":
				// The owner is dead and its lease not expired yet.
				refused++
			case daemonAnswered(err):
				t.Fatalf("prompt %d: %v", i, err)
			}
			time.Sleep(busyBackoff)
		}
		if down >= 0 {
			// Back with the same home (and daemon id), after another
			// daemon took the session over.
			procs[down] = runClusterProc(t, homes[down], dsn)
			clients[down] = dial(down)
		}
	}

	// Every turn of the log ends, once.
	var evs []storedEvent
	started, queued, done := map[string]bool{}, map[string]bool{}, map[string]int{}
	reasons := map[string]int{}
	results := 0
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		evs = storedEvents(t, db, sessionID)
		clear(started)
		clear(queued)
		clear(done)
		clear(reasons)
		results = 0
		for _, e := range evs {
			switch e.kind {
			case "turn.started":
				started[e.turnID] = true
			case "turn.queued":
				queued[e.turnID] = true
			case "turn.done":
				done[e.turnID]++
				reason := e.reason
				if e.synth {
					reason += " (synthetic)"
				}
				reasons[reason]++
			case "tool.result":
				results++
			}
		}
		var open []string
		for id := range union(started, queued) {
			if done[id] == 0 {
				open = append(open, id)
			}
		}
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var record string
			_ = db.QueryRow(context.Background(), `SELECT value::text FROM settings WHERE namespace = 'session.openTurns' AND key = $1`, sessionID).Scan(&record)
			var of []storedEvent
			for _, e := range evs {
				if slices.Contains(open, e.turnID) {
					of = append(of, e)
				}
			}
			t.Fatalf("turns %v not ended 60 s after the last prompt: their events %+v; the last events %+v; open turns recorded %q",
				open, of, evs[max(0, len(evs)-8):], record)
		}
	}
	// A prompt the owner recorded but died before announcing (its answer,
	// unknown, was never sent) has only its end in the log.
	turns := union(started, queued)
	for id := range done {
		turns[id] = true
	}
	b, err := os.ReadFile(filepath.Join(wd, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte("\n"))
	t.Logf("%d prompts, %d owners killed, in %s (%d session_busy and %d overloaded answers sent again): %d answered, %d outcome unknown; "+
		"%d turns (%d started), ended %v; %d lines, %d tool results",
		rounds, kills, time.Since(start).Round(time.Millisecond), busy, refused, len(answered), len(unknownTurns),
		len(turns), len(started), reasons, lines, results)
	seen := map[string]bool{}
	for i, id := range answered {
		if !turns[id] || seen[id] {
			t.Fatalf("answer %d names turn %q: in the log %v, answered before %v", i, id, turns[id], seen[id])
		}
		seen[id] = true
	}
	for id, n := range done {
		if n != 1 {
			t.Fatalf("turn %s has %d turn.done, want 1", id, n)
		}
	}
	// Every turn of the log is one the client was told of: answered, or
	// named by an unknown outcome.
	told := map[string]bool{}
	for _, id := range append(slices.Clone(answered), unknownTurns...) {
		told[id] = true
	}
	for id := range turns {
		if !told[id] {
			t.Fatalf("turn %s is in the log, but no answer named it", id)
		}
	}
	switch {
	case len(answered)+len(unknownTurns) != rounds:
		t.Fatalf("%d prompts: %d answered, %d unknown", rounds, len(answered), len(unknownTurns))
	case len(turns) < len(answered) || len(turns) > len(answered)+len(unknownTurns):
		t.Fatalf("%d turns for %d answered and %d unknown prompts: an operation acted twice, or an answer names no turn", len(turns), len(answered), len(unknownTurns))
	case lines > len(started) || lines < results:
		t.Fatalf("%d lines for %d started turns and %d tool results: a turn acted twice", lines, len(started), results)
	}
}

// union is the set of the keys of a and b.
func union(a, b map[string]bool) map[string]bool {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
