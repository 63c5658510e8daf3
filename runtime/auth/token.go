package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/trellis-run/trellis/internal/atomicfile"
)

// tokenBytes is the amount of randomness in a new token (PROTOCOL.md §1: 32+).
const tokenBytes = 32

// LoadOrCreateToken returns the token stored in path, creating it (32 random
// bytes, URL-safe base64, mode 0600, written to a temp file and renamed) when
// the file does not exist. A token file readable by others is tightened to 0600.
func LoadOrCreateToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("token file %s holds %d characters, want at least 32: delete it to have a new one made", path, len(tok))
		}
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("restrict token file %s: %w", path, err)
		}
		return tok, nil
	case errors.Is(err, fs.ErrNotExist):
		return createToken(path)
	default:
		return "", fmt.Errorf("read token file: %w", err)
	}
}

func createToken(path string) (string, error) {
	var raw [tokenBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := atomicfile.Write(path, []byte(tok+"\n")); err != nil {
		return "", err
	}
	return tok, nil
}

// Equal reports whether presented equals want, in time independent of where
// they differ.
func Equal(presented, want string) bool {
	return subtle.ConstantTimeCompare([]byte(presented), []byte(want)) == 1
}
