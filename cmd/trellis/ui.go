package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/daemonfile"
)

// newUICmd is `trellis ui`: a one-time login link to the web console the
// daemon serves at /ui/ (starting the daemon when none runs), printed and,
// where a desktop is, opened in the browser.
func newUICmd(a *app) *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Open the web console (prints a one-time login link)",
		Long: `ui prints a link that logs a browser in to the daemon's web console, and
opens it in the default browser when there is a desktop (--no-open only prints it).
The link works once, within two minutes; the browser then holds an HttpOnly cookie,
and the token never appears in a URL.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			info, err := a.ensureDaemon(ctx)
			if err != nil {
				return err
			}
			link, err := consoleLoginLink(ctx, info)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, link)
			if !noOpen {
				if err := openBrowser(link); err != nil {
					fmt.Fprintf(a.stderr, "trellis: open the link above in a browser (%v)\n", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "only print the link")
	return cmd
}

// consoleLoginLink asks the daemon for a one-time login code.
func consoleLoginLink(ctx context.Context, info daemonfile.Info) (string, error) {
	base, _, hc, err := client.BaseURLs(info)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ui/login-code", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+info.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask the daemon at %s for a console login: %w", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		Path  string `json:"path"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != http.StatusOK || out.Path == "" {
		msg := resp.Status
		if out.Error != nil {
			msg = out.Error.Message
		}
		return "", fmt.Errorf("the daemon at %s gave no console login (%s); is it older than this client?", base, msg)
	}
	return base + out.Path, nil
}

// openBrowser opens link with the desktop's opener; it fails where there
// is no desktop, and the caller then only prints the link.
func openBrowser(link string) error {
	var name string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", link).Start()
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return fmt.Errorf("no desktop")
		}
		name = "xdg-open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("%s not found", name)
	}
	cmd := exec.Command(path, link)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reap it; the browser lives on
	return nil
}
