package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// leaseFaultLease is the lease of TestPostgresLeaseFaults: its owner
// deposes itself a fifth of it before it ends (1.6 s without a renewal).
const leaseFaultLease = 2 * time.Second

// leaseFaultCommands are the commands the model of TestPostgresLeaseFaults
// asks for: on "lease", one that would write marker 10 s after it starts
// (five leases: the owner stops long before); on "approve", one the
// session's mode sends for approval.
var leaseFaultCommands = map[string]string{
	"lease":   "echo started; sleep 10; touch marker",
	"approve": "touch marker",
}

// leaseFaultMCPServer is the name the daemons of TestPostgresLeaseFaults
// give their MCP server (mcptest, this test binary): its tool hang blocks
// until cancelled and leaves a marker per call, named by its tag, in a
// directory the three daemons' servers share.
const leaseFaultMCPServer = "faults"

// leaseFaultReply is the model's one answer of a round: a call of tool
// with args (a shell command, or the MCP tool hang and its tag). The model
// is a local server speaking OpenAI's streaming format, shared by the
// three daemons; it answers each request with the next reply queued and
// anything more with 500, and records every request, so that a deposed
// owner that went on to ask the model (after its tool call) would be
// counted.
func leaseFaultReply(tool string, args map[string]string) providertest.Reply {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return providertest.NewOpenAIStream("gpt-4.1").ToolCall(0, "call_1", tool).ToolArgs(0, string(raw)).
		Finish("tool_calls").Usage(10, 5).Reply()
}

// tcpProxy forwards TCP connections to target until cut. A cut is a
// partition as a dropped link makes it: nothing is refused or reset, bytes
// simply stop flowing both ways and new connections are accepted and
// never answered, so the daemon's calls hang until their own deadlines.
// Healing closes the connections that lived through the cut (their
// streams lost bytes) and lets new ones through again.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	heal  chan struct{} // closed when the cut heals
	conns map[net.Conn]struct{}
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, heal: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		p.setCut(false)
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go p.serve()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *tcpProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

// gate blocks while the proxy is cut; false if the cut healed meanwhile
// (the connection then ends).
func (p *tcpProxy) gate() bool {
	p.mu.Lock()
	cut, heal := p.cut, p.heal
	p.mu.Unlock()
	if !cut {
		return true
	}
	<-heal
	return false
}

func (p *tcpProxy) pipe(in net.Conn) {
	p.track(in)
	defer in.Close()
	if !p.gate() {
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(out)
	defer out.Close()
	go p.copy(out, in)
	p.copy(in, out)
}

// copy forwards from src to dst while not cut; a cut holds what it read.
func (p *tcpProxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts the link (true) or heals it (false).
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut == p.cut {
		return
	}
	p.cut = cut
	if !cut {
		close(p.heal)
		p.heal = make(chan struct{})
	}
}

// viaProxy is dsn with its host and port replaced by addr.
func viaProxy(t *testing.T, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// helloInfo connects a WebSocket client to a daemon process and says hello.
func helloInfo(t *testing.T, info daemonfile.Info) *wsClient {
	t.Helper()
	c := dialWSURL(t, fmt.Sprintf("ws://127.0.0.1:%d/ws", info.Port))
	if err := c.Call(context.Background(), "system.hello", map[string]any{
		"token": info.Token, "clientVersion": "test", "protocolVersion": "1.0.0",
	}, nil); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return c
}

// descendants lists the processes below pid (children first, then theirs).
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// leaseFaultRounds is how many rounds of each fault TestPostgresLeaseFaults
// runs: TRELLIS_LEASE_FAULT_ROUNDS (the acceptance asks 20), else 3.
func leaseFaultRounds(t *testing.T) int {
	if s := os.Getenv("TRELLIS_LEASE_FAULT_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TRELLIS_LEASE_FAULT_ROUNDS=%q: want a positive number", s)
		}
		return n
	}
	return 3
}

// TestPostgresLeaseFaults: three daemons on one PostgreSQL database, each
// reaching it through a TCP proxy the test runs. In the first two faults a
// session's owner runs `echo started; sleep 10; touch marker`, and once it
// printed started the owner is either SIGSTOPped, with its commands, past
// the lease (another daemon takes the session over, then the owner alone
// is resumed) or cut off from the database by its proxy; in a third fault
// the owner is cut off while an approval of `touch marker` is pending, and
// its client then allows it (the owner cannot record the allow, the new
// owner denies the request); in a fourth (mcp) the owner is cut off once
// its MCP server (mcptest, one process per daemon, all writing markers to
// one directory) started the call of hang, a tool that blocks until
// cancelled, tagged with the round. Every round: the owner's WebSocket
// client gets the lease_lost notice (error{lease_lost} and
// turn.done{error}, retracted, under the seq after the last stored event
// it got), which voids whatever it got from memory from there; the command
// is killed (no marker, no process left) and the owner never asks the
// model again (the model, a local OpenAI-format server the daemons share,
// gets one request of the round: the owner's before the fault, counted
// again once every round is over); in an mcp round the MCP servers got one
// call of the round, on the owner's server, and the deposed owner
// cancelled it there (counted again at the end, with the calls in all: one
// an mcp round); the log holds nothing of the owner after the takeover
// (the turn's only turn.done is the new owner's synthetic one, and no
// tool.result); and every event the client keeps is the one the log holds
// under its seq, read on after the notice from the owner itself (SIGSTOP)
// or by session.resume on another daemon (the other faults).
func TestPostgresLeaseFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault rounds on three daemons")
	}
	server := pgtest.Server(t)
	dsn := pgtest.FreshDatabase(t, server)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := clusterDB(t, dsn)
	model := providertest.NewServer(t)
	t.Setenv("OPENAI_API_KEY", "sk-lease-faults")
	t.Setenv("OPENAI_BASE_URL", model.URL+"/v1")
	// One MCP server configuration for the three daemons: each runs its
	// own server process, and all of them leave their markers in markers.
	markers := t.TempDir()
	mcpCmd, mcpEnv := mcptest.Command(markers)
	mcpConfig, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		leaseFaultMCPServer: map[string]any{"command": mcpCmd, "env": mcpEnv},
	}})
	mcpConfigPath := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(mcpConfigPath, mcpConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 3
	procs := make([]*proc, n)
	proxies := make([]*tcpProxy, n)
	for i := range procs {
		proxies[i] = startTCPProxy(t, u.Host)
		procs[i] = startProc(t, t.TempDir(), "--provider", "openai:gpt-4.1",
			"--store", viaProxy(t, dsn, proxies[i].addr()), "--lease", leaseFaultLease.String(),
			"--mcp-config", mcpConfigPath)
	}
	clients := make([]*wsClient, n)
	// Each client approves a request only when the test says so.
	asked := make([]chan struct{}, n)
	allow := make([]chan struct{}, n)
	for i, p := range procs {
		clients[i] = helloInfo(t, p.info)
		asked[i], allow[i] = make(chan struct{}, 1), make(chan struct{})
		clients[i].onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
			if method != "approval.request" {
				return nil, errcode.NewMethodNotFound(method)
			}
			asked[i] <- struct{}{}
			<-allow[i]
			return map[string]any{"decision": "allow"}, nil
		}
	}
	ctx := context.Background()
	rounds := leaseFaultRounds(t)
	faults := []string{"sigstop", "partition", "approval", "mcp"}
	for _, fault := range faults {
		var slowest time.Duration       // from the fault (SIGCONT for sigstop) to the notice
		var slowestCancel time.Duration // mcp: from the fault to the server's cancelled marker (its mtime)
		for round := 0; round < rounds; round++ {
			o := round % n
			other := (o + 1) % n
			wd := t.TempDir()
			mode, prompt := "auto", "lease"
			if fault == "approval" {
				mode, prompt = "accept", "approve"
			}
			id := createSession(t, clients[o], map[string]any{"workdir": wd, "mode": mode})
			// The round's name in the prompt tells its requests to the
			// model, its tag (mcp) its calls to the MCP servers.
			roundName := fmt.Sprintf("round %s-%d", fault, round)
			tag := fmt.Sprintf("%s-%d", fault, round)
			if fault == "mcp" {
				prompt = "hang"
				model.Enqueue(leaseFaultReply("mcp__"+leaseFaultMCPServer+"__hang", map[string]string{"tag": tag}))
			} else {
				model.Enqueue(leaseFaultReply("shell", map[string]string{"command": leaseFaultCommands[prompt]}))
			}
			if err := clients[o].Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": prompt + " " + roundName}, nil); err != nil {
				t.Fatalf("%s round %d: prompt: %v", fault, round, err)
			}
			var got []map[string]any
			switch fault {
			case "approval":
				select {
				case <-asked[o]:
				case <-time.After(60 * time.Second):
					t.Fatalf("approval round %d: no approval.request within 60 s", round)
				}
			case "mcp":
				// The owner's MCP server has the call (the client reads its
				// events on from the notice's wait).
				waitCalls(t, markers, "started", tag)
			default:
				got = waitStarted(t, clients[o].Events(id))
			}
			var stopped []int
			switch fault {
			case "sigstop":
				// The owner and its commands freeze, as in a paused VM.
				pid := procs[o].cmd.Process.Pid
				kids := descendants(pid)
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				for _, k := range kids {
					if syscall.Kill(k, syscall.SIGSTOP) == nil {
						stopped = append(stopped, k)
					}
				}
				// Another daemon takes the session over once the lease
				// expired and closes the turn; then the owner alone runs
				// again, its commands still frozen.
				waitSyntheticDone(t, db, id)
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			case "partition", "mcp":
				proxies[o].setCut(true)
			case "approval":
				// The owner is cut off with the request pending, and its
				// client allows it then: the owner cannot record the
				// answer, and the new owner denies the request.
				proxies[o].setCut(true)
				allow[o] <- struct{}{}
			}
			faulted := time.Now()
			// The owner's client is told, by the next events it gets.
			got, from := waitNotice(t, clients[o].Events(id), got)
			slowest = max(slowest, time.Since(faulted))
			if fault == "sigstop" {
				// Whatever of the command is left runs again: had the owner
				// not killed it, marker would appear.
				for _, k := range stopped {
					syscall.Kill(k, syscall.SIGCONT)
				}
			}
			waitSyntheticDone(t, db, id)
			if fault != "sigstop" {
				// Moved to the new owner: another daemon's resume from
				// before the notice returns what the log holds there.
				rest := resumeFrom(t, clients[other], id, from-1)
				got = append(got, rest...)
			} else if !hasSyntheticDone(got) {
				// The owner reads the new owner's events from the store
				// (before the notice when they were stored before it
				// noticed, else after it).
				got = append(got, collectUntilSynthetic(t, clients[o].Events(id))...)
			}
			for deadline := time.Now().Add(30 * time.Second); processesOf(-1, wd) != nil; {
				if time.Now().After(deadline) {
					t.Fatalf("%s round %d: processes of the command are left: %v", fault, round, processesOf(-1, wd))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := os.Stat(filepath.Join(wd, "marker")); err == nil {
				t.Fatalf("%s round %d: the deposed owner's marker appeared", fault, round)
			}
			if n := requestsOf(model, roundName); n != 1 {
				t.Fatalf("%s round %d: the model got %d requests of the round, want 1 (the owner's before the fault)", fault, round, n)
			}
			if fault == "mcp" {
				// One call of the round reached an MCP server, the owner's,
				// and the owner cancelled it on its server when deposed.
				cancelled := waitCalls(t, markers, "cancelled", tag)
				slowestCancel = max(slowestCancel, markerTime(t, markers, "cancelled", tag).Sub(faulted))
				started := mcptest.Calls(markers, "started", tag)
				if len(started) != 1 || len(cancelled) != 1 || cancelled[0] != started[0] || !slices.Contains(descendants(procs[o].cmd.Process.Pid), mcptest.HostPid(started[0])) {
					t.Fatalf("mcp round %d: MCP calls started by servers %v, cancelled by %v; want one, started and cancelled by the owner's server (a child of pid %d)",
						round, started, cancelled, procs[o].cmd.Process.Pid)
				}
			}
			checkLeaseFaultLog(t, fmt.Sprintf("%s round %d", fault, round), storedEvents(t, db, id), got)
			if fault != "sigstop" {
				proxies[o].setCut(false)
			}
			// The next round needs every daemon serving: the owner is back
			// once it answers a call that reads the database.
			waitServing(t, clients[o])
		}
		t.Logf("%s: %d rounds, each: the owner's client got the lease_lost notice, 0 markers, 0 model requests after the fault, 0 events of the owner after the takeover, every kept event the log's; slowest notice %v after the fault (lease %v)",
			fault, rounds, slowest.Round(time.Millisecond), leaseFaultLease)
		if fault == "mcp" {
			t.Logf("mcp: %d rounds, each: 1 MCP call (on the owner's server, before the fault), cancelled on that server by the deposed owner at most %v after the fault (the marker's mtime)",
				rounds, slowestCancel.Round(time.Millisecond))
		}
	}
	// Once every round is over, with every daemon serving again, each
	// round's requests are still the one its owner made before the fault,
	// and each mcp round's MCP calls the one call the owner started.
	for _, fault := range faults {
		for round := 0; round < rounds; round++ {
			if n := requestsOf(model, fmt.Sprintf("round %s-%d", fault, round)); n != 1 {
				t.Errorf("%s round %d: the model got %d requests of the round in all, want 1", fault, round, n)
			}
			if fault != "mcp" {
				continue
			}
			tag := fmt.Sprintf("%s-%d", fault, round)
			if s, c := mcptest.Calls(markers, "started", tag), mcptest.Calls(markers, "cancelled", tag); len(s) != 1 || len(c) != 1 {
				t.Errorf("mcp round %d: MCP calls of the round in all: started %v, cancelled %v; want one of each", round, s, c)
			}
		}
	}
	all, _ := filepath.Glob(filepath.Join(markers, "started.*"))
	if len(all) != rounds {
		t.Errorf("the MCP servers started %d calls in all, want %d (one an mcp round)", len(all), rounds)
	}
	t.Logf("the model got %d requests in all: one a round; the MCP servers got %d calls in all: one an mcp round", len(model.Requests()), len(all))
}

// markerTime is when the (first) marker of kind for tag was written.
func markerTime(t *testing.T, markers, kind, tag string) time.Time {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(markers, kind+"."+tag+".*"))
	if len(paths) == 0 {
		t.Fatalf("no %s marker for %s", kind, tag)
	}
	fi, err := os.Stat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// waitCalls waits until the MCP servers writing to markers recorded a call
// of hang tagged tag as kind (started, cancelled) and returns the pids of
// the servers that did.
func waitCalls(t *testing.T, markers, kind, tag string) []int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if pids := mcptest.Calls(markers, kind, tag); len(pids) > 0 {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("no MCP call tagged %s %s within 60 s", tag, kind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requestsOf counts the model's requests whose conversation holds
// roundName (in the round's prompt).
func requestsOf(model *providertest.Server, roundName string) int {
	n := 0
	for _, r := range model.Requests() {
		if strings.Contains(string(r.Body), roundName+`"`) {
			n++
		}
	}
	return n
}

// waitSyntheticDone waits until the session's log holds a synthetic
// turn.done: another daemon took the session over and closed the turn.
func waitSyntheticDone(t *testing.T, db *pgx.Conn, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, e := range storedEvents(t, db, id) {
			if e.kind == "turn.done" && e.synth {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon took session %s over within 60 s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitNotice reads a session's events after got until the lease_lost
// notice (error{lease_lost} then turn.done{error}, both retracted, under
// one seq) and returns them all and the notice's seq.
func waitNotice(t *testing.T, ch <-chan map[string]any, got []map[string]any) ([]map[string]any, int64) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev := <-ch:
			got = append(got, ev)
			if ev["retracted"] != true {
				continue
			}
			if ev["kind"] != "error" || payloadOf(ev)["code"] != "lease_lost" {
				t.Fatalf("the notice starts with %v, want error{lease_lost}", ev)
			}
			select {
			case done := <-ch:
				got = append(got, done)
				if done["kind"] != "turn.done" || done["retracted"] != true || seqOf(done) != seqOf(ev) || payloadOf(done)["reason"] != "error" {
					t.Fatalf("after error{lease_lost}: %v, want turn.done{error} retracted at seq %d", done, seqOf(ev))
				}
			case <-timeout:
				t.Fatalf("no turn.done after error{lease_lost}: %v", eventKinds(got))
			}
			return got, seqOf(ev)
		case <-timeout:
			t.Fatalf("the deposed owner's client was not told within 60 s: %v", eventKinds(got))
		}
	}
}

// hasSyntheticDone reports whether evs hold a synthetic turn.done.
func hasSyntheticDone(evs []map[string]any) bool {
	for _, ev := range evs {
		if ev["kind"] == "turn.done" && payloadOf(ev)["synthetic"] == true {
			return true
		}
	}
	return false
}

// collectUntilSynthetic reads events until the synthetic turn.done.
func collectUntilSynthetic(t *testing.T, ch <-chan map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev := <-ch:
			out = append(out, ev)
			if ev["kind"] == "turn.done" && payloadOf(ev)["synthetic"] == true {
				return out
			}
		case <-timeout:
			t.Fatalf("the new owner's turn.done did not follow the notice within 60 s: %v", eventKinds(out))
		}
	}
}

// resumeFrom answers session.resume {afterSeq} on c: the stored events after it.
func resumeFrom(t *testing.T, c *wsClient, id string, after int64) []map[string]any {
	t.Helper()
	var res struct {
		Events []map[string]any `json:"events"`
	}
	// overloaded is the documented "moved while forwarding, retry": the
	// session changed owner under the call; clients retry it, so does this.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Call(context.Background(), "session.resume", map[string]any{"sessionId": id, "afterSeq": after}, &res)
		if err == nil {
			return res.Events
		}
		if err.StringCode() != "overloaded" || time.Now().After(deadline) {
			t.Fatalf("session.resume on another daemon: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitServing waits until c's daemon answers session.list (it reads the
// database).
func waitServing(t *testing.T, c *wsClient) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Call(context.Background(), "session.list", map[string]any{}, nil)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not serve again within 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkLeaseFaultLog checks a round's log and what the owner's client
// keeps of it: the killed turn's only turn.done is the new owner's
// synthetic one, and no tool.result or error of the owner was stored after
// its tool.call; every event the client keeps (dropping, at a retracted
// notice of seq S, what it got unstored from S on) is the log's under
// its seq.
func checkLeaseFaultLog(t *testing.T, round string, stored []storedEvent, got []map[string]any) {
	t.Helper()
	dones := 0
	for i, e := range stored {
		if e.seq != int64(i+1) {
			t.Fatalf("%s: stored seq %d at position %d", round, e.seq, i)
		}
		switch e.kind {
		case "turn.done":
			dones++
			if !e.synth || e.reason != "interrupted" {
				t.Fatalf("%s: a turn.done of the deposed owner was stored: %+v", round, e)
			}
		case "tool.result", "error":
			t.Fatalf("%s: the deposed owner stored %s at seq %d", round, e.kind, e.seq)
		}
	}
	if dones != 1 {
		t.Fatalf("%s: %d turn.done stored, want the new owner's one", round, dones)
	}
	var kept []map[string]any
	for _, ev := range got {
		if ev["retracted"] == true {
			s := seqOf(ev)
			k := kept[:0]
			for _, e := range kept {
				if seqOf(e) >= s {
					if e["unstored"] != true {
						t.Fatalf("%s: a notice at seq %d retracts a stored event: %v", round, s, e)
					}
					continue
				}
				k = append(k, e)
			}
			kept = k
			continue
		}
		kept = append(kept, ev)
	}
	for _, ev := range kept {
		s := seqOf(ev)
		if s < 1 || s > int64(len(stored)) || stored[s-1].kind != ev["kind"] {
			t.Fatalf("%s: the client keeps %v at seq %d, but the log holds %v there", round, ev["kind"], s, stored[min(max(s-1, 0), int64(len(stored)-1))])
		}
	}
}
