package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/tool"
)

// The providers of a session's browser.
const (
	// ProviderLocal is Chromium on the daemon's machine.
	ProviderLocal = "local"
	// ProviderHost is the browser a client lent the session (a lent tool
	// named browser: Options.Host).
	ProviderHost = "host"
	// ProviderNone turns the browser off.
	ProviderNone = "none"
)

// Limits of the browser tool.
const (
	// LoadTimeout bounds a navigation, up to the page's load event.
	LoadTimeout = 30 * time.Second
	// actionTimeout bounds a click, a typing or a read.
	actionTimeout = 10 * time.Second
	// DefaultTextChars is how much of a page read returns by default.
	DefaultTextChars = 20_000
	// MaxTextChars is the largest maxChars a read may ask for.
	MaxTextChars = 100_000
	// MaxScreenshotBytes is the largest screenshot returned: the models'
	// image inputs take up to about 5 MB.
	MaxScreenshotBytes = 4 << 20
	// DefaultIdleTimeout ends a browser no call used for that long.
	DefaultIdleTimeout = 10 * time.Minute
)

// DefaultChromium names the executables looked up on PATH when no path is
// configured, Debian's first.
var DefaultChromium = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Options configures the browser tool.
type Options struct {
	// Provider is the sessions' default provider: ProviderLocal (the
	// default when empty) or ProviderNone.
	Provider string
	// Chromium is the browser's executable, a path or a name on PATH;
	// empty looks up DefaultChromium.
	Chromium string
	// ProfileRoot holds the sessions' profiles (one fresh directory each);
	// profiles found there at start are a killed daemon's and are reaped.
	ProfileRoot string
	// AllowPrivate lets pages reach loopback, private and link-local
	// addresses (the daemon's --web-fetch-allow-private).
	AllowPrivate bool
	// IdleTimeout ends a session's browser after that long unused; 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Host finds the browser a client lent a session, for the host
	// provider (nil: host serves no session).
	Host HostBrowsers

	// control replaces the address rule (tests).
	control func(network, address string, c syscall.RawConn) error
}

// Validate reports every problem of o at once.
func (o Options) Validate() error {
	var problems []error
	switch o.Provider {
	case "", ProviderLocal, ProviderNone:
	default:
		problems = append(problems, fmt.Errorf("browser provider %q is not one of local, none", o.Provider))
	}
	if o.ProfileRoot == "" || !filepath.IsAbs(o.ProfileRoot) {
		problems = append(problems, fmt.Errorf("browser profile root %q is not an absolute path", o.ProfileRoot))
	}
	if o.IdleTimeout < 0 {
		problems = append(problems, fmt.Errorf("browser idle timeout %s is negative", o.IdleTimeout))
	}
	return errors.Join(problems...)
}

// Tool is the `browser` tool. It is safe for concurrent use; one session's
// calls run one at a time.
type Tool struct {
	tool.Args[args]

	opts Options

	mu        sync.Mutex
	closed    bool
	providers map[string]string // session → provider set by SetProvider
	host      HostBrowsers      // the browsers clients lend (provider host)
	sessions  map[string]*session
}

// session is one session's browser and what serialises its calls.
type session struct {
	mu    sync.Mutex // held by a call
	b     *local     // nil until the first call
	timer *time.Timer
	// ended: the browser ended and s left the map; a call that waited
	// for mu takes a new session.
	ended bool
}

// New returns the browser tool after reaping the profiles a killed daemon
// left under opts.ProfileRoot.
func New(opts Options) (*Tool, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Provider == "" {
		opts.Provider = ProviderLocal
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.control == nil && !opts.AllowPrivate {
		opts.control = tool.RefusePrivate
	}
	reap(opts.ProfileRoot)
	return &Tool{opts: opts, host: opts.Host, providers: map[string]string{}, sessions: map[string]*session{}}, nil
}

// args are the browser tool's arguments.
type args struct {
	Action   string  `json:"action" jsonschema:"enum=navigate,enum=read,enum=click,enum=type,enum=screenshot" jsonschema_description:"navigate (url), read (the page's text and an outline of its interactive elements with refs), click (ref or selector), type (ref or selector, text), screenshot (of the viewport)."`
	URL      string  `json:"url,omitempty" jsonschema_description:"navigate: an http or https URL."`
	Ref      string  `json:"ref,omitempty" jsonschema_description:"click, type: an element's ref from the outline read returns (e3)."`
	Selector string  `json:"selector,omitempty" jsonschema_description:"click, type: a CSS selector, when no ref is given."`
	Text     string  `json:"text,omitempty" jsonschema_description:"type: the text typed into the element, after what it holds; a final newline presses Enter."`
	Outline  *bool   `json:"outline,omitempty" jsonschema_description:"read: include the outline of interactive elements (default true)."`
	MaxChars float64 `json:"maxChars,omitempty" jsonschema:"type=integer,minimum=1,maximum=100000" jsonschema_description:"read: most characters of page text to return (default 20000)."`
}

// Name implements tool.Tool.
func (*Tool) Name() string { return "browser" }

// Tag implements tool.Tool.
func (*Tool) Tag() approval.Tag { return approval.TagNetwork }

// Description implements tool.Tool.
func (*Tool) Description() string {
	return "Drive a headless web browser kept for this session: navigate to a URL, read the page as text " +
		"with an outline of its links, buttons and fields (each with a ref such as e3), click or type into " +
		"an element by ref or CSS selector, and take a screenshot of the viewport (returned as an image). " +
		"Pages cannot reach loopback or private addresses."
}

// State implements tool.Stater: without a Chromium to start, and no
// session whose provider is host, the tool is inactive and calls fail with
// browser_provider_unavailable.
func (t *Tool) State() tool.State {
	t.mu.Lock()
	host := false
	for _, p := range t.providers {
		host = host || p == ProviderHost
	}
	t.mu.Unlock()
	// A session whose provider is host needs no Chromium (the state is the
	// daemon's, not a session's: a call of another session without one
	// fails when it runs).
	if t.opts.Provider == ProviderLocal && !host {
		if _, err := t.chromium(); err != nil {
			return tool.State{Reason: err.Error(), Code: errcode.BrowserProviderUnavailable}
		}
	}
	return tool.State{Active: true}
}

// chromium resolves the executable to start.
func (t *Tool) chromium() (string, error) {
	if t.opts.Chromium != "" {
		p, err := exec.LookPath(t.opts.Chromium)
		if err != nil {
			return "", fmt.Errorf("the local browser provider has no Chromium: %s cannot be run (%v); install Chromium or set browser-chromium", t.opts.Chromium, err)
		}
		return p, nil
	}
	for _, name := range DefaultChromium {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the local browser provider has no Chromium: none of %s is on PATH; install Chromium or set browser-chromium", strings.Join(DefaultChromium, ", "))
}

// ErrHostUnavailable: the host provider has no browser lent.
var ErrHostUnavailable = errors.New("the session's browser provider is host, and no client lent it a browser: a WebSocket client lends one with tool.register (a tool named browser)")

// HostBrowsers finds the browser a client lent to a session (tool.Lent's
// HostBrowserOf): nil when none is.
type HostBrowsers func(sessionID, origin string) tool.Tool

// SetProvider chooses the provider of a session's browser (snowpea's
// session.setBrowserProvider). Changing it ends the session's browser.
func (t *Tool) SetProvider(sessionID, provider string) error {
	switch provider {
	case ProviderLocal, ProviderNone, ProviderHost:
	default:
		return errs.New(errcode.InvalidParams, "browser provider %q is not one of local, host, none", provider)
	}
	t.mu.Lock()
	t.providers[sessionID] = provider
	t.mu.Unlock()
	t.CloseSession(sessionID)
	return nil
}

// provider returns the session's provider.
func (t *Tool) provider(sessionID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.providers[sessionID]; ok {
		return p
	}
	return t.opts.Provider
}

// unavailable is the error of a call no provider can serve.
func unavailable(format string, a ...any) error {
	return errs.Wrap(errcode.BrowserProviderUnavailable, tool.ErrInactive, "browser is unavailable: "+format, a...)
}

// Run implements tool.Tool.
func (t *Tool) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a args
	if err := json.Unmarshal(call.Args, &a); err != nil {
		return tool.Result{}, errs.Wrap(errcode.InvalidParams, tool.ErrInvalidArgs, "browser: %v", err)
	}
	if res, bad := a.check(); bad {
		return res, nil
	}
	if p := t.provider(call.SessionID); p == ProviderHost {
		t.mu.Lock()
		h := t.host
		t.mu.Unlock()
		var lent tool.Tool
		if h != nil {
			lent = h(call.SessionID, call.Origin)
		}
		if lent == nil {
			return tool.Result{}, errs.Wrap(errcode.BrowserProviderUnavailable, tool.ErrInactive, "browser is unavailable: %v", ErrHostUnavailable)
		}
		return lent.Run(ctx, call)
	} else if p != ProviderLocal {
		return tool.Result{}, unavailable("this session's browser provider is %s", p)
	}
	var s *session
	for s == nil || s.ended {
		if s != nil {
			s.mu.Unlock()
		}
		var err error
		if s, err = t.session(call.SessionID); err != nil {
			return tool.Result{}, err
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	defer t.touch(call.SessionID, s)
	if s.b == nil {
		path, err := t.chromium()
		if err != nil {
			return tool.Result{}, unavailable("%v", err)
		}
		prx, err := newProxy(t.opts.control)
		if err != nil {
			return tool.Result{}, unavailable("its proxy cannot listen: %v", err)
		}
		b, err := startLocal(path, t.opts.ProfileRoot, prx)
		if err != nil {
			prx.close()
			return tool.Result{}, unavailable("Chromium (%s) did not start: %v", path, err)
		}
		s.b = b
	}
	res := s.b.do(ctx, a, call)
	if refused := s.b.proxy.takeRefused(); len(refused) > 0 {
		res.Output += fmt.Sprintf("\n\nRefused (not public addresses; the daemon allows only public ones): %s", strings.Join(dedupe(refused), ", "))
	}
	return res, nil
}

// check refuses arguments an action cannot use.
func (a args) check() (tool.Result, bool) {
	switch a.Action {
	case "navigate":
		if a.URL == "" {
			return tool.Failed("navigate needs url"), true
		}
	case "click", "type":
		if (a.Ref == "") == (a.Selector == "") {
			return tool.Failed("%s needs exactly one of ref and selector", a.Action), true
		}
		if a.Action == "type" && a.Text == "" {
			return tool.Failed("type needs text"), true
		}
	case "read", "screenshot":
	default:
		return tool.Failed("action %q is not one of navigate, read, click, type, screenshot", a.Action), true
	}
	return tool.Result{}, false
}

// session returns the session's entry, making it on first use.
func (t *Tool) session(id string) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, unavailable("the daemon is stopping")
	}
	s := t.sessions[id]
	if s == nil {
		s = &session{}
		t.sessions[id] = s
	}
	return s, nil
}

// touch restarts the session's idle timer after a call.
func (t *Tool) touch(id string, s *session) {
	if s.b == nil {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(t.opts.IdleTimeout, func() { t.end(id, s) })
}

// CloseSession ends the session's browser, if it has one, and removes its
// profile. The daemon calls it when the session closes.
func (t *Tool) CloseSession(id string) {
	t.mu.Lock()
	s := t.sessions[id]
	t.mu.Unlock()
	if s != nil {
		t.end(id, s)
	}
}

// end ends s's browser once no call runs on it.
func (t *Tool) end(id string, s *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.b != nil {
		s.b.close()
		s.b = nil
	}
	s.ended = true
	t.mu.Lock()
	if t.sessions[id] == s {
		delete(t.sessions, id)
	}
	t.mu.Unlock()
}

// Close ends every browser; later calls fail with
// browser_provider_unavailable. The daemon calls it when it stops.
func (t *Tool) Close() {
	t.mu.Lock()
	t.closed = true
	sessions := t.sessions
	t.sessions = map[string]*session{}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for id, s := range sessions {
		wg.Go(func() { t.end(id, s) })
	}
	wg.Wait()
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
