package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// secretFile is what a vendor's secret file holds.
type secretFile struct {
	APIKey string `json:"api_key"`
}

// secrets keeps API keys in <home>/secrets/<vendor>.json: the directory is
// mode 0700, each file 0600, written to a temporary file and renamed so that
// a crash never leaves half a key.
type secrets struct {
	dir string
}

func (s secrets) path(vendor string) string { return filepath.Join(s.dir, vendor+".json") }

// load returns the stored key of vendor ("" when none). A file readable by
// others is tightened to 0600; fixed reports that.
func (s secrets) load(vendor string) (key string, fixed bool, err error) {
	p := s.path(vendor)
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if info.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(p, 0o600); err != nil {
			return "", false, fmt.Errorf("tighten %s to mode 0600: %w", p, err)
		}
		fixed = true
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", fixed, err
	}
	var f secretFile
	if err := json.Unmarshal(data, &f); err != nil {
		// The text of a JSON error may quote the file: say only where.
		return "", fixed, fmt.Errorf("%s is not a JSON object with an api_key string", p)
	}
	return f.APIKey, fixed, nil
}

// store writes the key of vendor; an empty key removes the file.
func (s secrets) store(vendor, key string) error {
	p := s.path(vendor)
	if key == "" {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return err
	}
	data, _ := json.Marshal(secretFile{APIKey: key})
	tmp, err := os.CreateTemp(s.dir, "."+vendor+"-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// fileKeys is the keyStore of a daemon alone on its store: one file per
// vendor under <home>/secrets.
type fileKeys struct {
	secrets
	log *slog.Logger
}

func (f fileKeys) load(context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vendors {
		if !v.real {
			continue
		}
		key, fixed, err := f.secrets.load(v.name)
		if err != nil {
			return nil, fmt.Errorf("load the %s API key: %w", v.name, err)
		}
		if fixed {
			f.log.Warn("an API key file was readable by others; its mode is now 0600", "vendor", v.name)
		}
		if key != "" {
			out[v.name] = key
		}
	}
	return out, nil
}

func (f fileKeys) store(_ context.Context, vendor, key string) error {
	return f.secrets.store(vendor, key)
}
