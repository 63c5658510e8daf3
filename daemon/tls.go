package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// certReloader serves the certificate of two PEM files, read again when
// either file changes (size or modification time), so that a renewed
// certificate is served from the next handshake on without a restart. A
// file that fails to load keeps the previous certificate (and is logged).
type certReloader struct {
	certFile, keyFile string
	flags             string // the flags naming the files, for messages
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and times when cert was loaded
	checked time.Time
}

// recheck bounds how often the files are looked at (stat) under a storm
// of handshakes.
var recheck = time.Second

// newCertReloader loads the pair; flags names the flags that gave the
// files ("tls" for --tls-cert and --tls-key, "cluster" for --cluster-cert
// and --cluster-key).
func newCertReloader(certFile, keyFile, flags string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, flags: flags, log: log}
	stamp, err := fileStamp(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS: load --%s-cert %s and --%s-key %s: %w", flags, certFile, flags, keyFile, err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

// fileStamp identifies the files' contents by their sizes, times and
// inodes.
func fileStamp(files ...string) (string, error) {
	var stamp string
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS: %w", err)
		}
		var ino uint64
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			ino = uint64(sys.Ino) // a file renamed in place of the old one
		}
		stamp += fmt.Sprintf("%d/%d/%d;", st.Size(), st.ModTime().UnixNano(), ino)
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
	stamp, err := fileStamp(r.certFile, r.keyFile)
	if err != nil || stamp == r.stamp {
		if err != nil {
			r.log.Warn("TLS certificate files unreadable; serving the loaded certificate", "flags", "--"+r.flags+"-cert", "err", err)
		}
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Between the writes of a renewal the pair may not match yet: the
		// next handshake tries again.
		r.log.Warn("TLS certificate changed but does not load; serving the previous one", "flags", "--"+r.flags+"-cert", "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// GetClientCertificate is tls.Config.GetClientCertificate: the cluster
// certificate a daemon presents to the daemons it forwards calls to.
func (r *certReloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.GetCertificate(nil)
}

// serverTLS is the HTTP listener's TLS configuration (ALPN http/1.1, for
// WebSocket and REST).
func (r *certReloader) serverTLS(proto string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{proto}}
}

// caReloader is the pool of a PEM file of CA certificates (--cluster-ca),
// read again when the file changes, as certReloader's pair is: a CA added
// to the file (during a rotation) is trusted from the next handshake on. A
// file that fails to load keeps the previous pool.
type caReloader struct {
	file string
	log  *slog.Logger

	mu      sync.Mutex
	pool    *x509.CertPool
	stamp   string
	checked time.Time
}

func newCAReloader(file string, log *slog.Logger) (*caReloader, error) {
	stamp, err := fileStamp(file)
	if err != nil {
		return nil, err
	}
	pool, err := loadCAs(file)
	if err != nil {
		return nil, err
	}
	return &caReloader{file: file, log: log, pool: pool, stamp: stamp, checked: time.Now()}, nil
}

func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS: --cluster-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS: --cluster-ca %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Pool returns the CAs, read again if the file changed.
func (r *caReloader) Pool() *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < recheck {
		return r.pool
	}
	r.checked = time.Now()
	stamp, err := fileStamp(r.file)
	if err != nil || stamp == r.stamp {
		if err != nil {
			r.log.Warn("--cluster-ca unreadable; trusting the CAs loaded before", "err", err)
		}
		return r.pool
	}
	pool, err := loadCAs(r.file)
	if err != nil {
		r.log.Warn("--cluster-ca changed but does not load; trusting the CAs loaded before", "err", err)
		return r.pool
	}
	r.pool, r.stamp = pool, stamp
	r.log.Info("cluster CAs reloaded", "ca", r.file)
	return r.pool
}

// clusterALPN is the ALPN protocol a daemon offers (besides h2) when it
// forwards a call: the gRPC listener then presents the cluster certificate
// rather than --tls-cert's, which clients check against other CAs.
const clusterALPN = "trellis-cluster"

// clusterCerts are a daemon's cluster credentials (--cluster-ca,
// --cluster-cert, --cluster-key): the daemons of a cluster authenticate
// each other with them, both ways.
type clusterCerts struct {
	cas   *caReloader
	certs *certReloader
}

func newClusterCerts(cfg Config, log *slog.Logger) (*clusterCerts, error) {
	cas, err := newCAReloader(cfg.ClusterCA, log)
	if err != nil {
		return nil, err
	}
	certs, err := newCertReloader(cfg.ClusterCert, cfg.ClusterKey, "cluster", log)
	if err != nil {
		return nil, err
	}
	c := &clusterCerts{cas: cas, certs: certs}
	// A certificate the cluster's own CA does not sign cannot authenticate
	// this daemon to the others: refused here rather than at every call.
	cert, _ := certs.GetCertificate(nil)
	if _, err := c.verify(cert.Certificate, x509.ExtKeyUsageClientAuth, ""); err != nil {
		return nil, fmt.Errorf("TLS: --cluster-cert %s cannot authenticate this daemon to the others (it needs the client authentication usage too): %w", cfg.ClusterCert, err)
	}
	if _, err := c.verify(cert.Certificate, x509.ExtKeyUsageServerAuth, ""); err != nil {
		return nil, fmt.Errorf("TLS: --cluster-cert %s cannot serve the other daemons (it needs the server authentication usage too): %w", cfg.ClusterCert, err)
	}
	return c, nil
}

// verify checks a certificate chain (leaf first, DER) against the cluster
// CAs for usage, and for host when it is not "".
func (c *clusterCerts) verify(chain [][]byte, usage x509.ExtKeyUsage, host string) ([][]*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("no certificate")
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		var err error
		if certs[i], err = x509.ParseCertificate(der); err != nil {
			return nil, err
		}
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	return certs[0].Verify(x509.VerifyOptions{Roots: c.cas.Pool(), Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
}

// grpcServerTLS is the gRPC listener's TLS configuration. Without cluster
// credentials it serves --tls-cert. With them it also verifies a client
// certificate when one is presented (tls.VerifyClientCertIfGiven) against
// the cluster CAs only: a verified certificate identifies a daemon of the
// cluster, while clients (CLI, SDK, grpcurl) present none and authenticate
// with their keys as before. A connection offering clusterALPN (the other
// daemons') is served the cluster certificate.
func (d *Daemon) grpcServerTLS() *tls.Config {
	if d.cluster == nil {
		return d.certs.serverTLS("h2")
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg := &tls.Config{
			MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
			GetCertificate: d.certs.GetCertificate,
			ClientAuth:     tls.VerifyClientCertIfGiven, ClientCAs: d.cluster.cas.Pool(),
		}
		if slices.Contains(hello.SupportedProtos, clusterALPN) {
			cfg.GetCertificate = d.cluster.certs.GetCertificate
		}
		return cfg, nil
	}}
}

// clientTLS is the configuration forwarding dials the other daemons with:
// it presents the cluster certificate and checks theirs (for the host of
// the address dialled) against the cluster CAs as they are now, so that a
// rotated CA file applies to new connections without a restart.
func (c *clusterCerts) clientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		NextProtos:           []string{clusterALPN},
		GetClientCertificate: c.certs.GetClientCertificate,
		// The chain is verified by VerifyConnection, against the CAs of
		// the moment (tls.Config.RootCAs would be fixed at dial time).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain := make([][]byte, len(cs.PeerCertificates))
			for i, pc := range cs.PeerCertificates {
				chain[i] = pc.Raw
			}
			if _, err := c.verify(chain, x509.ExtKeyUsageServerAuth, cs.ServerName); err != nil {
				return fmt.Errorf("the daemon at %s has no certificate of this cluster's CA (--cluster-ca): %w", cs.ServerName, err)
			}
			return nil
		},
	}
}
