package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate of two PEM files, read again when
// either file changes (size or modification time), so that a renewed
// certificate is served from the next handshake on without a restart. A
// file that fails to load keeps the previous certificate (and is logged).
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and times when cert was loaded
	checked time.Time
}

// recheck bounds how often the files are looked at (stat) under a storm
// of handshakes.
var recheck = time.Second

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS: load --tls-cert %s and --tls-key %s: %w", certFile, keyFile, err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

func (r *certReloader) fileStamp() (string, error) {
	var stamp string
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return stamp, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < recheck {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp, err := r.fileStamp()
	if err != nil || stamp == r.stamp {
		if err != nil {
			r.log.Warn("TLS certificate files unreadable; serving the loaded certificate", "err", err)
		}
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Between the writes of a renewal the pair may not match yet: the
		// next handshake tries again.
		r.log.Warn("TLS certificate changed but does not load; serving the previous one", "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// serverTLS is the listeners' TLS configuration for one ALPN protocol
// (h2 for gRPC, http/1.1 for WebSocket and REST).
func (r *certReloader) serverTLS(proto string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{proto}}
}

// clusterTLS is the client configuration forwarding uses to reach the
// other daemons of a cluster: their certificates are checked against
// caFile ("" = the system's roots).
func clusterTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("TLS: --tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS: --tls-ca %s holds no PEM certificate", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
