// Package ui owns the web console's built assets: the page the daemon serves
// at /ui/, built from this directory's TypeScript sources (src/, `npm run
// build`) and embedded so that running the daemon needs no Node.
package ui
