//go:build !trellis_lean

package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/chromedp/chromedp"

	"github.com/trellis-run/trellis/runtime/tool"
)

// do runs one action on the browser.
func (l *local) do(ctx context.Context, a args, call tool.Call) tool.Result {
	var res tool.Result
	var err error
	switch a.Action {
	case "navigate":
		res, err = l.navigate(ctx, a.URL)
	case "read":
		res, err = l.read(ctx, a)
	case "click", "type":
		res, err = l.act(ctx, a)
	case "screenshot":
		res, err = l.screenshot(ctx, call)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return tool.Failed("browser %s was interrupted", a.Action)
		case errors.Is(err, context.DeadlineExceeded):
			return tool.Failed("browser %s did not finish in time", a.Action)
		default:
			return tool.Failed("browser %s failed: %v", a.Action, err)
		}
	}
	return res
}

func (l *local) navigate(ctx context.Context, raw string) (tool.Result, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return tool.Failed("navigate opens http and https URLs only, not %q", raw), nil
	}
	resp, err := within(ctx, l, LoadTimeout, chromedp.NavigateResponse(u.String()))
	var loadErr *chromedp.LoadError
	if errors.As(err, &loadErr) {
		// The page did not load (no such host, connection refused): that
		// is the model's to know, not a failure of the tool.
		return tool.Failed("%s did not load: %s", raw, loadErr.ErrorText), nil
	}
	if err != nil {
		return tool.Result{}, err
	}
	title, at, err := l.location(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	res := tool.Result{OK: true, Output: fmt.Sprintf("URL: %s\nTitle: %s", at, title)}
	if resp != nil {
		res.Output += fmt.Sprintf("\nStatus: %d %s", resp.Status, resp.StatusText)
		if resp.Status >= 400 {
			res.OK, res.Error = false, fmt.Sprintf("HTTP %d from %s", resp.Status, at)
		}
	}
	return res, nil
}

// outlineJS gives every interactive element without a ref the next ref
// (kept in a data attribute, so a ref names the same element on every read
// of the document) and returns the page's text and the outline.
const outlineJS = `(() => {
  const seq = () => (window.__trellisRef = (window.__trellisRef || 0) + 1);
  const q = 'a[href],button,input,textarea,select,summary,[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem],[contenteditable=""],[contenteditable=true],[onclick]';
  const lines = [];
  for (const el of document.querySelectorAll(q)) {
    const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    if ((r.width === 0 && r.height === 0) || cs.visibility === 'hidden' || cs.display === 'none' || el.type === 'hidden') continue;
    if (!el.dataset.trellisRef) el.dataset.trellisRef = 'e' + seq();
    const tag = el.tagName.toLowerCase();
    let role = el.getAttribute('role') || ({a: 'link', button: 'button', textarea: 'textbox', select: 'combobox', summary: 'button'})[tag] || tag;
    if (tag === 'input') role = ({checkbox: 'checkbox', radio: 'radio', submit: 'button', button: 'button', reset: 'button'})[el.type] || 'textbox';
    const label = el.labels && el.labels.length ? el.labels[0].innerText : '';
    let name = (el.getAttribute('aria-label') || label || el.innerText || el.placeholder || el.title || el.alt || '').trim().replace(/\s+/g, ' ').slice(0, 80);
    let line = '[' + el.dataset.trellisRef + '] ' + role + ' ' + JSON.stringify(name);
    if (role === 'textbox' || role === 'combobox') line += ' value=' + JSON.stringify(String(el.value || '').slice(0, 80));
    if (role === 'checkbox' || role === 'radio') line += el.checked ? ' checked' : '';
    if (tag === 'a') line += ' -> ' + el.getAttribute('href');
    if (el.disabled) line += ' disabled';
    lines.push(line);
  }
  return {text: document.body ? document.body.innerText : '', outline: lines.join('\n')};
})()`

type outline struct {
	Text    string `json:"text"`
	Outline string `json:"outline"`
}

func (l *local) read(ctx context.Context, a args) (tool.Result, error) {
	limit := DefaultTextChars
	if a.MaxChars > 0 {
		limit = int(min(a.MaxChars, MaxTextChars))
	}
	title, at, err := l.location(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	o, err := within(ctx, l, actionTimeout, chromedp.Evaluate[outline](outlineJS))
	if err != nil {
		return tool.Result{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nTitle: %s\n\n", at, title)
	text := []rune(strings.TrimSpace(o.Text))
	if len(text) > limit {
		fmt.Fprintf(&b, "%s\n[text cut at %d characters; it is longer]", string(text[:limit]), limit)
	} else {
		b.WriteString(string(text))
	}
	if a.Outline == nil || *a.Outline {
		out := o.Outline
		if r := []rune(out); len(r) > limit {
			out = string(r[:limit]) + "\n[outline cut]"
		}
		if out == "" {
			out = "(no interactive elements)"
		}
		fmt.Fprintf(&b, "\n\nInteractive elements (use ref with click and type):\n%s", out)
	}
	return tool.Result{OK: true, Output: b.String()}, nil
}

// act clicks or types into the element named by ref or selector.
func (l *local) act(ctx context.Context, a args) (tool.Result, error) {
	sel, name := a.Selector, a.Selector
	if a.Ref != "" {
		sel, name = fmt.Sprintf("[data-trellis-ref=%s]", jsString(a.Ref)), "ref "+a.Ref
	}
	if err := l.exists(ctx, sel); err != nil {
		if errors.Is(err, errNotFound) {
			return tool.Failed("no element matches %s on this page (read lists the refs)", name), nil
		}
		return tool.Result{}, err
	}
	action := chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)
	done := "clicked " + name
	if a.Action == "type" {
		action = chromedp.SendKeys(chromedp.CSS(sel), a.Text, chromedp.NodeVisible)
		done = fmt.Sprintf("typed %d characters into %s", len([]rune(a.Text)), name)
	}
	if _, err := within(ctx, l, actionTimeout, action); err != nil {
		return tool.Result{}, err
	}
	title, at, err := l.location(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{OK: true, Output: fmt.Sprintf("%s\nURL: %s\nTitle: %s", done, at, title)}, nil
}

// screenshot captures the viewport as a PNG image, kept in the call's
// output directory when it has one.
func (l *local) screenshot(ctx context.Context, call tool.Call) (tool.Result, error) {
	buf, err := within(ctx, l, LoadTimeout, chromedp.CaptureScreenshot())
	if err != nil {
		return tool.Result{}, err
	}
	if len(buf) > MaxScreenshotBytes {
		return tool.Failed("the screenshot is %d bytes, more than the %d a model takes", len(buf), MaxScreenshotBytes), nil
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(buf))
	if err != nil {
		return tool.Result{}, fmt.Errorf("chromium's screenshot is not a PNG: %w", err)
	}
	title, at, err := l.location(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	out := fmt.Sprintf("Screenshot of %s (%s): PNG %dx%d, %d bytes, attached as an image.", at, title, cfg.Width, cfg.Height, len(buf))
	if call.OutputDir != "" && call.ID != "" {
		path := filepath.Join(call.OutputDir, "browser-"+call.ID+".png")
		if err := os.MkdirAll(call.OutputDir, 0o700); err == nil && os.WriteFile(path, buf, 0o600) == nil {
			out += "\nKept at " + path
		}
	}
	return tool.Result{OK: true, Output: out, Images: []tool.Image{{MediaType: "image/png", Data: buf}}}, nil
}

// jsString quotes s as a JavaScript (and CSS) string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
