// Package testcert makes TLS certificates for tests, written as PEM files:
// a self-signed certificate for 127.0.0.1 and localhost (Write), and a CA
// issuing certificates that serve and authenticate clients alike (NewCA),
// as the daemons of a cluster use for mutual TLS.
package testcert
