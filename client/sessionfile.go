package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Imported is what ImportSession created.
type Imported struct {
	SessionID   string `json:"sessionId"`
	Events      int64  `json:"events"`
	History     int64  `json:"history"`
	Blobs       int64  `json:"blobs"`
	Checkpoints int64  `json:"checkpoints"`
}

// ExportSession writes the session's portable file (docs/export.md) to w,
// streamed from the daemon's GET /v1/sessions/{id}/export.
func (c *Client) ExportSession(ctx context.Context, sessionID string, w io.Writer) error {
	res, err := c.rest(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(sessionID)+"/export", nil)
	if err != nil {
		return fmt.Errorf("session export: %w", err)
	}
	defer res.Body.Close()
	if _, err := io.Copy(w, res.Body); err != nil {
		return fmt.Errorf("session export: %w", err)
	}
	return nil
}

// ImportSession uploads a portable session file to the daemon's POST
// /v1/sessions/import; newID, when not "", is the id of the new session.
func (c *Client) ImportSession(ctx context.Context, r io.Reader, newID string) (Imported, error) {
	path := "/v1/sessions/import"
	if newID != "" {
		path += "?sessionId=" + url.QueryEscape(newID)
	}
	var out Imported
	res, err := c.rest(ctx, http.MethodPost, path, r)
	if err != nil {
		return out, fmt.Errorf("session import: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("session import: %w", err)
	}
	return out, nil
}

// rest makes a REST call to the daemon with the client's token; an answer
// other than 200 is returned as its *Error.
func (c *Client) rest(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	info := c.Info()
	base, _, hc, err := BaseURLs(info)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, err
	}
	token := info.Token
	if c.opts.Key != "" {
		token = c.opts.Key
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		e := &Error{}
		if err := json.NewDecoder(res.Body).Decode(e); err != nil {
			return nil, fmt.Errorf("HTTP %s", res.Status)
		}
		return nil, e
	}
	return res, nil
}
