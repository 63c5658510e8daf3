package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Limits of web_fetch.
const (
	// DefaultFetchBytes is how much of a body web_fetch returns by default.
	DefaultFetchBytes = 100_000
	// MaxFetchBytes is the largest maxBytes a call may ask for.
	MaxFetchBytes = 1 << 20
	// FetchTimeout bounds a whole fetch, redirects and body included.
	FetchTimeout = 30 * time.Second
	maxRedirects = 5
)

// webFetchArgs are the arguments of web_fetch.
type webFetchArgs struct {
	URL      string  `json:"url" jsonschema:"minLength=1" jsonschema_description:"An http or https URL."`
	MaxBytes float64 `json:"maxBytes,omitempty" jsonschema:"type=integer,minimum=1,maximum=1048576" jsonschema_description:"Most bytes of the body to return (default 100000)."`
}

// NewWebFetch returns web_fetch using client, or, when client is nil, a
// client with a 30 s timeout that refuses loopback, private and link-local
// addresses (see NewWebFetchWith). Either way redirects are limited to 5
// and to http and https.
func NewWebFetch(client *http.Client) Tool {
	return NewWebFetchWith(WebFetchOptions{Client: client})
}

// WebFetchOptions configures web_fetch.
type WebFetchOptions struct {
	// Client is used as is when set (tests); nil builds the guarded one.
	Client *http.Client
	// AllowPrivate lets the default client reach loopback, private
	// (RFC 1918, fc00::/7), link-local and CGNAT addresses; by default a
	// model cannot use web_fetch to reach the daemon, the LAN or a cloud
	// metadata service.
	AllowPrivate bool
}

// NewWebFetchWith returns the `web_fetch` tool, an HTTP GET of an http or
// https URL, configured by opts.
func NewWebFetchWith(opts WebFetchOptions) Tool {
	client := opts.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if !opts.AllowPrivate {
			// The check runs on the address actually dialled, after DNS,
			// so a name that resolves to a private address is refused too.
			d := &net.Dialer{Timeout: FetchTimeout, Control: RefusePrivate}
			tr.DialContext = d.DialContext
		}
		client = &http.Client{Timeout: FetchTimeout, Transport: tr}
	}
	c := &http.Client{Timeout: FetchTimeout}
	{
		cc := *client
		c = &cc
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to a %s URL refused", req.URL.Scheme)
		}
		return nil
	}
	return NewFunc("web_fetch", approval.TagNetwork,
		"Fetch a web page or API response with HTTP GET (http and https only). Returns the "+
			"status, content type and up to maxBytes of the body (default 100000, at most 1 MiB); "+
			"binary bodies are described, not shown.",
		webFetch{client: c}.run)
}

// webFetch runs web_fetch.
type webFetch struct{ client *http.Client }

func (w webFetch) run(ctx context.Context, call Call, args webFetchArgs) (Result, error) {
	limit := int64(DefaultFetchBytes)
	if args.MaxBytes > 0 {
		limit = int64(min(args.MaxBytes, MaxFetchBytes))
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		return Failed("%q is not a URL: %v", args.URL, err), nil
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return Failed("web_fetch fetches http and https URLs only, not %q", args.URL), nil
	}
	if u.Host == "" {
		return Failed("%q has no host", args.URL), nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Failed("%q cannot be fetched: %v", args.URL, err), nil
	}
	req.Header.Set("User-Agent", "trellis-web-fetch/1")
	req.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := w.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Failed("web_fetch was interrupted"), nil
		}
		return Failed("fetching %s failed: %v", args.URL, err), nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil && !errors.Is(err, io.EOF) {
		return Failed("reading the body of %s failed: %v", args.URL, err), nil
	}
	cut := int64(len(body)) > limit
	if cut {
		body = body[:limit]
	}

	ctype := resp.Header.Get("Content-Type")
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nStatus: %s\nContent-Type: %s\n\n", resp.Request.URL, resp.Status, ctype)
	if isTextual(ctype, body) {
		b.WriteString(strings.ToValidUTF8(string(body[:completeRunes(body)]), "\uFFFD"))
		if cut {
			fmt.Fprintf(&b, "\n[body cut at %d bytes; it is longer]", limit)
		}
	} else {
		size := fmt.Sprintf("%d bytes", len(body))
		if cut {
			size = fmt.Sprintf("more than %d bytes", limit)
		}
		fmt.Fprintf(&b, "[binary content (%s, %s) not shown]", http.DetectContentType(body), size)
	}
	res := Result{OK: true, Output: b.String()}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		res.OK = false
		res.Error = fmt.Sprintf("HTTP %s from %s", resp.Status, args.URL)
	}
	return res, nil
}

// cgnat is the shared address space of carrier-grade NAT (RFC 6598).
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// ErrPrivateAddress: web_fetch refused an address that is not public.
var ErrPrivateAddress = errors.New("address is not public")

// RefusePrivate is a net.Dialer Control that refuses non-public addresses:
// web_fetch's rule, which the browser tool's connections follow too.
func RefusePrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || cgnat.Contains(ip) {
		return fmt.Errorf("%w: %s is a loopback, private or link-local address (the daemon is started without --web-fetch-allow-private)", ErrPrivateAddress, ip)
	}
	return nil
}

// isTextual reports whether a body of content type ctype is text to show.
func isTextual(ctype string, body []byte) bool {
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil || mt == "" {
		return !isBinary(body[:min(len(body), sniffBytes)])
	}
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	for _, s := range []string{"json", "xml", "javascript", "ecmascript", "yaml", "toml", "csv", "x-www-form-urlencoded"} {
		if strings.Contains(mt, s) {
			return true
		}
	}
	return false
}

// SearchProvider answers web searches for web_search. A real provider (a
// search API) and a fake for tests implement it.
type SearchProvider interface {
	// Search returns up to limit results for query.
	Search(ctx context.Context, query string, limit int) ([]SearchHit, error)
}

// SearchHit is one web search result.
type SearchHit struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// searchResults is how many hits web_search asks for.
const searchResults = 8

// webSearchArgs are the arguments of WebSearch.
type webSearchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1" jsonschema_description:"What to search for."`
}

// WebSearch is the `web_search` tool. It is inactive, and calls fail with
// search_provider_unavailable, until a SearchProvider is set.
type WebSearch struct {
	Args[webSearchArgs]

	mu       sync.RWMutex
	provider SearchProvider
}

// NewWebSearch returns web_search answered by p (nil: inactive).
func NewWebSearch(p SearchProvider) *WebSearch { return &WebSearch{provider: p} }

// SetProvider configures (or, with nil, removes) the search provider.
func (w *WebSearch) SetProvider(p SearchProvider) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.provider = p
}

func (w *WebSearch) current() SearchProvider {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.provider
}

const noSearchProvider = "no search provider is configured; configure one to enable web_search"

// Name implements Tool.
func (*WebSearch) Name() string { return "web_search" }

// Tag implements Tool.
func (*WebSearch) Tag() approval.Tag { return approval.TagNetwork }

// Description implements Tool.
func (*WebSearch) Description() string {
	return "Search the web; returns titles, URLs and snippets. Use web_fetch to read a result."
}

// State implements Stater.
func (w *WebSearch) State() State {
	if w.current() == nil {
		return State{Active: false, Reason: noSearchProvider, Code: errcode.SearchProviderUnavailable}
	}
	return State{Active: true}
}

// Run implements Tool. Without a provider it returns a
// search_provider_unavailable error (Registry.Validate reports it first).
func (w *WebSearch) Run(ctx context.Context, call Call) (Result, error) {
	var args webSearchArgs
	if err := decodeArgs("web_search", call, &args); err != nil {
		return Result{}, err
	}
	p := w.current()
	if p == nil {
		return Result{}, errs.Wrap(errcode.SearchProviderUnavailable, ErrInactive, "web_search is inactive: %s", noSearchProvider)
	}
	hits, err := p.Search(ctx, args.Query, searchResults)
	if err != nil {
		if ctx.Err() != nil {
			return Failed("web_search was interrupted"), nil
		}
		return Failed("web search for %q failed: %v", args.Query, err), nil
	}
	if len(hits) == 0 {
		return Result{OK: true, Output: fmt.Sprintf("no results for %q", args.Query)}, nil
	}
	var b strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&b, "%d. %s\n   %s\n", i+1, h.Title, h.URL)
		if h.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", h.Snippet)
		}
	}
	return Result{OK: true, Output: strings.TrimSuffix(b.String(), "\n")}, nil
}
