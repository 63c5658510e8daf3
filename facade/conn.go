package facade

import (
	"errors"
	"net/http"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// wsConn is one WebSocket client connection.
type wsConn struct {
	authed atomic.Bool
}

func (c *wsConn) authenticated() bool { return c.authed.Load() }

func (c *wsConn) close(reason string) {}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "WebSocket not wired yet", http.StatusServiceUnavailable)
}

func statusOf(err error) (codes.Code, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code(), true
	}
	return codes.Unknown, false
}
