package ws

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// ErrOriginRefused is returned by CheckOrigin (wrapped) for an Origin the
// policy does not allow.
var ErrOriginRefused = errors.New("origin refused")

// CheckOrigin applies the origin policy to r. A request without Origin (a
// program, not a web page) passes. A page passes when its origin and the
// request's Host are both loopback (localhost, *.localhost, 127.0.0.0/8,
// ::1) with the same port, or when it matches an entry of allowed: an entry
// with "://" is matched against scheme://host[:port], any other entry
// against host[:port]; entries are path.Match patterns, compared without
// case ("*" allows every page). Anything else fails with ErrOriginRefused:
// without this a web page the user visits could drive the daemon (and DNS
// rebinding defeats a plain same-origin check, so Host alone proves nothing).
func CheckOrigin(r *http.Request, allowed []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		if matchesAny(allowed, strings.ToLower(origin), strings.ToLower(origin)) {
			return nil // e.g. "null" explicitly allowed
		}
		return fmt.Errorf("%w: Origin %q is not an http(s) origin", ErrOriginRefused, origin)
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Host)
	if matchesAny(allowed, host, scheme+"://"+host) {
		return nil
	}
	if sameLoopbackEndpoint(scheme, host, strings.ToLower(r.Host)) {
		return nil
	}
	return fmt.Errorf("%w: Origin %q may not use this daemon (allow it with --allow-origin)", ErrOriginRefused, origin)
}

func matchesAny(patterns []string, host, full string) bool {
	for _, p := range patterns {
		p = strings.ToLower(strings.TrimRight(p, "/"))
		target := host
		if strings.Contains(p, "://") {
			target = full
		}
		if ok, err := path.Match(p, target); err == nil && ok {
			return true
		}
	}
	return false
}

// sameLoopbackEndpoint reports whether an origin (scheme, host[:port]) and a
// request Host name the same port on loopback addresses.
func sameLoopbackEndpoint(scheme, originHost, requestHost string) bool {
	defaultPort := "80"
	if scheme == "https" {
		defaultPort = "443"
	}
	oh, op := splitHostPort(originHost, defaultPort)
	rh, rp := splitHostPort(requestHost, "80")
	return op == rp && isLoopback(oh) && isLoopback(rh)
}

func splitHostPort(hostport, defaultPort string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.Trim(hostport, "[]"), defaultPort
}

func isLoopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
