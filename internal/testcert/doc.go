// Package testcert makes self-signed TLS certificates for tests: a
// certificate for 127.0.0.1 and localhost, written as PEM files.
package testcert
