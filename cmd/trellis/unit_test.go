package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/client"
)

func event(kind, payload string) client.Event {
	raw := `{"sessionId":"s-1","seq":1,"kind":"` + kind + `","payload":` + payload + `,"ts":"2026-01-01T00:00:00.000Z"}`
	return client.Event{SessionID: "s-1", Seq: 1, Kind: kind, Payload: json.RawMessage(payload), Raw: json.RawMessage(raw)}
}

// TestTextOutput pins the text mode: the answer's chunks, a line break
// between the texts of two provider calls, one newline at the end.
func TestTextOutput(t *testing.T) {
	delta := func(s string) client.Event { return event("message.delta", `{"text":`+quote(s)+`}`) }
	tests := []struct {
		name string
		in   []client.Event
		want string
	}{
		{"chunks", []client.Event{delta("Hel"), delta("lo")}, "Hello\n"},
		{"already ends a line", []client.Event{delta("Hello\n")}, "Hello\n"},
		{"nothing", nil, ""},
		{"two provider calls", []client.Event{
			delta("Let me look."),
			event("step.done", `{"step":0}`),
			event("tool.call", `{"callId":"c","name":"ls","args":{}}`),
			event("tool.result", `{"callId":"c","name":"ls","ok":true,"output":"x","error":null}`),
			delta("Done."),
		}, "Let me look.\nDone.\n"},
		{"other kinds print nothing", []client.Event{
			event("turn.started", `{"turnId":"t-1","prompt":"p","queued":false}`),
			event("message.reasoning", `{"text":"hmm"}`),
			event("usage", `{"inputTokens":1,"outputTokens":2}`),
			delta("A"),
			event("turn.done", `{"turnId":"t-1","reason":"complete","synthetic":false}`),
		}, "A\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			o := newTranscript(&b, io.Discard, false)
			for _, ev := range tc.in {
				if err := o.event(ev); err != nil {
					t.Fatal(err)
				}
			}
			if err := o.end(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// TestRetryLine: a provider.retry event is one line on the info stream
// (stderr), saying what failed and when the next try comes; the answer's
// text is unchanged.
func TestRetryLine(t *testing.T) {
	var text, info strings.Builder
	o := newTranscript(&text, &info, false)
	for _, ev := range []client.Event{
		event("provider.retry", `{"turnId":"t-1","attempt":1,"waitMs":2000,"reason":"rate_limited","status":429,"provider":"openai","model":"gpt-4.1","message":"Rate limit reached"}`),
		event("message.delta", `{"text":"ok"}`),
	} {
		if err := o.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.end(); err != nil {
		t.Fatal(err)
	}
	if want := "↻ openai/gpt-4.1 rate limited (Rate limit reached); trying again in 2.0 s (attempt 2)\n"; info.String() != want {
		t.Fatalf("info %q, want %q", info.String(), want)
	}
	if text.String() != "ok\n" {
		t.Fatalf("text %q", text.String())
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestNewOutputModes(t *testing.T) {
	for _, mode := range modes {
		if _, err := newOutput(mode, &strings.Builder{}, sessionInfo{ID: "s-1", Workdir: "/"}); err != nil {
			t.Errorf("mode %s: %v", mode, err)
		}
	}
	_, err := newOutput("xml", &strings.Builder{}, sessionInfo{})
	if !errors.As(err, new(usageError)) {
		t.Fatalf("mode xml: %v, want a usage error", err)
	}
}

func TestTurnExit(t *testing.T) {
	tests := []struct {
		reason string
		denied int
		code   int
	}{
		{"complete", 0, exitOK},
		{"complete", 1, exitDenied},
		{"interrupted", 0, exitInterrupted},
		{"error", 0, exitFailed},
		{"denied", 3, exitDenied},
		{"budget", 0, exitFailed},
		{"something new", 0, exitFailed},
	}
	for _, tc := range tests {
		err := turnExit(tc.reason, tc.denied)
		code := exitOK
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if code != tc.code {
			t.Errorf("reason %s: exit %d, want %d", tc.reason, code, tc.code)
		}
	}
}

// TestProcessAlive pins that a zombie counts as gone: trellis stop waits
// for a daemon whose parent (init) may reap it late.
func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("no true command:", err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("an exited, unreaped child still counts as alive")
		}
		time.Sleep(10 * time.Millisecond) // bounded poll: the child exits on its own
	}
	if processAlive(-1) || processAlive(0) {
		t.Fatal("pids <= 0 count as alive")
	}
}

// TestPausedLine: turn.paused and turn.resumed are one line each on the
// info stream, saying which budget is reached, what was spent and how to
// go on.
func TestPausedLine(t *testing.T) {
	var text, info strings.Builder
	o := newTranscript(&text, &info, false)
	for _, ev := range []client.Event{
		event("turn.paused", `{"turnId":"t-1","reason":"budget_reached","budget":{"maxCostMicroUsd":50000,"maxTokens":9000,"source":"session"},"spent":{"costMicroUsd":200160,"tokens":100020}}`),
		event("turn.resumed", `{"turnId":"t-1","budget":{"maxCostMicroUsd":9000000,"source":"session"},"spent":{"costMicroUsd":200160,"tokens":100020}}`),
		event("turn.paused", `{"turnId":"t-1","reason":"budget_reached","budget":{"maxCostMicroUsd":50000,"source":"principal","principalId":"p-1"},"spent":{"costMicroUsd":200160,"tokens":100020}}`),
		event("message.delta", `{"text":"ok"}`),
	} {
		if err := o.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.end(); err != nil {
		t.Fatal(err)
	}
	want := "⏸ paused: the session's budget (cost $0.050000, 9000 tokens) is reached (spent $0.200160, 100020 tokens); raise it with trellis sessions budget or allow its request (trellis approvals ls), or interrupt\n" +
		"▶ the budget was raised: the turn goes on\n" +
		"⏸ paused: the budget of principal p-1, for all its sessions, (cost $0.050000) is reached (spent $0.200160, 100020 tokens); an admin raises it with trellis principals budget or allows its request (trellis approvals ls), or interrupt\n"
	if info.String() != want {
		t.Fatalf("info %q, want %q", info.String(), want)
	}
	if text.String() != "ok\n" {
		t.Fatalf("text %q", text.String())
	}
}

// TestDescribeCall: a tool call reads as the tool and its args (cut at 200
// bytes); a paused turn's budget request reads as the raise an allow makes.
func TestDescribeCall(t *testing.T) {
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"shell", `{"command":"ls"}`, `shell {"command":"ls"}`},
		{"list_dir", `{}`, "list_dir"},
		{"budget", `{"reason":"budget_reached","budget":{"maxTokens":0,"source":"session"},"raiseTo":{"maxTokens":1893}}`, "budget: raise to 1893 tokens"},
		{"budget", `{"raiseTo":{"maxCostMicroUsd":250160,"maxTokens":9000}}`, "budget: raise to cost $0.250160, 9000 tokens"},
		{"budget", `{"raiseTo":{}}`, `budget {"raiseTo":{}}`},
	} {
		if got := describeCall(tc.tool, json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("describeCall(%s, %s) = %q, want %q", tc.tool, tc.args, got, tc.want)
		}
	}
}
