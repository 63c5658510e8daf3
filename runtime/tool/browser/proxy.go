package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"syscall"
	"time"

	"github.com/trellis-run/trellis/runtime/tool"
)

// dialTimeout bounds one connection the proxy opens for the browser.
const dialTimeout = 15 * time.Second

// proxy is the only way a browser reaches the network: Chromium sends every
// request to it (plain HTTP forwarded, HTTPS and WebSockets tunnelled with
// CONNECT), and it dials with control, which refuses addresses the way
// web_fetch does. The check runs on the address dialled, after DNS, so a
// name that resolves (or re-resolves) to a private address is refused too,
// and it covers what request interception in the page would miss:
// out-of-process frames, workers and WebSockets.
type proxy struct {
	ln     net.Listener
	srv    *http.Server
	dialer *net.Dialer
	fwd    *httputil.ReverseProxy

	mu      sync.Mutex
	refused []string // hosts refused since the last takeRefused
	tunnels map[net.Conn]struct{}
}

// newProxy starts a proxy on a loopback port; control nil dials anything.
func newProxy(control func(network, address string, c syscall.RawConn) error) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, dialer: &net.Dialer{Timeout: dialTimeout, Control: control}, tunnels: map[net.Conn]struct{}{}}
	p.fwd = &httputil.ReverseProxy{
		// A proxied request's URL is already absolute.
		Rewrite:   func(r *httputil.ProxyRequest) { r.Out.Host = r.In.Host },
		Transport: &http.Transport{DialContext: p.dialer.DialContext, ResponseHeaderTimeout: time.Minute},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.fail(w, r.Host, err)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: dialTimeout}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// addr is the proxy's host:port, for Chromium's --proxy-server.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			http.Error(w, "the browser's proxy forwards absolute http URLs only", http.StatusBadRequest)
			return
		}
		p.fwd.ServeHTTP(w, r)
		return
	}
	upstream, err := p.dialer.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		p.fail(w, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, _, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	p.track(client, upstream)
	go p.relay(client, upstream)
}

// relay copies both ways until either side ends.
func (p *proxy) relay(client, upstream net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, upstream); done <- struct{}{} }()
	<-done
	client.Close()
	upstream.Close()
	<-done
	p.mu.Lock()
	delete(p.tunnels, client)
	delete(p.tunnels, upstream)
	p.mu.Unlock()
}

func (p *proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
}

// fail answers a request whose connection could not be made, noting the
// refused ones for the tool's output.
func (p *proxy) fail(w http.ResponseWriter, host string, err error) {
	if errors.Is(err, tool.ErrPrivateAddress) {
		p.mu.Lock()
		p.refused = append(p.refused, host)
		p.mu.Unlock()
		http.Error(w, fmt.Sprintf("refused by trellis: %s: %v", host, err), http.StatusForbidden)
		return
	}
	http.Error(w, fmt.Sprintf("%s: %v", host, err), http.StatusBadGateway)
}

// takeRefused returns the hosts refused since the last call.
func (p *proxy) takeRefused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.refused
	p.refused = nil
	return r
}

// close stops the proxy and ends its tunnels, which the server's Close
// does not reach once hijacked.
func (p *proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	p.fwd.Transport.(*http.Transport).CloseIdleConnections()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.tunnels {
		c.Close()
	}
}
