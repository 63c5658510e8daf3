package provider

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/store"
)

// SecretsKeyEnv holds the secrets key itself (base64 or hex of 32 bytes)
// when no key file is given (trellisd --secrets-key-file).
const SecretsKeyEnv = "TRELLIS_SECRETS_KEY"

// keysNamespace is the settings namespace of the sealed API keys (one key
// per vendor) on a store several daemons share.
const keysNamespace = "provider-keys"

// sealedAlg names the cipher of a sealed key row.
const sealedAlg = "AES-256-GCM"

// ErrNoSecretsKey: an API key would be stored in a shared database, but this
// daemon has no secrets key to encrypt it with (unsupported).
var ErrNoSecretsKey = errors.New("no secrets key to encrypt API keys with")

// ErrWrongSecretsKey: a sealed API key in the database does not open with
// this daemon's secrets key.
var ErrWrongSecretsKey = errors.New("the secrets key does not open the stored API keys")

// ParseSecretsKey reads a secrets key: 32 bytes written as base64 (standard
// or URL alphabet, padded or not) or as 64 hex digits, surrounding space
// ignored. The error never quotes the text.
func ParseSecretsKey(text string) ([]byte, error) {
	t := strings.TrimSpace(text)
	if len(t) == 64 {
		if b, err := hex.DecodeString(t); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(t); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("a secrets key is 32 random bytes written as base64 or 64 hex digits (make one with: openssl rand -base64 32)")
}

// LoadSecretsKey returns the secrets key from path (when not "") or else
// from $TRELLIS_SECRETS_KEY; nil when neither is given. getenv nil means
// os.Getenv.
func LoadSecretsKey(path string, getenv func(string) string) ([]byte, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("secrets key file: %w", err)
		}
		k, err := ParseSecretsKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("secrets key file %s: %w", path, err)
		}
		return k, nil
	}
	if v := getenv(SecretsKeyEnv); strings.TrimSpace(v) != "" {
		k, err := ParseSecretsKey(v)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", SecretsKeyEnv, err)
		}
		return k, nil
	}
	return nil, nil
}

// sealedRow is a sealed API key as the settings table keeps it.
type sealedRow struct {
	Alg        string `json:"alg"`
	Nonce      string `json:"nonce"`
	Ciphertext string `json:"ciphertext"`
}

// keyStore keeps the vendors' API keys.
type keyStore interface {
	// load returns every stored key by vendor.
	load(ctx context.Context) (map[string]string, error)
	// store writes the key of vendor; "" removes it.
	store(ctx context.Context, vendor, key string) error
}

// sealedKeys keeps API keys in the shared store's settings, each sealed with
// AES-256-GCM under the secrets key every daemon of the cluster is given;
// the vendor's name is the additional data, so a row copied to another
// vendor does not open.
type sealedKeys struct {
	st   store.SettingStore
	aead cipher.AEAD // nil: no secrets key
}

func newSealedKeys(st store.SettingStore, key []byte) (*sealedKeys, error) {
	s := &sealedKeys{st: st}
	if key == nil {
		return s, nil
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets key: want 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if s.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	return s, nil
}

func additionalData(vendor string) []byte { return []byte("trellis provider key\x00" + vendor) }

func (s *sealedKeys) load(ctx context.Context) (map[string]string, error) {
	rows, err := s.st.ListSettings(ctx, keysNamespace)
	if err != nil {
		return nil, fmt.Errorf("load the sealed API keys: %w", err)
	}
	out := map[string]string{}
	if len(rows) == 0 {
		return out, nil
	}
	if s.aead == nil {
		return nil, &errs.Error{Code: errcode.Unsupported, Err: ErrNoSecretsKey, Msg: fmt.Sprintf(
			"the database holds %d encrypted provider API key(s) and this daemon has no secrets key to open them: give every daemon the cluster's key with --secrets-key-file FILE or $%s",
			len(rows), SecretsKeyEnv)}
	}
	for _, row := range rows {
		key, err := s.open(row.Key, row.Value)
		if err != nil {
			return nil, err
		}
		out[row.Key] = key
	}
	return out, nil
}

func (s *sealedKeys) open(vendor string, raw json.RawMessage) (string, error) {
	var r sealedRow
	if err := json.Unmarshal(raw, &r); err != nil || r.Alg != sealedAlg {
		return "", fmt.Errorf("the stored API key of %s is not an %s sealed key (settings %s/%s)", vendor, sealedAlg, keysNamespace, vendor)
	}
	nonce, err1 := base64.StdEncoding.DecodeString(r.Nonce)
	ct, err2 := base64.StdEncoding.DecodeString(r.Ciphertext)
	if err1 != nil || err2 != nil || len(nonce) != s.aead.NonceSize() {
		return "", fmt.Errorf("the stored API key of %s is damaged (settings %s/%s): configure it again", vendor, keysNamespace, vendor)
	}
	plain, err := s.aead.Open(nil, nonce, ct, additionalData(vendor))
	if err != nil {
		return "", &errs.Error{Code: errcode.Unsupported, Err: ErrWrongSecretsKey, Msg: fmt.Sprintf(
			"the API key of %s stored in the database does not open with this daemon's secrets key: every daemon of the cluster needs the same --secrets-key-file (or $%s)",
			vendor, SecretsKeyEnv)}
	}
	return string(plain), nil
}

func (s *sealedKeys) store(ctx context.Context, vendor, key string) error {
	if key == "" {
		if err := s.st.DeleteSetting(ctx, store.Unfenced(), keysNamespace, vendor); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	if s.aead == nil {
		return (&errs.Error{Code: errcode.Unsupported, Err: ErrNoSecretsKey, Msg: fmt.Sprintf(
			"this daemon shares a PostgreSQL store, where API keys are kept encrypted, and it has no secrets key: start every daemon with the same --secrets-key-file FILE (or $%s), e.g. made with `openssl rand -base64 32`; or give the key through %s",
			SecretsKeyEnv, mustVendor(vendor).keyEnv)}).WithData("field", "api_key").WithData("value", "")
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	ct := s.aead.Seal(nil, nonce, []byte(key), additionalData(vendor))
	raw, _ := json.Marshal(sealedRow{Alg: sealedAlg, Nonce: base64.StdEncoding.EncodeToString(nonce), Ciphertext: base64.StdEncoding.EncodeToString(ct)})
	return s.st.PutSetting(ctx, store.Unfenced(), keysNamespace, vendor, raw)
}
