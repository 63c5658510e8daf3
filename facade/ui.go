package facade

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trellis-run/trellis/facade/rest"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/ws"
	"github.com/trellis-run/trellis/ui"
)

// The web console's login: `trellis ui` (holding the token) asks for a
// one-time code and opens /ui/#login=CODE; the page trades the code for a
// session cookie and then fetches the token into memory for system.hello.
// A person with an API key instead types it on the login page: a key the
// runtime accepts is sealed into the cookie, and /ui/token gives it back.
// Neither appears in a URL; the cookie is HttpOnly, SameSite=Strict and
// only good for /ui/token.
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
	// checkKey says why the runtime refuses an API key (nil: it accepts it).
	checkKey func(ctx context.Context, key string) error
	mu       sync.Mutex
	codes    map[string]time.Time // code → expiry
	now      func() time.Time
}

// uiRoutes adds the console and its login exchange to mux.
func (s *Server) uiRoutes(mux *http.ServeMux) {
	l := &uiLogin{token: s.opts.Token, allowed: s.opts.AllowOrigins, codes: map[string]time.Time{}, now: time.Now, checkKey: s.checkKey}
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
		uiError(w, http.StatusUnauthorized, errcode.Unauthorized, "POST /ui/login-code needs Authorization: Bearer <token> (daemon.json's token)")
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
		uiError(w, http.StatusTooManyRequests, errcode.Overloaded, "too many unused console login codes; wait "+uiCodeTTL.String()+" for them to expire")
		return
	}
	exp := now.Add(uiCodeTTL)
	l.codes[code] = exp
	l.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"code": code, "path": "/ui/#login=" + code, "expiresAt": exp.UTC().Format(time.RFC3339)})
}

// checkKey asks the runtime whether it accepts key (a system.health call
// made for it): nil when it does.
func (s *Server) checkKey(ctx context.Context, key string) error {
	if s.opts.Conn == nil {
		return errors.New("this daemon's console cannot check API keys")
	}
	ctx = metadata.AppendToOutgoingContext(ctx, rest.MDOnBehalfOf, key)
	_, err := trellisv1.NewSystemServiceClient(s.opts.Conn).Health(ctx, &trellisv1.HealthRequest{})
	return err
}

// login answers POST /ui/login {"code"} (a valid, unused code from trellis
// ui) or {"key"} (an API key the runtime accepts): either sets the session
// cookie.
func (l *uiLogin) login(w http.ResponseWriter, r *http.Request) {
	if !l.pageRequest(w, r) {
		return
	}
	if mt := r.Header.Get("Content-Type"); !strings.HasPrefix(mt, "application/json") {
		// A cross-site form cannot send JSON without a CORS preflight, which is never answered.
		uiError(w, http.StatusUnsupportedMediaType, errcode.InvalidParams, "POST /ui/login takes application/json")
		return
	}
	var body struct {
		Code string `json:"code"`
		Key  string `json:"key"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, uiMaxLoginBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || (body.Code == "") == (body.Key == "") {
		uiError(w, http.StatusBadRequest, errcode.InvalidParams, `POST /ui/login takes {"code": "<one-time code from trellis ui>"} or {"key": "<API key>"}`)
		return
	}
	if body.Key != "" {
		l.loginWithKey(w, r, body.Key)
		return
	}
	l.mu.Lock()
	exp, ok := l.codes[body.Code]
	delete(l.codes, body.Code) // one use, whatever the outcome
	l.mu.Unlock()
	if !ok || l.now().After(exp) {
		uiError(w, http.StatusUnauthorized, errcode.Unauthorized, "this login link was used already or has expired; run `trellis ui` for a new one")
		return
	}
	l.setCookie(w, r, l.sign(l.now().Add(uiCookieTTL), randomString(16)))
}

// loginWithKey sets a session cookie holding key, sealed, once the runtime
// accepted it.
func (l *uiLogin) loginWithKey(w http.ResponseWriter, r *http.Request, key string) {
	if err := l.checkKey(r.Context(), key); err != nil {
		msg := "this API key is not accepted: it is unknown, revoked or expired (ask an admin for a key: trellis keys create)"
		if st, ok := status.FromError(err); !ok || st.Code() != codes.Unauthenticated {
			msg = "the API key could not be checked: " + err.Error()
		}
		uiError(w, http.StatusUnauthorized, errcode.Unauthorized, msg)
		return
	}
	sealed, err := l.seal(l.now().Add(uiCookieTTL), key)
	if err != nil {
		uiError(w, http.StatusInternalServerError, errcode.Internal, "sealing the session cookie: "+err.Error())
		return
	}
	l.setCookie(w, r, sealed)
}

func (l *uiLogin) setCookie(w http.ResponseWriter, r *http.Request, value string) {
	http.SetCookie(w, &http.Cookie{
		Name: uiCookieName, Value: value,
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
	if err == nil {
		if key, ok := l.open(c.Value); ok {
			writeJSON(w, http.StatusOK, map[string]string{"token": key})
			return
		}
		if l.verify(c.Value) {
			writeJSON(w, http.StatusOK, map[string]string{"token": l.token})
			return
		}
	}
	uiError(w, http.StatusUnauthorized, errcode.Unauthorized, "not logged in to the console; log in with an API key, or run `trellis ui` for a login link")
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
		uiError(w, http.StatusForbidden, errcode.Unauthorized, "the console's login endpoints answer only the console's own page")
	case ws.CheckOrigin(r, l.allowed) != nil:
		uiError(w, http.StatusForbidden, errcode.Unauthorized, "Origin "+r.Header.Get("Origin")+" may not use the console's login endpoints")
	case ws.CheckOrigin(selfOrigin, l.allowed) != nil:
		uiError(w, http.StatusForbidden, errcode.Unauthorized, "the console answers on loopback addresses only (Host "+r.Host+")")
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

// keyCookiePrefix starts the cookie of a key login: keyCookiePrefix, then
// base64url(nonce, AES-GCM(exp.key)).
const keyCookiePrefix = "k."

// seal returns a cookie value holding key until exp, encrypted with a key
// derived from the token (a new token logs every console out).
func (l *uiLogin) seal(exp time.Time, key string) (string, error) {
	aead, err := l.aead()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	plain := strconv.FormatInt(exp.Unix(), 10) + "." + key
	return keyCookiePrefix + base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(plain), nil)), nil
}

// open returns the key a cookie value of seal holds, if it is one and has
// not expired.
func (l *uiLogin) open(value string) (string, bool) {
	raw, ok := strings.CutPrefix(value, keyCookiePrefix)
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	aead, aerr := l.aead()
	if err != nil || aerr != nil || len(b) < aead.NonceSize() {
		return "", false
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], nil)
	if err != nil {
		return "", false
	}
	expStr, key, ok := strings.Cut(string(plain), ".")
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if !ok || err != nil || l.now().Unix() >= exp || key == "" {
		return "", false
	}
	return key, true
}

func (l *uiLogin) aead() (cipher.AEAD, error) {
	k := hmac.New(sha256.New, []byte(l.token))
	k.Write([]byte("trellis console key cookie v1"))
	block, err := aes.NewCipher(k.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
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
