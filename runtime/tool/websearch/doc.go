// Package websearch owns the search providers that answer the web_search
// tool: SearXNG's JSON API (self-hostable) and the Brave Search API.
package websearch
