package websearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-run/trellis/runtime/tool"
)

// maxResponse bounds what is read of a search API's answer.
const maxResponse = 4 << 20

// DefaultBraveURL is the Brave Search API's web search endpoint.
const DefaultBraveURL = "https://api.search.brave.com/res/v1/web/search"

// Config selects a provider: Kind "searxng" with BaseURL (the instance,
// e.g. http://127.0.0.1:8888; its settings must enable the json format),
// or "brave" with APIKey (BaseURL overrides the endpoint).
type Config struct {
	Kind    string
	BaseURL string
	APIKey  string
	Client  *http.Client
}

// New returns the provider c describes.
func New(c Config) (tool.SearchProvider, error) {
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: 20 * time.Second}
	}
	switch c.Kind {
	case "searxng":
		u, err := url.Parse(c.BaseURL)
		if c.BaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("searxng needs the instance's http(s) URL, e.g. searxng=http://127.0.0.1:8888 (got %q)", c.BaseURL)
		}
		return &SearXNG{base: strings.TrimRight(c.BaseURL, "/"), client: client}, nil
	case "brave":
		if c.APIKey == "" {
			return nil, errors.New("brave needs an API key: set BRAVE_API_KEY or store it in <home>/secrets/brave.json")
		}
		endpoint := c.BaseURL
		if endpoint == "" {
			endpoint = DefaultBraveURL
		}
		return &Brave{endpoint: endpoint, key: c.APIKey, client: client}, nil
	}
	return nil, fmt.Errorf("search provider %q: want searxng or brave", c.Kind)
}

// SearXNG queries a SearXNG instance's JSON API (GET /search?format=json).
type SearXNG struct {
	base   string
	client *http.Client
}

// searxngResponse is the part of SearXNG's JSON answer used here.
type searxngResponse struct {
	Results []struct {
		Title   string  `json:"title"`
		URL     string  `json:"url"`
		Content string  `json:"content"`
		Score   float64 `json:"score"`
	} `json:"results"`
}

// Search implements tool.SearchProvider: results ranked by SearXNG's score.
func (s *SearXNG) Search(ctx context.Context, query string, limit int) ([]tool.SearchHit, error) {
	q := url.Values{"q": {query}, "format": {"json"}}
	body, err := get(ctx, s.client, s.base+"/search?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	return parseSearXNG(body, limit)
}

// parseSearXNG reads SearXNG's JSON answer, best score first.
func parseSearXNG(body []byte, limit int) ([]tool.SearchHit, error) {
	var r searxngResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the SearXNG answer is not its JSON format (is format json enabled in its settings?): %v", err)
	}
	sort.SliceStable(r.Results, func(i, j int) bool { return r.Results[i].Score > r.Results[j].Score })
	var hits []tool.SearchHit
	for _, x := range r.Results {
		if x.URL == "" || len(hits) >= limit {
			continue
		}
		hits = append(hits, tool.SearchHit{Title: x.Title, URL: x.URL, Snippet: x.Content})
	}
	return hits, nil
}

// Brave queries the Brave Search API.
type Brave struct {
	endpoint string
	key      string
	client   *http.Client
}

// braveResponse is the part of Brave's answer used here.
type braveResponse struct {
	Web struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
		} `json:"results"`
	} `json:"web"`
}

// Search implements tool.SearchProvider in Brave's ranking order.
func (b *Brave) Search(ctx context.Context, query string, limit int) ([]tool.SearchHit, error) {
	q := url.Values{"q": {query}, "count": {strconv.Itoa(limit)}}
	body, err := get(ctx, b.client, b.endpoint+"?"+q.Encode(), map[string]string{"X-Subscription-Token": b.key})
	if err != nil {
		return nil, err
	}
	return parseBrave(body, limit)
}

// parseBrave reads Brave's JSON answer in its order.
func parseBrave(body []byte, limit int) ([]tool.SearchHit, error) {
	var r braveResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the Brave answer is not its JSON format: %v", err)
	}
	var hits []tool.SearchHit
	for _, x := range r.Web.Results {
		if x.URL == "" || len(hits) >= limit {
			continue
		}
		hits = append(hits, tool.SearchHit{Title: x.Title, URL: x.URL, Snippet: stripTags(x.Description)})
	}
	return hits, nil
}

func get(ctx context.Context, client *http.Client, u string, headers map[string]string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "trellis-web-search/1")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		// The URL holds no secret (keys go in headers), so the error may name it.
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		snippet := strings.TrimSpace(string(body))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "…"
		}
		return nil, fmt.Errorf("the search API answered %s: %s", resp.Status, snippet)
	}
	return body, nil
}

// stripTags removes the <strong> highlighting Brave puts in descriptions.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}
