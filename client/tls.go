package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/trellis-run/trellis/daemonfile"
)

// BaseURLs returns the daemon's HTTP and WebSocket base URLs on loopback
// (https:// and wss:// when it serves TLS) and the HTTP client to reach
// them with.
func BaseURLs(info daemonfile.Info) (httpBase, wsBase string, hc *http.Client, err error) {
	port := strconv.Itoa(info.Port)
	if !info.TLS {
		return "http://127.0.0.1:" + port, "ws://127.0.0.1:" + port, http.DefaultClient, nil
	}
	cfg, err := PinnedTLS(info.TLSCert)
	if err != nil {
		return "", "", nil, err
	}
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false}}
	return "https://127.0.0.1:" + port, "wss://127.0.0.1:" + port, hc, nil
}

// PinnedTLS trusts exactly the certificates of a PEM file (the daemon's own
// --tls-cert, which daemon.json names): the chain the daemon presents must
// lead to one of them. The host name is not checked, since the file itself
// is the trust (a certificate for trellis.example.com is fine on 127.0.0.1).
func PinnedTLS(certFile string) (*tls.Config, error) {
	if certFile == "" {
		return nil, errors.New("the daemon serves TLS but daemon.json names no certificate file")
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's TLS certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the daemon's TLS certificate file %s holds no PEM certificate", certFile)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified below, against pool, without the host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the daemon presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter})
			if err != nil {
				return fmt.Errorf("the daemon's certificate is not the one in %s: %w", certFile, err)
			}
			return nil
		},
	}, nil
}
