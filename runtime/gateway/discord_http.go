package gateway

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Discord's other way of delivering interactions: with an Interactions
// Endpoint URL set in the Developer Portal, Discord POSTs each interaction
// to it, signed with the application's Ed25519 key (X-Signature-Ed25519:
// hex signature of X-Signature-Timestamp + body), instead of sending it
// over the gateway. The receiver serves them at
// POST /v1/gateway/discord/{bindingId}/interactions (behind a public
// HTTPS proxy). A request whose signature does not verify against the
// application's public key, or whose timestamp is more than
// DiscordSignatureWindow away, is refused with 401 before its body is
// read as JSON: nothing runs. PING (type 1) is answered with PONG; a
// button click answers its approval as the gateway's does, in the HTTP
// answer (type 6, or an ephemeral type 4 saying why not).
//
// The public key (hex, "Public Key" on the application's General
// Information page) is read as the bot token is, from the reference with
// ".public_key" / "_PUBLIC_KEY" added: for a bare NAME the secret file
// NAME.public_key, else TRELLIS_<NAME>_PUBLIC_KEY, else
// <NAME>_PUBLIC_KEY; for secret:NAME the secret file NAME.public_key; for
// env:NAME the variable NAME_PUBLIC_KEY.

// DiscordSignatureWindow bounds how far an interaction's
// X-Signature-Timestamp may be from now.
const DiscordSignatureWindow = 5 * time.Minute

// publicKeyRef is the reference of a Discord binding's application
// public key, beside its token's.
func publicKeyRef(ref string) []string {
	kind, name, ok := strings.Cut(ref, ":")
	if !ok {
		up := strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(ref))
		return []string{"secret:" + ref + ".public_key", "env:TRELLIS_" + up + "_PUBLIC_KEY", "env:" + up + "_PUBLIC_KEY"}
	}
	if kind == "env" {
		return []string{"env:" + name + "_PUBLIC_KEY"}
	}
	return []string{kind + ":" + name + ".public_key"}
}

// discordPublicKey resolves b's application public key.
func (s *Service) discordPublicKey(b *binding) (ed25519.PublicKey, error) {
	refs := publicKeyRef(b.rec.CredentialsRef)
	for _, ref := range refs {
		if kind, name, _ := strings.Cut(ref, ":"); kind == "env" && strings.TrimSpace(s.opts.Getenv(name)) == "" {
			continue
		}
		v, err := s.resolveCredential(ref)
		if err != nil {
			continue
		}
		raw, err := hex.DecodeString(strings.TrimSpace(v))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("the Discord public key in %s is not %d bytes of hex", ref, ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(raw), nil
	}
	return nil, fmt.Errorf("no Discord application public key: place it in one of %s", strings.Join(refs, ", "))
}

// verifyDiscord checks an interaction request's signature and timestamp.
func verifyDiscord(key ed25519.PublicKey, h http.Header, body []byte, now time.Time) error {
	sig, err := hex.DecodeString(h.Get("X-Signature-Ed25519"))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("missing or malformed X-Signature-Ed25519 (want the hex Ed25519 signature of X-Signature-Timestamp + body)")
	}
	ts := h.Get("X-Signature-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("missing or malformed X-Signature-Timestamp (want Unix seconds)")
	}
	if !ed25519.Verify(key, append([]byte(ts), body...), sig) {
		return errors.New("bad X-Signature-Ed25519: the signature does not verify against the application's public key")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > DiscordSignatureWindow || d < -DiscordSignatureWindow {
		return fmt.Errorf("X-Signature-Timestamp is %v away from now, over %v", d.Round(time.Second), DiscordSignatureWindow)
	}
	return nil
}

// serveDiscordInteraction is the Interactions Endpoint of a binding.
func (s *Service) serveDiscordInteraction(w http.ResponseWriter, r *http.Request) {
	b, id := s.inbound(w, r, PlatformDiscord)
	if b == nil {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	key, err := s.discordPublicKey(b)
	if err != nil {
		s.log.Warn("discord interaction refused", "bindingId", id, "err", err)
		httpError(w, http.StatusUnauthorized, "this binding has no application public key to verify interactions with")
		return
	}
	// Checked before the body is parsed: nothing unauthenticated is read.
	if err := verifyDiscord(key, r.Header, body, time.Now()); err != nil {
		httpError(w, http.StatusUnauthorized, err.Error())
		return
	}
	var in dcInteraction
	if err := json.Unmarshal(body, &in); err != nil {
		httpError(w, http.StatusBadRequest, "the body is not an interaction object")
		return
	}
	switch in.Type {
	case 1: // PING
		writeJSON(w, http.StatusOK, map[string]any{"type": 1})
	case 3:
		writeJSON(w, http.StatusOK, s.discordClick(r.Context(), b, in))
	default:
		writeJSON(w, http.StatusOK, map[string]any{"type": 4, "data": map[string]any{"content": "Trellis answers only its approval buttons.", "flags": 64}})
	}
}
