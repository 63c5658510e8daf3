// Package browser owns the `browser` tool: a headless Chromium per session,
// driven over the DevTools protocol (chromedp), that the model navigates,
// reads (as text and as an outline of the interactive elements, each with a
// ref), clicks, types into and takes screenshots of.
//
// The provider of a session's browser is "local" (Chromium on the daemon's
// machine), "host" (the browser a client lent the session: tool.register of
// a tool named browser, whose calls the tool sends there; none lent:
// browser_provider_unavailable) or "none". Each local
// browser gets a fresh profile under the daemon's profile root and reaches
// the network only through a proxy of its own in the daemon, which dials
// with web_fetch's rule: every navigation, redirect, subresource, frame,
// worker and WebSocket of the page is refused a loopback, private or
// link-local address unless the daemon allows private addresses. The
// browser ends, and its profile is removed, when its session closes, when it
// has been idle too long and when the daemon stops; a daemon that starts
// kills the browsers a killed daemon left and removes their profiles.
//
// The driver (local.go, actions.go) is left out of lean builds (-tags
// trellis_lean, lean.go), whose tool answers browser_provider_unavailable.
package browser
