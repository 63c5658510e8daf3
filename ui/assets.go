package ui

import (
	"embed"
	"io/fs"
)

// The built console, committed; CI rebuilds it from src/ and fails on any
// difference.
//
//go:embed assets
var assets embed.FS

// Assets returns the console's files (index.html, app.js, app.css) at the
// root of the file system.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic("ui: the embedded assets directory is missing: " + err.Error()) // cannot happen: go:embed checked it at build time
	}
	return sub
}
