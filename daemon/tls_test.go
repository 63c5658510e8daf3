package daemon

import (
	"crypto/x509"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/internal/testcert"
)

// TestCertReload: a certificate rewritten in place is served from the next
// handshake on; a pair that does not load keeps the previous certificate.
func TestCertReload(t *testing.T) {
	old := recheck
	recheck = 0
	t.Cleanup(func() { recheck = old })
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := testcert.Write(t, certFile, keyFile)
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		t.Helper()
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	if got := serial(); got != first.String() {
		t.Fatalf("serving %s, want %s", got, first)
	}
	second := testcert.Write(t, certFile, keyFile)
	if got := serial(); got != second.String() {
		t.Fatalf("after the rewrite serving %s, want %s", got, second)
	}
	// A key that does not match: the previous pair stays.
	testcert.Write(t, filepath.Join(dir, "other.pem"), keyFile)
	if got := serial(); got != second.String() {
		t.Fatalf("with a mismatched key serving %s, want %s still", got, second)
	}
	if _, err := newCertReloader(filepath.Join(dir, "none.pem"), keyFile, nil); err == nil {
		t.Fatal("a missing certificate file loaded")
	}
}

// TestNonLoopbackNeedsTLS: a non-loopback host without TLS is refused with
// a message naming the flags, unless --insecure-no-tls.
func TestNonLoopbackNeedsTLS(t *testing.T) {
	base := Config{Home: t.TempDir()}.WithDefaults()
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string // "" = valid
	}{
		{"loopback", func(c *Config) {}, ""},
		{"ipv6 loopback", func(c *Config) { c.Host = "::1" }, ""},
		{"any address", func(c *Config) { c.Host = "0.0.0.0" }, "--tls-cert and --tls-key"},
		{"a LAN address", func(c *Config) { c.Host = "192.168.1.10" }, "--insecure-no-tls"},
		{"insecure on purpose", func(c *Config) { c.Host = "0.0.0.0"; c.InsecureNoTLS = true }, ""},
		{"with TLS", func(c *Config) { c.Host = "0.0.0.0"; c.TLSCert, c.TLSKey = "c.pem", "k.pem" }, ""},
		{"cert without key", func(c *Config) { c.TLSCert = "c.pem" }, "give both"},
		{"ca without TLS", func(c *Config) { c.TLSCA = "ca.pem" }, "tls-ca: only with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mut(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
