package job

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/eventlog"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/sqlite"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/toolbox"
)

var runnerScript = `{"steps":[
 {"match":"hello","text":"Hello from the scripted model."},
 {"match":"slow","text":"` + strings.Repeat("slow ", 300) + `","delaySec":60},
 {"match":"run ls","text":"Running ls.","tool_calls":[{"name":"shell","arguments":{"command":"ls"}}]},
 {"after_tool":"shell","text":"That was the listing."},
 {"default":true,"text":"default answer"}
],"repeat":true}`

type oneProvider struct{ p llm.Provider }

func (p oneProvider) Open(string) (llm.Provider, error) { return p.p, nil }
func (p oneProvider) Default() string                   { return "fake" }

// newSessionRunner builds a SessionRunner over a real session service, a
// scripted model and an approval broker whose scheduled requests time out
// after 200 ms.
func newSessionRunner(t *testing.T) (*SessionRunner, store.Store, string) {
	t.Helper()
	home := t.TempDir()
	st, err := sqlite.Open(filepath.Join(home, "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fake.Parse([]byte(runnerScript))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewBuiltinRegistry(tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := eventlog.New(st)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var svc *session.Service
	broker := approval.NewBroker(st, func(id string) string { return svc.Origin(id) }, quiet,
		approval.BrokerOptions{Timeout: time.Hour, ScheduledTimeout: 200 * time.Millisecond})
	svc, err = session.NewService(context.Background(), session.Deps{
		Store: st, Events: log, Providers: oneProvider{fake.New(sc)},
		Toolbox:   toolbox.New(reg, filepath.Join(home, "out"), broker, approval.NewAllowlist(st, quiet)),
		Approvals: broker, Log: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Shutdown(context.Background())
		broker.Close()
		log.Close()
		st.Close()
	})
	return NewSessionRunner(svc, log), st, home
}

func TestSessionRunner(t *testing.T) {
	r, st, home := newSessionRunner(t)
	tests := []struct {
		name       string
		task       string
		cancelAt   string // cancel the run's context when this event kind is stored
		wantStatus string
		wantReason string
	}{
		{"completes", "hello", "", StatusOK, events.TurnDoneReasonComplete},
		{"approval times out", "run ls", "", StatusDeniedByTimeout, events.TurnDoneReasonComplete},
		{"interrupted", "slow", eventkind.MessageDelta, StatusError, events.TurnDoneReasonInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			var started string
			if tt.cancelAt != "" {
				// Interrupt once the turn has streamed something.
				r.events = cancelOn{Events: r.events, kind: tt.cancelAt, cancel: stop}
			}
			out, err := r.Run(runCtx, RunParams{JobID: "j-test", Task: tt.task, Mode: "accept", Workdir: home, Owner: "p-ann"},
				func(id string) { started = id })
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.wantStatus || out.Reason != tt.wantReason || out.SessionID != started || started == "" {
				t.Fatalf("outcome %+v (started %q), want %s/%s", out, started, tt.wantStatus, tt.wantReason)
			}
			row, err := st.GetSession(ctx, out.SessionID)
			if err != nil || row.Kind != store.KindScheduled || row.JobID != "j-test" || row.Mode != "accept" || row.Owner != "p-ann" {
				t.Fatalf("session row %+v %v", row, err)
			}
			evs, _ := st.ReadEvents(ctx, out.SessionID, 0, 0)
			if len(evs) == 0 || evs[len(evs)-1].Kind != eventkind.TurnDone {
				t.Fatalf("stored events end with %v", evs)
			}
		})
	}
	_, err := r.Run(context.Background(), RunParams{JobID: "j-test", Task: "hello", Mode: "accept", Workdir: filepath.Join(home, "gone")}, nil)
	if errs.CodeOf(err) != errcode.InvalidParams {
		t.Fatalf("run in a missing workdir: %v, want invalid_params", err)
	}
}

// cancelOn calls cancel when an event of kind is delivered to a
// subscription it opened.
type cancelOn struct {
	Events
	kind   string
	cancel context.CancelFunc
}

func (c cancelOn) Subscribe(ctx context.Context, id string, after int64) (*eventlog.Subscription, error) {
	sub, err := c.Events.Subscribe(ctx, id, after)
	if err != nil {
		return nil, err
	}
	watch, err := c.Events.Subscribe(ctx, id, after)
	if err != nil {
		return nil, err
	}
	go func() {
		defer watch.Close()
		for it := range watch.Items() {
			if it.Event != nil && it.Event.Kind == c.kind {
				c.cancel()
				return
			}
		}
	}()
	return sub, nil
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		reason   string
		timedOut bool
		want     string
	}{
		{events.TurnDoneReasonComplete, false, StatusOK},
		{events.TurnDoneReasonComplete, true, StatusDeniedByTimeout},
		{events.TurnDoneReasonDenied, true, StatusDeniedByTimeout},
		{events.TurnDoneReasonDenied, false, StatusError},
		{events.TurnDoneReasonInterrupted, false, StatusError},
		{events.TurnDoneReasonError, false, StatusError},
		{events.TurnDoneReasonBudget, false, StatusError},
	}
	for _, tt := range tests {
		if got := statusOf(tt.reason, tt.timedOut); got != tt.want {
			t.Errorf("statusOf(%s, %v) = %s, want %s", tt.reason, tt.timedOut, got, tt.want)
		}
	}
}
