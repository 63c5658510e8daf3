package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/errcode"
)

// newJobsCmd is `trellis jobs`: prompts the daemon runs on a schedule.
func newJobsCmd(a *app) *cobra.Command {
	cmd := groupCmd("jobs", "job", "Schedule prompts, run them now, cancel them and see their runs")
	cmd.AddCommand(newJobsLsCmd(a), newJobsScheduleCmd(a), newJobsRunCmd(a), newJobsCancelCmd(a), newJobsHistoryCmd(a))
	return cmd
}

func newJobsLsCmd(a *app) *cobra.Command {
	return listCmd(a, "List the jobs you may see, newest first, with their last run", client.Calls.JobList, "job.list",
		"JOB\tSTATE\tSPEC\tNEXT RUN\tLAST RUN\tLAST STATUS\tTASK", func(tw io.Writer, r *trellisv1.ListJobsResponse) {
			for _, j := range r.GetJobs() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.GetJobId(), j.GetState(), j.GetSpec(), orDash(j.NextRunAt), orDash(j.LastRunAt),
					orDash(j.LastStatus), shorten(j.GetTask(), 40))
			}
		})
}

func newJobsScheduleCmd(a *app) *cobra.Command {
	var mode, workdir, agent, channel string
	cmd := &cobra.Command{
		Use:   "schedule SPEC TASK",
		Short: "Schedule TASK (a prompt) to run on SPEC, e.g. '@every 1h', '0 9 * * 1-5', 'every day at 9am', 'once 2030-01-02T15:04:05Z'",
		Long: `Schedule a job: the daemon runs TASK as a prompt in a new session at every time
SPEC names. SPEC is a 5-field cron expression ("*/5 * * * *", optionally after
CRON_TZ=<zone>), @hourly, @daily, @weekly, @every <duration> ("@every 10m"),
once <RFC 3339 time>, or words such as "every 15 minutes", "weekdays at 18:30".
Times are UTC unless after CRON_TZ=<zone>.

Nobody is at the terminal when a job runs: its tool calls that need approval
wait in the unattended queue (trellis approvals ls). The job id is printed on
stdout.`,
		Args: exactArgs(2),
		PreRunE: func(*cobra.Command, []string) error {
			switch mode {
			case "plan", "accept", "auto":
				return nil
			}
			return usageError{fmt.Errorf("--permission-mode %q: want plan, accept or auto", mode)}
		},
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			params := &trellisv1.ScheduleJobRequest{Spec: args[0], Task: args[1], Mode: &mode}
			// --workdir '': none, so the daemon's default (a managed
			// workdir per run unless trellisd has a --workdir).
			if workdir != "" {
				wd, err := filepath.Abs(workdir)
				if err != nil {
					return err
				}
				if st, err := os.Stat(wd); err != nil || !st.IsDir() {
					return usageError{fmt.Errorf("--workdir %s: not a directory", workdir)}
				}
				params.Workdir = &wd
			}
			if agent != "" {
				params.Agent = &agent
			}
			if channel != "" {
				params.Channel = &channel
			}
			r, err := c.Calls().JobSchedule(ctx, params)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, r.GetJobId())
			if r.NextRunAt != nil {
				fmt.Fprintf(a.stderr, "trellis: scheduled %s; its first run is at %s\n", r.GetJobId(), r.GetNextRunAt())
			} else {
				fmt.Fprintf(a.stderr, "trellis: scheduled %s; it has no run ahead (trellis jobs run %s runs it now)\n", r.GetJobId(), r.GetJobId())
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&mode, "permission-mode", "accept", "the permission mode of its runs: plan, accept or auto")
	// --permission-mode is the name trellis run and chat use; --mode stays
	// a synonym.
	cmd.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "mode" {
			name = "permission-mode"
		}
		return pflag.NormalizedName(name)
	})
	cmd.Flags().StringVar(&workdir, "workdir", ".", "working directory of its runs; '' = the daemon's default: a managed workdir of its own for each run, unless trellisd has a --workdir (docs/workspaces.md)")
	cmd.Flags().StringVar(&agent, "agent", "", "an agent definition whose instructions, model and tools apply to each run")
	cmd.Flags().StringVar(&channel, "channel", "", "a gateway binding that receives each run's final answer (operators and admins)")
	return cmd
}

// Exit statuses of trellis jobs run follow the run's status.
var runStatusExit = map[string]int{"ok": exitOK, "error": exitFailed, "denied_by_timeout": exitDenied}

func newJobsRunCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run JOB",
		Short: "Run a job now and wait for that run to end (exit 1 if it failed, 3 if an approval timed out)",
		Args:  exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			stop := a.spin("running " + args[0])
			r, err := c.Calls().JobRunNow(ctx, &trellisv1.RunJobNowRequest{JobId: args[0]})
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(a.stdout, protocolJSON(r)); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.stdout, "%s\t%s\n", r.GetSessionId(), r.GetStatus())
			}
			code, known := runStatusExit[r.GetStatus()]
			if !known {
				code = exitFailed
			}
			if code != exitOK {
				return &exitError{code: code, msg: fmt.Sprintf("the run of %s ended with %s: trellis sessions show %s shows what happened", args[0], r.GetStatus(), r.GetSessionId())}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job.runNow result as JSON")
	return cmd
}

func newJobsCancelCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel JOB...",
		Short: "Cancel jobs: no more runs, a running run is interrupted; their history is kept",
		Args:  minArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, ids []string) error {
			return a.eachID(ids, "cancelled", "jobs", func(id string) error {
				_, err := c.Calls().JobCancel(ctx, &trellisv1.CancelJobRequest{JobId: id})
				return err
			})
		}),
	}
}

// jobRun is one run of a job in trellis jobs history: the session it ran
// in.
type jobRun struct {
	SessionID      string  `json:"sessionId"`
	StartedAt      string  `json:"startedAt"`
	LastActivityAt *string `json:"lastActivityAt"`
	Status         string  `json:"status"`
	// Outcome is the run's status (ok, error, denied_by_timeout) where the
	// daemon tells it: for the job's last run only.
	Outcome *string `json:"outcome"`
}

func newJobsHistoryCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history JOB",
		Short: "List a job's runs (the sessions they ran in), newest first",
		Args:  exactArgs(1),
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, args []string) error {
			id := strings.TrimSpace(args[0])
			jobs, err := c.Calls().JobList(ctx, nil)
			if err != nil {
				return err
			}
			var j *trellisv1.Job
			for _, cand := range jobs.GetJobs() {
				if cand.GetJobId() == id {
					j = cand
				}
			}
			if j == nil {
				return errcode.New(errcode.NotFound, "job %s not found (trellis jobs ls lists them)", id)
			}
			sessions, err := c.ListSessions(ctx, true, "")
			if err != nil {
				return err
			}
			runs := []jobRun{}
			for _, s := range sessions {
				if deref(s.JobID) != id {
					continue
				}
				r := jobRun{SessionID: s.SessionID, StartedAt: s.CreatedAt, LastActivityAt: s.LastActivityAt, Status: s.Status}
				if s.SessionID == j.GetLastSessionId() {
					r.Outcome = j.LastStatus
				}
				runs = append(runs, r)
			}
			return a.printList(asJSON, map[string]any{"jobId": id, "runs": runs}, "SESSION\tSTARTED\tLAST ACTIVITY\tSESSION STATUS\tOUTCOME", func(tw io.Writer) {
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.SessionID, r.StartedAt, orDash(r.LastActivityAt), r.Status, orDash(r.Outcome))
				}
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as JSON: {jobId, runs: [{sessionId, startedAt, lastActivityAt, status, outcome}]}")
	return cmd
}
