package facade

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/ui"
)

// The web console's login: `trellis ui` (holding the token) asks for a
// one-time code and opens /ui/#login=CODE; the page trades the code for a
// session cookie and then fetches the token into memory for system.hello.
// The token never appears in a URL; the cookie is HttpOnly, SameSite=Strict
// and only good for /ui/token.
const (
	uiCodeTTL      = 2 * time.Minute
	uiMaxCodes     = 64
	uiCookieName   = "trellis_console"
	uiCookieTTL    = 12 * time.Hour
	uiMaxLoginBody = 4 << 10
)

// uiLogin holds the outstanding one-time codes. The session cookie is
// stateless (an HMAC keyed by the token), so it survives a daemon restart
// as long as the token does.
type uiLogin struct {
	token   string
	allowed []string
	mu      sync.Mutex
	codes   map[string]time.Time // code → expiry
	now     func() time.Time
}

// uiRoutes adds the console and its login exchange to mux.
func (s *Server) uiRoutes(mux *http.ServeMux) {
	l := &uiLogin{token: s.opts.Token, allowed: s.opts.AllowOrigins, codes: map[string]time.Time{}, now: time.Now}
	mux.Handle("GET /ui/", uiStatic(ui.Assets()))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("POST /ui/login-code", l.newCode)
	mux.HandleFunc("POST /ui/login", l.login)
	mux.HandleFunc("GET /ui/token", l.tokenForCookie)
	mux.HandleFunc("POST /ui/logout", l.logout)
}

// uiStatic serves the embedded console with headers that keep it to itself:
// no framing, scripts and connections to this origin only.
func uiStatic(files fs.FS) http.Handler {
	fileServer := http.FileServerFS(files)
	return http.StripPrefix("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path != "/" {
			if _, err := fs.Stat(files, strings.TrimPrefix(path.Clean(r.URL.Path), "/")); err != nil {
				http.NotFound(w, r)
				return
			}
		}
		fileServer.ServeHTTP(w, r)
	}))
}

// newCode answers POST /ui/login-code (Bearer token) with a one-time login
// code valid for uiCodeTTL.
func (l *uiLogin) newCode(w http.ResponseWriter, r *http.Request) {
	if !bearerOK(r, l.token) {
		uiError(w, http.StatusUnauthorized, errcode.CodeUnauthorized, "POST /ui/login-code needs Authorization: Bearer <token> (daemon.json's token)")
		return
	}
	code := randomString(32)
	now := l.now()
	l.mu.Lock()
	for c, exp := range l.codes {
		if now.After(exp) {
			delete(l.codes, c)
		}
	}
	if len(l.codes) >= uiMaxCodes {
		l.mu.Unlock()
		uiError(w, http.StatusTooManyRequests, errcode.CodeOverloaded, "too many unused console login codes; wait "+uiCodeTTL.String()+" for them to expire")
		return
	}
	exp := now.Add(uiCodeTTL)
	l.codes[code] = exp
	l.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"code": code, "path": "/ui/#login=" + code, "expiresAt": exp.UTC().Format(time.RFC3339)})
}

// login answers POST /ui/login {"code"}: a valid, unused code sets the
// session cookie.
func (l *uiLogin) login(w http.ResponseWriter, r *http.Request) {
	if !l.pageRequest(w, r) {
		return
	}
	if mt := r.Header.Get("Content-Type"); !strings.HasPrefix(mt, "application/json") {
		// A cross-site form cannot send JSON without a CORS preflight, which is never answered.
		uiError(w, http.StatusUnsupportedMediaType, errcode.CodeInvalidParams, "POST /ui/login takes application/json")
		return
	}
	var body struct {
		Code string `json:"code"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, uiMaxLoginBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Code == "" {
		uiError(w, http.StatusBadRequest, errcode.CodeInvalidParams, `POST /ui/login takes {"code": "<one-time code from trellis ui>"}`)
		return
	}
	l.mu.Lock()
	exp, ok := l.codes[body.Code]
	delete(l.codes, body.Code) // one use, whatever the outcome
	l.mu.Unlock()
	if !ok || l.now().After(exp) {
		uiError(w, http.StatusUnauthorized, errcode.CodeUnauthorized, "this login link was used already or has expired; run `trellis ui` for a new one")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: uiCookieName, Value: l.sign(l.now().Add(uiCookieTTL), randomString(16)),
		Path: "/ui/", MaxAge: int(uiCookieTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

// tokenForCookie answers GET /ui/token: with a valid session cookie, the
// token the page keeps in memory for system.hello.
func (l *uiLogin) tokenForCookie(w http.ResponseWriter, r *http.Request) {
	if !l.pageRequest(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	c, err := r.Cookie(uiCookieName)
	if err != nil || !l.verify(c.Value) {
		uiError(w, http.StatusUnauthorized, errcode.CodeUnauthorized, "not logged in to the console; run `trellis ui` for a login link")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": l.token})
}

// logout answers POST /ui/logout by clearing the cookie.
func (l *uiLogin) logout(w http.ResponseWriter, r *http.Request) {
	if !l.pageRequest(w, r) {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// pageRequest refuses requests that do not come from the console's own
// origin: a foreign Origin, a cross-site fetch, or a Host that is not this
// daemon's loopback address (DNS rebinding).
func (l *uiLogin) pageRequest(w http.ResponseWriter, r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	selfOrigin := &http.Request{Host: r.Host, Header: http.Header{"Origin": {"http://" + r.Host}}}
	switch {
	case site != "" && site != "same-origin" && site != "none":
		uiError(w, http.StatusForbidden, errcode.CodeUnauthorized, "the console's login endpoints answer only the console's own page")
	case ws.CheckOrigin(r, l.allowed) != nil:
		uiError(w, http.StatusForbidden, errcode.CodeUnauthorized, "Origin "+r.Header.Get("Origin")+" may not use the console's login endpoints")
	case ws.CheckOrigin(selfOrigin, l.allowed) != nil:
		uiError(w, http.StatusForbidden, errcode.CodeUnauthorized, "the console answers on loopback addresses only (Host "+r.Host+")")
	default:
		return true
	}
	return false
}

// sign returns a cookie value good until exp: exp.nonce.mac.
func (l *uiLogin) sign(exp time.Time, nonce string) string {
	payload := strconv.FormatInt(exp.Unix(), 10) + "." + nonce
	return payload + "." + base64.RawURLEncoding.EncodeToString(l.mac(payload))
}

func (l *uiLogin) verify(value string) bool {
	i := strings.LastIndexByte(value, '.')
	if i < 0 {
		return false
	}
	payload, sig := value[:i], value[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, l.mac(payload)) {
		return false
	}
	expStr, _, ok := strings.Cut(payload, ".")
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	return err == nil && l.now().Unix() < exp
}

// mac keys the cookie's HMAC with a key derived from the token, so that a
// new token logs every console out.
func (l *uiLogin) mac(payload string) []byte {
	k := hmac.New(sha256.New, []byte(l.token))
	k.Write([]byte("trellis console cookie v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func bearerOK(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("crypto/rand failed: " + err.Error())) // the runtime guarantees it does not
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// uiError writes an error in the shape of the JSON-RPC error object.
func uiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "data": map[string]string{"code": code}}})
}
