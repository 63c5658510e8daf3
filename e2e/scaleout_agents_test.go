package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestPostgresScaleOutAgentDefinitions: on a PostgreSQL store the agent
// definitions are the cluster's, in the database. One created through A is
// listed and spawned through B, with a copy in B's home as its path; two
// daemons creating one name at once make exactly one; a delete through B
// is seen by A, whose copy goes too.
func TestPostgresScaleOutAgentDefinitions(t *testing.T) {
	_, procs := startCluster(t, 2)
	ctx := context.Background()
	a, b := dialInfo(t, procs[0].info), dialInfo(t, procs[1].info)

	var made struct{ Name, Path string }
	if err := a.Call(ctx, "agent.create", map[string]any{"name": "reviewer", "description": "Reviews diffs",
		"instructions": "Review carefully.", "tools": []string{"read_file"}}, &made); err != nil {
		t.Fatalf("agent.create on A: %v", err)
	}
	if made.Path != filepath.Join(procs[0].home, "agents", "reviewer.md") {
		t.Fatalf("path %q, want the copy in A's home", made.Path)
	}
	if body, err := os.ReadFile(made.Path); err != nil || !strings.Contains(string(body), "Review carefully.") {
		t.Fatalf("A's copy: %q %v", body, err)
	}

	// B lists it, with its own copy.
	rows := listAgents(t, b)
	bPath := filepath.Join(procs[1].home, "agents", "reviewer.md")
	if len(rows) != 1 || rows[0].Name != "reviewer" || rows[0].Description != "Reviews diffs" || rows[0].Path == nil || *rows[0].Path != bPath {
		t.Fatalf("agent.list on B: %+v, want reviewer at %s", rows, bPath)
	}
	if body, err := os.ReadFile(bPath); err != nil || !strings.Contains(string(body), "Review carefully.") {
		t.Fatalf("B's copy: %q %v", body, err)
	}
	// B spawns it.
	parent := createSession(t, b, nil)
	var spawned struct {
		AgentID string `json:"agentId"`
	}
	if err := b.Call(ctx, "agent.spawn", map[string]any{"name": "reviewer", "task": "say hello", "sessionId": parent}, &spawned); err != nil {
		t.Fatalf("agent.spawn on B of A's definition: %v", err)
	}
	evs := collect(t, b.Events(parent), "subagent.done", 1)
	if sp := payloadOf(evs[0]); sp["agentId"] != spawned.AgentID || sp["name"] != "reviewer" {
		t.Fatalf("subagent.spawn on B: %v", sp)
	}
	// A session of the agent on B carries the agent's name.
	var sessions struct {
		Sessions []struct {
			Agent string `json:"agent"`
			Kind  string `json:"kind"`
		} `json:"sessions"`
	}
	if err := b.Call(ctx, "session.list", map[string]any{"includeClosed": true}, &sessions); err != nil {
		t.Fatal(err)
	}
	agentSessions := 0
	for _, s := range sessions.Sessions {
		if s.Agent == "reviewer" {
			agentSessions++
		}
	}
	if agentSessions != 1 {
		t.Fatalf("sessions of agent reviewer: %d (%+v), want 1", agentSessions, sessions.Sessions)
	}

	// Both daemons create one name at once, 5 times: one wins each time.
	for i := range 5 {
		name := "twin-" + string(rune('a'+i))
		var wg sync.WaitGroup
		errsOf := make([]error, 2)
		for k, c := range []*grpcClient{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Call(ctx, "agent.create", map[string]any{"name": name, "description": "made by " + string(rune('A'+k))}, nil); err != nil {
					if !err.HasCode("invalid_params") || !strings.Contains(err.Message, "already exists") {
						t.Errorf("create %s on daemon %d: %v, want ok or invalid_params already exists", name, k, err)
					}
					errsOf[k] = err
				}
			}()
		}
		wg.Wait()
		if (errsOf[0] == nil) == (errsOf[1] == nil) {
			t.Fatalf("create %s on both daemons at once: errors %v, %v; want exactly one to succeed", name, errsOf[0], errsOf[1])
		}
	}
	defs := 0
	for _, r := range listAgents(t, a) {
		if r.Kind == "definition" {
			defs++
		}
	}
	if defs != 6 {
		t.Fatalf("A lists %d definitions, want 6", defs)
	}

	// A delete through B is seen by A, whose copy goes.
	if err := b.Call(ctx, "agent.delete", map[string]any{"name": "reviewer"}, nil); err != nil {
		t.Fatalf("agent.delete on B: %v", err)
	}
	for _, r := range listAgents(t, a) {
		if r.Name == "reviewer" {
			t.Fatalf("A lists reviewer after B deleted it")
		}
	}
	if _, err := os.Stat(made.Path); !os.IsNotExist(err) {
		t.Fatalf("A's copy after the delete: %v, want it gone", err)
	}
	if err := a.Call(ctx, "agent.spawn", map[string]any{"name": "reviewer", "task": "x", "sessionId": createSession(t, a, nil)}, nil); err == nil || !err.HasCode("not_found") {
		t.Fatalf("agent.spawn on A of the deleted agent: %v, want not_found", err)
	}
	if err := a.Call(ctx, "agent.delete", map[string]any{"name": "reviewer"}, nil); err == nil || !err.HasCode("not_found") {
		t.Fatalf("second delete: %v, want not_found", err)
	}
}
