package llm

import (
	"log/slog"
	"net/http"
	"strings"
)

// EndpointConfig configures a vendor's provider that calls the vendor's
// HTTP API (openai, anthropic). Zero values mean the defaults.
type EndpointConfig struct {
	APIKey  string
	BaseURL string // "" = the vendor's own endpoint
	Model   string // the default model; "" = the vendor's default model
	Models  []string
	// ContextWindow, when positive, is the window of every model of this
	// provider, overriding the vendor's table of known models.
	ContextWindow int
	HTTPClient    *http.Client // nil = NewHTTPClient()
	Retry         RetryPolicy
	Log           *slog.Logger // nil discards
}

// WithDefaults returns c with the vendor's baseURL and model where c names
// none (its BaseURL without a trailing slash), and the default HTTP client
// and a discarding log where it has none.
func (c EndpointConfig) WithDefaults(baseURL, model string) EndpointConfig {
	if c.BaseURL == "" {
		c.BaseURL = baseURL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.Model == "" {
		c.Model = model
	}
	if c.HTTPClient == nil {
		c.HTTPClient = NewHTTPClient()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}
