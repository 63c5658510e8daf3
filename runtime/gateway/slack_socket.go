package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-run/trellis/protocol/ws"
)

// slackSocketEnvelope is one Socket Mode message: hello, disconnect,
// events_api (payload: an Events API body), interactive (payload: an
// interactive payload), slash_commands, ...
type slackSocketEnvelope struct {
	EnvelopeID string          `json:"envelope_id"`
	Type       string          `json:"type"`
	Reason     string          `json:"reason"`
	Payload    json.RawMessage `json:"payload"`
}

// parseSlackSocketEnvelope reads a Socket Mode message.
func parseSlackSocketEnvelope(raw []byte) (slackSocketEnvelope, error) {
	var env slackSocketEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return env, fmt.Errorf("not a Socket Mode envelope: %w", err)
	}
	if env.Type == "" {
		return env, errors.New("not a Socket Mode envelope: no type")
	}
	return env, nil
}

// errSlackDisconnect: Slack asked for a new connection.
var errSlackDisconnect = errors.New("slack asked to reconnect")

// runSlackSocket keeps b's Socket Mode session open until ctx ends: it
// opens a connection (apps.connections.open), reads its envelopes and, on a
// disconnect envelope or a dropped connection, opens a new one. Failures
// put the binding in state error and are retried with a capped backoff.
func (s *Service) runSlackSocket(ctx context.Context, b *binding) {
	backoff := time.Second
	for ctx.Err() == nil {
		err := s.slackSocketOnce(ctx, b)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSlackDisconnect) {
			backoff = time.Second
			continue
		}
		s.setState(b, err)
		s.log.Warn("slack socket mode connection failed", "bindingId", b.rec.BindingID, "err", s.scrub(b, err.Error()))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// slackSocketOnce serves one Socket Mode connection: each envelope is
// acknowledged (its envelope_id sent back) before it is handled.
func (s *Service) slackSocketOnce(ctx context.Context, b *binding) error {
	var r slackResponse
	if err := s.slackAPI(ctx, b, b.slack.appToken, "apps.connections.open", nil, &r); err != nil {
		return err
	}
	if r.URL == "" {
		return errors.New("slack apps.connections.open: no url in the answer")
	}
	conn, err := ws.Dial(ctx, r.URL, ws.Options{ReadLimit: 4 << 20, Log: s.log})
	if err != nil {
		// The URL carries a ticket: say where, not which.
		return errors.New("slack socket mode: dial the WebSocket URL apps.connections.open gave failed")
	}
	defer conn.Close()
	for {
		raw, err := conn.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("slack socket mode: the connection ended: %v", err)
		}
		env, err := parseSlackSocketEnvelope(raw)
		if err != nil {
			s.log.Warn("slack socket mode: skip a message", "bindingId", b.rec.BindingID, "err", err)
			continue
		}
		if env.EnvelopeID != "" {
			ack, _ := json.Marshal(map[string]string{"envelope_id": env.EnvelopeID})
			if err := conn.WriteMessage(ctx, ack); err != nil {
				return fmt.Errorf("slack socket mode: acknowledge envelope: %v", err)
			}
		}
		switch env.Type {
		case "hello":
			s.setState(b, nil)
		case "disconnect":
			s.log.Info("slack socket mode: reconnecting as asked", "bindingId", b.rec.BindingID, "reason", env.Reason)
			return errSlackDisconnect
		case "events_api":
			ev, err := parseSlackEnvelope(env.Payload)
			if err != nil || ev.Type != "event_callback" {
				continue
			}
			s.goSlack(func(ctx context.Context) { s.slackEventCallback(ctx, b, ev) })
		case "interactive":
			var a slackAction
			if json.Unmarshal(env.Payload, &a) != nil {
				continue
			}
			s.goSlack(func(ctx context.Context) { s.slackInteraction(ctx, b, a) })
		}
	}
}
