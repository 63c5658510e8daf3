//go:build !trellis_lean

package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// startTimeout bounds Chromium's start, up to its first blank page.
const startTimeout = 30 * time.Second

// local is one session's Chromium: a process with a fresh profile, its
// proxy, and the tab the tool drives. Its methods are called one at a time
// (Tool holds the session's lock).
type local struct {
	profile     string
	proxy       *proxy
	allocCancel context.CancelFunc
	tab         context.Context
	tabCancel   context.CancelFunc
	closeOnce   sync.Once
}

// startLocal starts Chromium at path with a new profile under root.
func startLocal(path, root string, prx *proxy) (*local, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	profile, err := os.MkdirTemp(root, "profile-")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
		chromedp.Headless,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Chromium keeps its sandbox, except as root, where it refuses to
		// start with it: chromedp then adds --no-sandbox (a daemon in a
		// container often is root). The proxy, not the sandbox, keeps the
		// page off private addresses.
		chromedp.DisableGPU,
		chromedp.WindowSize(ViewportWidth, ViewportHeight),
		// Chromium's own traffic (updates, sync, field trials) would go
		// through the proxy, or flood a closed network with refusals.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("proxy-server", "http://"+prx.addr()),
		// Without this Chromium bypasses a proxy for loopback addresses.
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		// WebRTC's UDP does not go through an HTTP proxy.
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
	}
	l := &local{profile: profile, proxy: prx}
	var allocCtx context.Context
	allocCtx, l.allocCancel = chromedp.NewExecAllocator(context.Background(), opts...)
	l.tab, l.tabCancel = chromedp.NewContext(allocCtx)
	started := make(chan error, 1)
	go func() {
		// The window's frame takes part of its size: the viewport, and so
		// every screenshot, is set to the size itself.
		err := chromedp.Do(l.tab, chromedp.EmulateViewport(ViewportWidth, ViewportHeight))
		if err == nil {
			_, err = chromedp.CallBrowser(l.tab, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorDeny})
		}
		started <- err
	}()
	select {
	case err = <-started:
	case <-time.After(startTimeout):
		l.allocCancel()
		err = <-started
		if err == nil {
			err = errors.New("timed out")
		}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	// A JavaScript dialog would block the page until it is answered.
	dialogs := chromedp.Events(l.tab, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(l.tab, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return l, nil
}

// close ends the browser gracefully, then every process that still uses
// its profile, then removes the profile.
func (l *local) close() {
	l.closeOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			_ = chromedp.Cancel(l.tab)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		l.tabCancel()
		l.allocCancel()
		l.proxy.close()
		removeProfile(l.profile)
	})
}

// within runs action on l's tab, bounded by d and by ctx (the call's).
func within[T any](ctx context.Context, l *local, d time.Duration, action chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	// chromedp runs on a context derived from the tab's; the call's
	// context and the bound cancel it through this one.
	runCtx, runCancel := context.WithCancel(l.tab)
	defer runCancel()
	stop := context.AfterFunc(ctx, runCancel)
	defer stop()
	v, err := chromedp.Run(runCtx, action)
	if err != nil && ctx.Err() != nil {
		return v, ctx.Err()
	}
	return v, err
}

// exists reports whether sel matches an element, without waiting for one.
func (l *local) exists(ctx context.Context, sel string) error {
	n, err := within(ctx, l, actionTimeout, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%s).length", jsString(sel))))
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w %s", errNotFound, sel)
	}
	return nil
}

// location returns the page's title and URL.
func (l *local) location(ctx context.Context) (title, url string, err error) {
	if title, err = within(ctx, l, actionTimeout, chromedp.Title()); err != nil {
		return "", "", err
	}
	url, err = within(ctx, l, actionTimeout, chromedp.Location())
	return title, url, err
}
