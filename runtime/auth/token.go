// Package auth owns the daemon's auth token: creating it in the home
// directory with mode 0600, loading it across restarts, and checking a
// presented token in constant time.
package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	if err := WriteFileAtomic(path, []byte(tok+"\n")); err != nil {
		return "", err
	}
	return tok, nil
}

// WriteFileAtomic writes data to path with mode 0600 through a temp file in
// the same directory and a rename, so readers never see a partial file.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Equal reports whether presented equals want, in time independent of where
// they differ.
func Equal(presented, want string) bool {
	return subtle.ConstantTimeCompare([]byte(presented), []byte(want)) == 1
}
