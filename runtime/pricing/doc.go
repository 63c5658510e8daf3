// Package pricing owns the price table: what a model call costs, in
// micro-US-dollars, from the tokens its provider reported. The table is a
// TOML file (prices.toml, embedded, documented in docs/operations.md) that
// a daemon's --prices file overrides model by model; File reads that file
// again when it changes and keeps the last table that parsed.
package pricing
