package rpc

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/skill"
)

// CommandLister lists slash commands (session.Service.Commands); "" lists
// those of no session: the built-ins and the skills'.
type CommandLister interface {
	Commands(ctx context.Context, sessionID string) ([]session.Command, error)
}

// SkillServer implements trellisv1.SkillServiceServer over the skill service.
type SkillServer struct {
	trellisv1.UnsafeSkillServiceServer
	skills   *skill.Service
	commands CommandLister
}

// NewSkillServer returns the skill service; commands fills the command
// list of commands.changed.
func NewSkillServer(skills *skill.Service, commands CommandLister) *SkillServer {
	return &SkillServer{skills: skills, commands: commands}
}

// ListSkills lists the installed skills.
func (s *SkillServer) ListSkills(context.Context, *trellisv1.ListSkillsRequest) (*trellisv1.ListSkillsResponse, error) {
	return &trellisv1.ListSkillsResponse{Skills: skillsToProto(s.skills.List())}, nil
}

// SearchSkills searches the installed skills and the catalog.
func (s *SkillServer) SearchSkills(_ context.Context, req *trellisv1.SearchSkillsRequest) (*trellisv1.SearchSkillsResponse, error) {
	return &trellisv1.SearchSkillsResponse{Skills: skillsToProto(s.skills.Search(req.GetQuery()))}, nil
}

// InstallSkill installs a skill from a folder, an archive or a git URL.
func (s *SkillServer) InstallSkill(ctx context.Context, req *trellisv1.InstallSkillRequest) (*trellisv1.InstallSkillResponse, error) {
	if _, err := s.skills.Install(ctx, req.GetSource()); err != nil {
		return nil, err
	}
	return &trellisv1.InstallSkillResponse{Ok: true}, nil
}

// RemoveSkill removes an installed skill.
func (s *SkillServer) RemoveSkill(_ context.Context, req *trellisv1.RemoveSkillRequest) (*trellisv1.RemoveSkillResponse, error) {
	if err := s.skills.Remove(req.GetName()); err != nil {
		return nil, err
	}
	return &trellisv1.RemoveSkillResponse{Ok: true}, nil
}

// ReloadSkills reads the installed skills from disk again.
func (s *SkillServer) ReloadSkills(context.Context, *trellisv1.ReloadSkillsRequest) (*trellisv1.ReloadSkillsResponse, error) {
	if err := s.skills.Reload(); err != nil {
		return nil, err
	}
	return &trellisv1.ReloadSkillsResponse{Ok: true}, nil
}

// WatchCommands streams commands.changed: after each install, removal or
// reload, the commands of no session (built-ins and skills) and the reason.
// A watcher that falls too far behind is ended with overloaded.
func (s *SkillServer) WatchCommands(_ *trellisv1.WatchCommandsRequest, stream grpc.ServerStreamingServer[trellisv1.WatchCommandsResponse]) error {
	ctx := stream.Context()
	w := s.skills.Watch(ctx)
	// The headers tell the client that it is watching: changes from now
	// on reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for ev := range w.Events() {
		cmds, err := s.commands.Commands(ctx, "")
		if err != nil {
			return err
		}
		if err := stream.Send(&trellisv1.WatchCommandsResponse{Changed: &trellisv1.CommandsChanged{
			Commands: commandsToProto(cmds), Reason: ev.Reason,
		}}); err != nil {
			return err
		}
	}
	if errors.Is(w.Err(), skill.ErrLagged) {
		return errs.New(errcode.Overloaded, "this commands watcher fell too far behind and was dropped: watch again, then call command.list")
	}
	return nil
}

func skillsToProto(ss []skill.Skill) []*trellisv1.Skill {
	out := make([]*trellisv1.Skill, 0, len(ss))
	for _, sk := range ss {
		out = append(out, &trellisv1.Skill{
			Name: sk.Name, Description: sk.Description, Source: sk.Source, Path: sk.Path, Installed: sk.Installed,
		})
	}
	return out
}

func commandsToProto(cmds []session.Command) []*trellisv1.Command {
	out := make([]*trellisv1.Command, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, &trellisv1.Command{
			Name: c.Name, Summary: c.Summary, ArgsSchema: toStruct(c.ArgsSchema), Source: c.Source,
		})
	}
	return out
}

// ReadSkill returns an installed skill's SKILL.md.
func (s *SkillServer) ReadSkill(_ context.Context, req *trellisv1.ReadSkillRequest) (*trellisv1.ReadSkillResponse, error) {
	if err := checkWorkdir(req.Workdir); err != nil {
		return nil, err
	}
	content, path, err := s.skills.Read(req.GetName())
	if err != nil {
		return nil, err
	}
	return &trellisv1.ReadSkillResponse{Content: content, Path: path, Scope: "global"}, nil
}

// WriteSkill replaces an installed skill's SKILL.md.
func (s *SkillServer) WriteSkill(_ context.Context, req *trellisv1.WriteSkillRequest) (*trellisv1.WriteSkillResponse, error) {
	if err := checkSkillScope(req.GetScope()); err != nil {
		return nil, err
	}
	if err := checkWorkdir(req.Workdir); err != nil {
		return nil, err
	}
	if _, err := s.skills.Write(req.GetName(), req.GetContent()); err != nil {
		return nil, err
	}
	return &trellisv1.WriteSkillResponse{Ok: true}, nil
}

// CreateSkill writes a new skill from a SKILL.md given verbatim.
func (s *SkillServer) CreateSkill(_ context.Context, req *trellisv1.CreateSkillRequest) (*trellisv1.CreateSkillResponse, error) {
	if err := checkSkillScope(req.GetScope()); err != nil {
		return nil, err
	}
	if err := checkWorkdir(req.Workdir); err != nil {
		return nil, err
	}
	if req.Content == nil {
		if req.GetDescription() != "" {
			return nil, errs.NewUnsupported("description", "", "generating a skill from a description is not supported: write the SKILL.md and pass it as content")
		}
		return nil, errs.New(errcode.InvalidParams, "content is required: the whole SKILL.md of the new skill")
	}
	sk, err := s.skills.Create(req.GetName(), req.GetContent(), req.GetForce())
	if err != nil {
		return nil, err
	}
	path := filepath.Join(sk.Path, skill.ManifestFile)
	return &trellisv1.CreateSkillResponse{Name: &sk.Name, Path: &path}, nil
}

// checkSkillScope refuses snowpea's project scope: Trellis skills are the
// daemon's.
func checkSkillScope(scope string) error {
	if scope == "" || scope == "global" {
		return nil
	}
	return errs.NewUnsupported("scope", scope, "scope %q is not supported: Trellis skills are installed for the daemon (\"global\")", scope)
}

// checkWorkdir: a workdir a snowpea client names must be an existing
// directory.
func checkWorkdir(workdir *string) error {
	if workdir == nil || *workdir == "" {
		return nil
	}
	fi, err := os.Stat(*workdir)
	if err != nil || !fi.IsDir() {
		return errs.New(errcode.NotFound, "workdir %s is not an existing directory", *workdir)
	}
	return nil
}
