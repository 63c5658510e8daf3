package tool

import "net/http"

// Options configures the built-in tools.
type Options struct {
	// HTTPClient is web_fetch's client; nil means one with a 30 s timeout
	// that refuses non-public addresses unless WebFetchAllowPrivate.
	HTTPClient *http.Client
	// WebFetchAllowPrivate lets web_fetch reach loopback and private
	// addresses.
	WebFetchAllowPrivate bool
	// Search answers web_search; nil leaves it inactive until
	// (*WebSearch).SetProvider is called.
	Search SearchProvider
	// Guard protects the daemon's home from every tool (see Guard).
	Guard *Guard
	// Shell configures the shell tool's sandbox and environment.
	Shell ShellOptions
}

// Builtins returns the built-in tools: shell, read_file, list_dir, glob,
// grep, write_file, edit_file, web_fetch and web_search.
func Builtins(opts Options) []Tool {
	return []Tool{
		NewShellWith(opts.Shell),
		NewReadFile(),
		NewListDir(),
		NewGlob(),
		NewGrep(),
		NewWriteFile(),
		NewEditFile(),
		NewWebFetchWith(WebFetchOptions{Client: opts.HTTPClient, AllowPrivate: opts.WebFetchAllowPrivate}),
		NewWebSearch(opts.Search),
	}
}

// NewBuiltinRegistry returns a Registry holding Builtins(opts).
func NewBuiltinRegistry(opts Options) (*Registry, error) {
	r, err := NewRegistry(Builtins(opts)...)
	if err != nil {
		return nil, err
	}
	r.SetGuard(opts.Guard)
	return r, nil
}
