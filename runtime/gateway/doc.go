// Package gateway binds chat platforms (webhook, Telegram) to agents and
// sessions: a message arriving on a bound channel becomes a prompt of the
// binding's session and the turn's answer is posted back.
//
// Credentials are named by reference, never stored: "env:NAME" reads the
// daemon's environment, "secret:NAME" reads the file
// <home>/secrets/gateway/NAME, which the operator places with mode 0600
// (for example `install -m 0600 /dev/stdin ~/.trellis/secrets/gateway/NAME`).
// A credential's value never appears in a result, an event or a log line.
//
// Inbound webhook messages arrive on a small HTTP receiver the service runs
// on a loopback address (Addr): POST /v1/gateway/webhook/{bindingId} with the
// header X-Trellis-Signature: sha256=<hex HMAC-SHA256 of the body keyed by
// the binding's credential>.
package gateway
