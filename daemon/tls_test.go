package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"os"
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
	r, err := newCertReloader(certFile, keyFile, "tls", slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	if _, err := newCertReloader(filepath.Join(dir, "none.pem"), keyFile, "tls", nil); err == nil {
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
		{"cluster certificates without TLS", func(c *Config) { c.ClusterCA, c.ClusterCert, c.ClusterKey = "ca.pem", "c.pem", "k.pem" }, "cluster-key: only with tls-cert"},
		{"cluster certificate without its CA", func(c *Config) {
			c.TLSCert, c.TLSKey, c.ClusterCert, c.ClusterKey = "c.pem", "k.pem", "cc.pem", "ck.pem"
		}, "give all three"},
		{"a cluster daemon on every interface without --advertise", func(c *Config) {
			c.Host, c.InsecureNoTLS, c.Store = "0.0.0.0", true, "postgres://u@db:5432/t"
		}, "--advertise host:port"},
		{"a cluster daemon on every interface with --advertise", func(c *Config) {
			c.Host, c.InsecureNoTLS, c.Store, c.Advertise = "0.0.0.0", true, "postgres://u@db:5432/t", "trellis-1:8421"
		}, ""},
		{"a wildcard --advertise", func(c *Config) { c.Advertise = "[::]:8421" }, "not a wildcard"},
		{"a loopback cluster daemon", func(c *Config) { c.Store = "postgres://u@db:5432/t" }, ""},
		{"mutual TLS", func(c *Config) {
			c.Host = "0.0.0.0"
			c.TLSCert, c.TLSKey, c.ClusterCA, c.ClusterCert, c.ClusterKey = "c.pem", "k.pem", "ca.pem", "cc.pem", "ck.pem"
		}, ""},
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

// TestClusterTLS: with cluster certificates the gRPC listener serves the
// cluster certificate to the daemons (clusterALPN) and --tls-cert's to
// everyone else; it verifies a client certificate when one is given,
// against the cluster's CA only; the forwarding side checks the owner's
// certificate against the cluster's CA, which is read again when its file
// changes.
func TestClusterTLS(t *testing.T) {
	old := recheck
	recheck = 0
	t.Cleanup(func() { recheck = old })
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	publicSerial := testcert.Write(t, path("public.pem"), path("public-key.pem"))
	ca := testcert.NewCA(t, "cluster CA", path("ca.pem"))
	clusterSerial := ca.Issue(t, "daemon a", path("a.pem"), path("a-key.pem"))
	ca.Issue(t, "daemon b", path("b.pem"), path("b-key.pem"))
	other := testcert.NewCA(t, "another CA", path("other-ca.pem"))
	other.Issue(t, "stranger", path("x.pem"), path("x-key.pem"))

	// A cluster certificate the CA did not sign, or one that cannot
	// authenticate a client, is refused at start.
	for _, tc := range []struct{ cert, key, want string }{
		{path("x.pem"), path("x-key.pem"), "cannot authenticate this daemon"},
		{path("public.pem"), path("public-key.pem"), "cannot authenticate this daemon"},
	} {
		_, err := newClusterCerts(Config{ClusterCA: path("ca.pem"), ClusterCert: tc.cert, ClusterKey: tc.key}, log)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("cluster certificate %s: %v, want %q", tc.cert, err, tc.want)
		}
	}
	certs, err := newCertReloader(path("public.pem"), path("public-key.pem"), "tls", log)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := newClusterCerts(Config{ClusterCA: path("ca.pem"), ClusterCert: path("a.pem"), ClusterKey: path("a-key.pem")}, log)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{certs: certs, cluster: ca2}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", d.grpcServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type seen struct {
		verified bool
		err      error
	}
	seenc := make(chan seen, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			err = tc.Handshake()
			seenc <- seen{verified: err == nil && len(tc.ConnectionState().VerifiedChains) > 0, err: err}
			c.Close()
		}
	}()
	dial := func(cfg *tls.Config) (*tls.ConnectionState, seen, error) {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		s := <-seenc
		if err != nil {
			return nil, s, err
		}
		defer c.Close()
		st := c.ConnectionState()
		return &st, s, nil
	}
	peerSerial := func(st *tls.ConnectionState) string { return st.PeerCertificates[0].SerialNumber.String() }

	// A client (no certificate, h2 only) gets --tls-cert's certificate and
	// is not a daemon.
	st, s, err := dial(&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil || s.err != nil {
		t.Fatalf("plain client: %v / %v", err, s.err)
	}
	if peerSerial(st) != publicSerial.String() || s.verified {
		t.Fatalf("plain client served %s (want the public %s), verified %v", peerSerial(st), publicSerial, s.verified)
	}
	// Another daemon of the cluster: served the cluster certificate, which
	// it verifies, and verified itself.
	b, err := newClusterCerts(Config{ClusterCA: path("ca.pem"), ClusterCert: path("b.pem"), ClusterKey: path("b-key.pem")}, log)
	if err != nil {
		t.Fatal(err)
	}
	bcfg := b.clientTLS()
	bcfg.ServerName = "127.0.0.1"
	bcfg.NextProtos = append(bcfg.NextProtos, "h2")
	st, s, err = dial(bcfg)
	if err != nil || s.err != nil {
		t.Fatalf("cluster peer: %v / %v", err, s.err)
	}
	if peerSerial(st) != clusterSerial.String() || !s.verified || st.NegotiatedProtocol != "h2" {
		t.Fatalf("cluster peer served %s (want the cluster's %s), verified %v, ALPN %q", peerSerial(st), clusterSerial, s.verified, st.NegotiatedProtocol)
	}
	// A client certificate of another CA fails the handshake (sent
	// whatever CAs the server asks for).
	x, err := tls.LoadX509KeyPair(path("x.pem"), path("x-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	xcfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{clusterALPN, "h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &x, nil }}
	if _, s, err = dial(xcfg); s.err == nil {
		t.Fatalf("a certificate of another CA was accepted (client: %v)", err)
	}
	// The owner's certificate is checked against the cluster's CA: with
	// the CA file replaced by another CA's, the daemon's certificate is
	// refused on the next connection.
	if err := os.Rename(path("other-ca.pem"), path("ca.pem")); err != nil {
		t.Fatal(err)
	}
	if _, _, err = dial(bcfg); err == nil || !strings.Contains(err.Error(), "no certificate of this cluster's CA") {
		t.Fatalf("after the CA changed: %v, want the owner's certificate refused", err)
	}
}
