package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/websearch"
)

// searchProvider builds web_search's provider from --search-provider
// (which Config.WithDefaults takes from $TRELLIS_SEARCH_PROVIDER when
// unset); nil when none is configured.
func searchProvider(cfg Config) (tool.SearchProvider, error) {
	spec := cfg.SearchProvider
	if spec == "" {
		return nil, nil
	}
	kind, arg, _ := strings.Cut(spec, "=")
	c := websearch.Config{Kind: kind, BaseURL: arg}
	if kind == "brave" {
		key, err := searchKey(cfg.Home, "brave", "BRAVE_API_KEY")
		if err != nil {
			return nil, fmt.Errorf("search provider: %w", err)
		}
		c.APIKey = key
	}
	p, err := websearch.New(c)
	if err != nil {
		return nil, fmt.Errorf("search provider: %w", err)
	}
	return p, nil
}

// searchKey reads a search API key from the environment, else from
// <home>/secrets/NAME.json ({"api_key": …}, kept mode 0600 like the model
// providers' keys).
func searchKey(home, name, env string) (string, error) {
	if k := os.Getenv(env); k != "" {
		return k, nil
	}
	p := filepath.Join(home, "secrets", name+".json")
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if info.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(p, 0o600); err != nil {
			return "", fmt.Errorf("tighten %s to mode 0600: %w", p, err)
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	var f struct {
		APIKey string `json:"api_key"`
	}
	if json.Unmarshal(data, &f) != nil {
		return "", fmt.Errorf("%s is not a JSON object with an api_key string", p)
	}
	return f.APIKey, nil
}
