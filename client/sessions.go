package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/jsonrpc"
)

// CreateSessionParams are the params of session.create.
type CreateSessionParams struct {
	Workdir  string `json:"workdir"`
	Mode     string `json:"mode,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Agent    string `json:"agent,omitempty"`
}

// SessionSummary is one row of session.list.
type SessionSummary struct {
	SessionID        string  `json:"sessionId"`
	Workdir          string  `json:"workdir"`
	Mode             string  `json:"mode"`
	Provider         *string `json:"provider"`
	Model            *string `json:"model"`
	CreatedAt        string  `json:"createdAt"`
	Seq              int64   `json:"seq"`
	Kind             string  `json:"kind"`
	ParentSessionID  *string `json:"parentSessionId"`
	JobID            *string `json:"jobId"`
	Agent            *string `json:"agent"`
	Status           string  `json:"status"`
	Running          bool    `json:"running"`
	Title            *string `json:"title"`
	LastPrompt       *string `json:"lastPrompt"`
	LastActivityAt   *string `json:"lastActivityAt"`
	PendingApprovals int     `json:"pendingApprovals"`
}

// ResumeResult is the result of session.resume: the session's settings and
// its stored events after the requested seq.
type ResumeResult struct {
	SessionID string  `json:"sessionId"`
	Mode      string  `json:"mode"`
	Provider  string  `json:"provider"`
	Model     string  `json:"model"`
	Events    []Event `json:"-"`
}

// CreateSession creates a session (the connection becomes its origin, so
// its approval requests come to Options.Approve) and subscribes to its
// events from the first one.
func (c *Client) CreateSession(ctx context.Context, p CreateSessionParams) (*Subscription, error) {
	var r struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session.create", p, &r); err != nil {
		return nil, err
	}
	s := c.stream(r.SessionID)
	s.start(1)
	return &Subscription{s: s}, nil
}

// ListSessions calls session.list.
func (c *Client) ListSessions(ctx context.Context, includeClosed bool, workdir string) ([]SessionSummary, error) {
	return c.listSessions(ctx, map[string]any{"includeClosed": includeClosed}, workdir)
}

// ListArchivedSessions calls session.list for the archived sessions
// (closed ones included), newest first.
func (c *Client) ListArchivedSessions(ctx context.Context, workdir string) ([]SessionSummary, error) {
	return c.listSessions(ctx, map[string]any{"includeClosed": true, "archived": true}, workdir)
}

// listSessions calls session.list with params and, when workdir is not
// "", the workdir the sessions must be in.
func (c *Client) listSessions(ctx context.Context, params map[string]any, workdir string) ([]SessionSummary, error) {
	if workdir != "" {
		params["workdir"] = workdir
	}
	var r struct {
		Sessions []SessionSummary `json:"sessions"`
	}
	if err := c.Call(ctx, "session.list", params, &r); err != nil {
		return nil, err
	}
	return r.Sessions, nil
}

// Session returns the summary of one session (closed ones included); an
// unknown id is a not_found *Error.
func (c *Client) Session(ctx context.Context, sessionID string) (SessionSummary, error) {
	sessions, err := c.ListSessions(ctx, true, "")
	if err != nil {
		return SessionSummary{}, err
	}
	for _, s := range sessions {
		if s.SessionID == sessionID {
			return s, nil
		}
	}
	return SessionSummary{}, errcode.New(errcode.NotFound, "session %s not found", sessionID)
}

// Resume calls session.resume: it returns the stored events with seq >
// afterSeq and a subscription to the events after them.
func (c *Client) Resume(ctx context.Context, sessionID string, afterSeq int64) (ResumeResult, *Subscription, error) {
	res, s, err := c.resume(ctx, sessionID, afterSeq)
	if err != nil {
		return ResumeResult{}, nil, err
	}
	next := afterSeq + 1
	if n := len(res.Events); n > 0 {
		next = res.Events[n-1].Seq + 1
	}
	s.start(next)
	return res, &Subscription{s: s}, nil
}

// Attach subscribes to a session's events from its latest one on (the
// events of a turn that runs now arrive from where it is). Like every
// resume, it makes this connection the session's origin if the old one is
// gone.
func (c *Client) Attach(ctx context.Context, sessionID string) (*Subscription, error) {
	summary, err := c.Session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	latest := summary.Seq
	res, s, err := c.resume(ctx, sessionID, latest)
	if err != nil {
		return nil, err
	}
	// Events stored between the list and the resume belong to the
	// subscription too: they are delivered before the live ones.
	s.start(latest+1, res.Events...)
	return &Subscription{s: s}, nil
}

// resume calls session.resume and returns the stream of the session, not
// started yet: live events wait in it until the caller sets the start.
func (c *Client) resume(ctx context.Context, sessionID string, afterSeq int64) (ResumeResult, *stream, error) {
	conn, err := c.current(ctx)
	if err != nil {
		return ResumeResult{}, nil, fmt.Errorf("session.resume: %w", err)
	}
	res, err := c.resumeCall(ctx, conn, sessionID, afterSeq)
	if err != nil {
		return ResumeResult{}, nil, err
	}
	return res, c.stream(sessionID), nil
}

// resumeOn calls session.resume on conn and returns the stored events.
func (c *Client) resumeOn(ctx context.Context, conn *jsonrpc.Conn, sessionID string, afterSeq int64) ([]Event, error) {
	res, err := c.resumeCall(ctx, conn, sessionID, afterSeq)
	return res.Events, err
}

func (c *Client) resumeCall(ctx context.Context, conn *jsonrpc.Conn, sessionID string, afterSeq int64) (ResumeResult, error) {
	var r struct {
		ResumeResult
		Events []json.RawMessage `json:"events"`
	}
	err := c.rawCall(ctx, conn, "session.resume", map[string]any{"sessionId": sessionID, "afterSeq": afterSeq}, &r)
	if err != nil {
		return ResumeResult{}, err
	}
	res := r.ResumeResult
	for _, raw := range r.Events {
		ev, err := decodeEvent(raw)
		if err != nil {
			return ResumeResult{}, fmt.Errorf("session.resume: %w", err)
		}
		res.Events = append(res.Events, ev)
	}
	return res, nil
}

// Subscription returns the subscription to a session this client created,
// resumed or attached to, attaching first if it has none.
func (c *Client) Subscription(ctx context.Context, sessionID string) (*Subscription, error) {
	if s := c.stream(sessionID); s.started() {
		return &Subscription{s: s}, nil
	}
	return c.Attach(ctx, sessionID)
}

// Prompt sends a prompt (session.prompt) and returns its turn id; the output
// arrives on the session's subscription, which Prompt opens with Attach if
// the client has none yet.
func (c *Client) Prompt(ctx context.Context, sessionID, text string) (string, error) {
	return c.promptCall(ctx, "session.prompt", sessionID, text, nil)
}

// Steer sends text into the session's running turn (session.steer): its
// model reads it at its next call. With no turn to steer the text starts a
// turn of its own (started). turnID is the turn the text went into, or the
// one it started; as Prompt, it subscribes to the session first.
func (c *Client) Steer(ctx context.Context, sessionID, text string) (turnID string, started bool, err error) {
	turnID, err = c.promptCall(ctx, "session.steer", sessionID, text, &started)
	return turnID, started, err
}

// promptCall calls session.prompt or session.steer once subscribed to the
// session; started, when set, receives the answer's started.
func (c *Client) promptCall(ctx context.Context, method, sessionID, text string, started *bool) (string, error) {
	if _, err := c.Subscription(ctx, sessionID); err != nil {
		return "", err
	}
	var r struct {
		TurnID  string `json:"turnId"`
		Started bool   `json:"started"`
	}
	if err := c.Call(ctx, method, map[string]any{"sessionId": sessionID, "text": text}, &r); err != nil {
		return "", err
	}
	if started != nil {
		*started = r.Started
	}
	return r.TurnID, nil
}

// Interrupt stops the session's running turn (session.interrupt).
func (c *Client) Interrupt(ctx context.Context, sessionID string) error {
	return c.Call(ctx, "session.interrupt", map[string]any{"sessionId": sessionID}, nil)
}
