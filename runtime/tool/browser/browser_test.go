//go:build !trellis_lean

package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/tool"
)

// needChromium skips a test that starts a browser where none is installed.
func needChromium(t *testing.T) {
	t.Helper()
	for _, name := range DefaultChromium {
		if _, err := exec.LookPath(name); err == nil {
			return
		}
	}
	t.Skipf("the browser tests need Chromium (none of %s on PATH): apt-get install chromium", strings.Join(DefaultChromium, ", "))
}

func newTool(t *testing.T, opts Options) *Tool {
	t.Helper()
	if opts.ProfileRoot == "" {
		opts.ProfileRoot = t.TempDir()
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// testPage is the test's site: a button that changes the text and a field
// whose typing shows up in the page.
const testPage = `<!doctype html><title>Test page</title>
<h1 id="msg">Hello from the test</h1>
<button id="go" onclick="document.getElementById('msg').textContent = 'Clicked!'">Change text</button>
<label>Name <input id="name" oninput="document.getElementById('echo').textContent = 'Hi ' + this.value"></label>
<p id="echo"></p>`

func run(t *testing.T, b *Tool, session string, args map[string]any) tool.Result {
	t.Helper()
	res, err := runErr(b, session, args, t.TempDir())
	if err != nil {
		t.Fatalf("browser %v: %v", args, err)
	}
	return res
}

func runErr(b *Tool, session string, args map[string]any, dir string) (tool.Result, error) {
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return b.Run(ctx, tool.Call{ID: "call1", SessionID: session, Args: raw, Workdir: dir, OutputDir: dir})
}

func TestBrowserDrivesAPage(t *testing.T) {
	needChromium(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, testPage)
	}))
	defer srv.Close()
	b := newTool(t, Options{AllowPrivate: true})

	res := run(t, b, "s1", map[string]any{"action": "navigate", "url": srv.URL})
	if !res.OK || !strings.Contains(res.Output, "Title: Test page") {
		t.Fatalf("navigate: %+v", res)
	}
	res = run(t, b, "s1", map[string]any{"action": "read"})
	if !res.OK || !strings.Contains(res.Output, "Hello from the test") {
		t.Fatalf("read: %+v", res)
	}
	m := regexp.MustCompile(`\[(e\d+)\] button "Change text"`).FindStringSubmatch(res.Output)
	if m == nil || !strings.Contains(res.Output, `textbox "Name" value=""`) {
		t.Fatalf("the outline has no button and field:\n%s", res.Output)
	}
	if res := run(t, b, "s1", map[string]any{"action": "click", "ref": m[1]}); !res.OK {
		t.Fatalf("click: %+v", res)
	}
	if res := run(t, b, "s1", map[string]any{"action": "read", "outline": false}); !strings.Contains(res.Output, "Clicked!") || strings.Contains(res.Output, "Hello from") {
		t.Fatalf("after the click, read shows:\n%s", res.Output)
	}
	if res := run(t, b, "s1", map[string]any{"action": "type", "selector": "#name", "text": "Ada"}); !res.OK {
		t.Fatalf("type: %+v", res)
	}
	res = run(t, b, "s1", map[string]any{"action": "read"})
	if !strings.Contains(res.Output, "Hi Ada") || !strings.Contains(res.Output, `value="Ada"`) || !strings.Contains(res.Output, "["+m[1]+"] button") {
		t.Fatalf("after typing, read shows (the button keeps its ref):\n%s", res.Output)
	}
	if res := run(t, b, "s1", map[string]any{"action": "click", "ref": "e999"}); res.OK {
		t.Fatalf("a click on an unknown ref succeeded: %+v", res)
	}

	res = run(t, b, "s1", map[string]any{"action": "screenshot"})
	if !res.OK || len(res.Images) != 1 || res.Images[0].MediaType != "image/png" {
		t.Fatalf("screenshot: %+v", res.Output)
	}
	img, err := png.Decode(bytes.NewReader(res.Images[0].Data))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != ViewportWidth || sz.Y != ViewportHeight {
		t.Fatalf("screenshot is %v, want the viewport %dx%d", sz, ViewportWidth, ViewportHeight)
	}

	profile := b.sessions["s1"].b.profile
	if len(ProfileProcesses(profile, false)) == 0 {
		t.Fatal("no process uses the session's profile while its browser runs")
	}
	b.CloseSession("s1")
	if pids := ProfileProcesses(profile, false); len(pids) > 0 {
		t.Fatalf("processes %v outlive the session's browser", pids)
	}
	if _, err := os.Stat(profile); !os.IsNotExist(err) {
		t.Fatalf("the profile %s is left (%v)", profile, err)
	}
}

// Without --web-fetch-allow-private a page reaches no private address:
// not by navigation, nor by a redirect or a subresource of a page that
// was allowed.
func TestBrowserRefusesPrivateAddresses(t *testing.T) {
	needChromium(t)
	var hits atomic.Int32
	private := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "<title>private</title>secret")
	}))
	defer private.Close()

	b := newTool(t, Options{})
	res := run(t, b, "s1", map[string]any{"action": "navigate", "url": private.URL})
	if res.OK || !strings.Contains(res.Output, "Refused") || hits.Load() != 0 {
		t.Fatalf("navigate to %s: %+v (the server was reached %d times)", private.URL, res, hits.Load())
	}

	// The public site stands in for one on the internet: the rule lets
	// its address through and applies web_fetch's rule to every other.
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, private.URL+"/", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<title>public</title><p>public page</p><img src="%[1]s/img.png"><iframe src="%[1]s/frame"></iframe><script>fetch("%[1]s/api").catch(() => {})</script>`, private.URL)
		}
	}))
	defer public.Close()
	publicAddr := strings.TrimPrefix(public.URL, "http://")
	b = newTool(t, Options{control: func(network, address string, c syscall.RawConn) error {
		if address == publicAddr {
			return nil
		}
		return tool.RefusePrivate(network, address, c)
	}})
	res = run(t, b, "s2", map[string]any{"action": "navigate", "url": public.URL + "/redirect"})
	if res.OK || !strings.Contains(res.Output, strings.TrimPrefix(private.URL, "http://")) || hits.Load() != 0 {
		t.Fatalf("a redirect to the private server: %+v (reached %d times)", res, hits.Load())
	}
	res = run(t, b, "s2", map[string]any{"action": "navigate", "url": public.URL + "/"})
	if !res.OK || !strings.Contains(res.Output, "Title: public") {
		t.Fatalf("the public page: %+v", res)
	}
	res = run(t, b, "s2", map[string]any{"action": "read"})
	if !strings.Contains(res.Output, "public page") || hits.Load() != 0 {
		t.Fatalf("the public page's subresources reached the private server %d times:\n%s", hits.Load(), res.Output)
	}
}

func TestBrowserWithoutChromium(t *testing.T) {
	b := newTool(t, Options{Chromium: "/nonexistent/chromium"})
	if st := b.State(); st.Active || st.Code != errcode.BrowserProviderUnavailable {
		t.Fatalf("State = %+v", st)
	}
	_, err := runErr(b, "s1", map[string]any{"action": "navigate", "url": "http://example.com/"}, t.TempDir())
	if errs.CodeOf(err) != errcode.BrowserProviderUnavailable {
		t.Fatalf("a call without Chromium: %v (code %s)", err, errs.CodeOf(err))
	}
}

func TestSetProvider(t *testing.T) {
	lent := tool.NewLent()
	b := newTool(t, Options{Chromium: "/nonexistent/chromium",
		Host: func(sessionID, origin string) tool.Tool { return lent.HostBrowserOf(sessionID, origin) }})
	// host: a call goes to the browser a client lent, and fails with
	// browser_provider_unavailable while none is.
	if err := b.SetProvider("s1", ProviderHost); err != nil {
		t.Fatalf("host: %v", err)
	}
	if _, err := runErr(b, "s1", map[string]any{"action": "read"}, t.TempDir()); errs.CodeOf(err) != errcode.BrowserProviderUnavailable || !strings.Contains(err.Error(), "lent") {
		t.Fatalf("host without a lent browser: %v", err)
	}
	lent.Attach("o-1", func(_ context.Context, c tool.LentCall) (tool.LentReply, error) {
		return tool.LentReply{Output: "host page: " + string(c.Args)}, nil
	})
	if _, err := lent.Register("o-1", "s1", []tool.LentDef{{Name: "browser", Tag: approval.TagNetwork}}, []tool.Info{{Name: "browser", Source: "builtin"}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range lent.Registries("s1", "o-1") {
		if _, ok := r.Lookup("browser"); ok {
			t.Fatal("a lent browser is a tool of its own, in the built-in's place")
		}
	}
	if res, err := runErr(b, "s1", map[string]any{"action": "read"}, t.TempDir()); err != nil || !res.OK || !strings.Contains(res.Output, `host page: {"action":"read"}`) {
		t.Fatalf("host with a lent browser: %+v, %v", res, err)
	}
	if err := b.SetProvider("s1", "docker"); errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("docker: %v", err)
	}
	if err := b.SetProvider("s1", ProviderNone); err != nil {
		t.Fatal(err)
	}
	_, err := runErr(b, "s1", map[string]any{"action": "read"}, t.TempDir())
	if errs.CodeOf(err) != errcode.BrowserProviderUnavailable || !strings.Contains(err.Error(), "none") {
		t.Fatalf("a call with provider none: %v", err)
	}
}

// No browser outlives its session's idleness or the daemon, and a daemon
// that starts reaps the browsers a killed one left.
func TestBrowserEnds(t *testing.T) {
	needChromium(t)
	root := t.TempDir()
	profiles := func() []string {
		var p []string
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			p = append(p, root+"/"+e.Name())
		}
		return p
	}
	alive := func() int {
		n := 0
		for _, p := range profiles() {
			n += len(ProfileProcesses(p, false))
		}
		return n
	}

	b := newTool(t, Options{ProfileRoot: root, IdleTimeout: 500 * time.Millisecond})
	run(t, b, "idle", map[string]any{"action": "read"})
	if alive() == 0 {
		t.Fatal("no browser runs after a call")
	}
	for deadline := time.Now().Add(30 * time.Second); alive() > 0 || len(profiles()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle browser still runs (%d processes, profiles %v)", alive(), profiles())
		}
	}

	run(t, b, "a", map[string]any{"action": "read"})
	run(t, b, "b", map[string]any{"action": "read"})
	b.Close()
	if n, p := alive(), profiles(); n > 0 || len(p) > 0 {
		t.Fatalf("after Close: %d processes, profiles %v", n, p)
	}
	if _, err := runErr(b, "a", map[string]any{"action": "read"}, t.TempDir()); errs.CodeOf(err) != errcode.BrowserProviderUnavailable {
		t.Fatalf("a call after Close: %v", err)
	}

	// A daemon killed with its browser running: the next one reaps it.
	crashed := newTool(t, Options{ProfileRoot: root})
	run(t, crashed, "a", map[string]any{"action": "read"})
	if alive() == 0 {
		t.Fatal("no browser runs")
	}
	newTool(t, Options{ProfileRoot: root})
	if n, p := alive(), profiles(); n > 0 || len(p) > 0 {
		t.Fatalf("after a new start on the same root: %d processes, profiles %v", n, p)
	}
}
