package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/skill"
)

// skillCommandList lists one built-in plus a command per installed skill,
// as the session service does.
type skillCommandList struct{ skills *skill.Service }

func (l skillCommandList) Commands(_ context.Context, id string) ([]session.Command, error) {
	out := []session.Command{{Name: "help", Source: "builtin", ArgsSchema: json.RawMessage(`{"type":"string"}`)}}
	for _, sk := range l.skills.List() {
		out = append(out, session.Command{Name: sk.Name, Summary: sk.Description, Source: "skill", ArgsSchema: json.RawMessage(`{"type":"string"}`)})
	}
	return out, nil
}

func writeSkillDir(t *testing.T, name, description string) string {
	t.Helper()
	dir := t.TempDir()
	body := fmt.Sprintf("---\nname: %s\ndescription: %s\n---\nDo the thing.\n", name, description)
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSkillServer(t *testing.T) {
	home := t.TempDir()
	svc, err := skill.New(skill.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	conn := serveForTest(t, func(s *grpc.Server) {
		trellisv1.RegisterSkillServiceServer(s, NewSkillServer(svc, skillCommandList{svc}))
	})
	c := trellisv1.NewSkillServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	watch, err := c.WatchCommands(ctx, &trellisv1.WatchCommandsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}
	next := func(reason string) *trellisv1.CommandsChanged {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetChanged().GetReason(); got != reason {
			t.Fatalf("commands.changed reason %q, want %q", got, reason)
		}
		return resp.GetChanged()
	}

	src := writeSkillDir(t, "triage", "Triage bug reports")
	if _, err := c.InstallSkill(ctx, &trellisv1.InstallSkillRequest{Source: src}); err != nil {
		t.Fatal(err)
	}
	changed := next(skill.ReasonInstall)
	if n := len(changed.GetCommands()); n != 2 || changed.GetCommands()[1].GetName() != "triage" || changed.GetCommands()[1].GetSource() != "skill" {
		t.Fatalf("commands after install: %v", changed.GetCommands())
	}
	list, err := c.ListSkills(ctx, &trellisv1.ListSkillsRequest{})
	if err != nil || len(list.GetSkills()) != 1 {
		t.Fatalf("ListSkills = %v, %v", list, err)
	}
	if sk := list.GetSkills()[0]; sk.GetName() != "triage" || sk.GetDescription() != "Triage bug reports" ||
		sk.GetSource() != src || sk.GetPath() != filepath.Join(home, "skills", "triage") || !sk.GetInstalled() {
		t.Fatalf("skill %v", sk)
	}
	found, err := c.SearchSkills(ctx, &trellisv1.SearchSkillsRequest{Query: "bug"})
	if err != nil || len(found.GetSkills()) != 1 {
		t.Fatalf("SearchSkills = %v, %v", found, err)
	}

	if _, err := c.ReloadSkills(ctx, &trellisv1.ReloadSkillsRequest{}); err != nil {
		t.Fatal(err)
	}
	next(skill.ReasonReload)
	if _, err := c.RemoveSkill(ctx, &trellisv1.RemoveSkillRequest{Name: "triage"}); err != nil {
		t.Fatal(err)
	}
	if changed := next(skill.ReasonRemove); len(changed.GetCommands()) != 1 {
		t.Fatalf("commands after remove: %v", changed.GetCommands())
	}

	_, err = c.RemoveSkill(ctx, &trellisv1.RemoveSkillRequest{Name: "triage"})
	wantStatus(t, err, codes.NotFound, "not_found")
	_, err = c.InstallSkill(ctx, &trellisv1.InstallSkillRequest{Source: writeSkillDir(t, "Bad Name", "x")})
	wantStatus(t, err, codes.InvalidArgument, "invalid_params")
	_, err = c.InstallSkill(ctx, &trellisv1.InstallSkillRequest{})
	wantStatus(t, err, codes.InvalidArgument, "invalid_params")

	// Closing the service ends the stream cleanly.
	svc.Close()
	if _, err := watch.Recv(); err == nil {
		t.Fatal("the watch went on after Close")
	}
}
