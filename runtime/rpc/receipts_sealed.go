package rpc

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// A result with a field marked (shown_once) holds a credential its caller
// sees only in that answer (key.create's secret). Its receipt keeps it
// sealed (AES-256-GCM) under a key derived from the credential the call
// was made with and the operation id: the store, which keeps API keys only
// as hashes, never holds the credential readable, and only a repeat made
// with the first call's credential opens it.

// errSealedForAnother: a sealed outcome does not open with the repeat's
// credential.
var errSealedForAnother = errors.New("the stored result is sealed under the credential of the operation's first call")

// shownOnce reports whether messages of d have a (shown_once) field, at any
// depth.
func shownOnce(d protoreflect.MessageDescriptor) bool {
	return hasShownOnce(d, map[protoreflect.FullName]bool{})
}

func hasShownOnce(d protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[d.FullName()] {
		return false
	}
	seen[d.FullName()] = true
	fields := d.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if proto.GetExtension(f.Options(), trellisv1.E_ShownOnce).(bool) {
			return true
		}
		if f.Message() != nil && hasShownOnce(f.Message(), seen) {
			return true
		}
	}
	return false
}

// callerCredential is the key (or token) the call was made with: the one
// a WebSocket or REST client presented, which the facade passes on behalf
// of it, else the call's own Bearer.
func callerCredential(md metadata.MD) string {
	if k := first(md, MDOnBehalfOf); k != "" {
		return k
	}
	return bearer(md)
}

// outcomeAEAD is the cipher that seals operation's outcome for cred.
func outcomeAEAD(cred, operation string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(cred), []byte(operation), "trellis operation receipt", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealOutcome seals plain: the nonce, then the sealed bytes.
func sealOutcome(cred, operation string, plain []byte) ([]byte, error) {
	aead, err := outcomeAEAD(cred, operation)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, []byte(operation)), nil
}

// openOutcome opens what sealOutcome sealed; errSealedForAnother when cred
// is not the credential it was sealed for.
func openOutcome(cred, operation string, sealed []byte) ([]byte, error) {
	aead, err := outcomeAEAD(cred, operation)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errSealedForAnother
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(operation))
	if err != nil {
		return nil, errSealedForAnother
	}
	return plain, nil
}
