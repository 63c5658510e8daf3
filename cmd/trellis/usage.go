package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// newUsageCmd is `trellis usage`: usage.summary, the tokens the daemon's
// sessions spent, as a table or its JSON.
func newUsageCmd(a *app) *cobra.Command {
	var (
		by, since, until string
		asJSON           bool
		params           = &trellisv1.UsageSummaryRequest{}
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Total the tokens the models used and their cost, by provider, model, session or day",
		Long: `Total the tokens and the cost of every provider call the daemon's sessions
made, from the stored usage events, one row per provider, model, session or
UTC day (--by, model by default), largest first. Sessions that were deleted no
longer count. Input tokens include those read from and written to the prompt
cache, output tokens those spent reasoning; the cost is in US dollars from the
daemon's price table, and calls of models it does not price are counted apart
("+ 2 unpriced calls").

--since and --until take a date (2026-12-01, midnight UTC) or an RFC 3339 time
(2026-12-01T15:04:05Z); --since is inclusive, --until exclusive, so
--since 2026-12-01 --until 2026-12-02 is December 1st. Needs an operator's or
an admin's key.`,
		Args: noArgs(),
		// The flags are checked before a daemon is reached (or started).
		PreRunE: func(*cobra.Command, []string) error {
			if by != "" {
				switch by {
				case "provider", "model", "session", "day":
				default:
					return usageError{fmt.Errorf("--by %q: want provider, model, session or day", by)}
				}
				params.GroupBy = &by
			}
			var err error
			if params.Since, err = usageBound("--since", since); err != nil {
				return err
			}
			params.Until, err = usageBound("--until", until)
			return err
		},
		RunE: a.withDaemon(func(ctx context.Context, c *client.Client, _ []string) error {
			r, err := c.Calls().UsageSummary(ctx, params)
			if err != nil {
				return err
			}
			return a.printList(asJSON, protocolJSON(r), usageHeader(r.GetGroupBy())+"\tCALLS\tINPUT\tCACHE-READ\tCACHE-WRITE\tOUTPUT\tREASONING\tCOST", func(tw io.Writer) {
				for _, row := range r.GetRows() {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", row.GetKey(), row.GetCalls(), row.GetInputTokens(), row.GetCacheReadTokens(), row.GetCacheWriteTokens(),
						row.GetOutputTokens(), row.GetReasoningTokens(), costText(row.GetCostMicroUsd(), row.GetCalls(), row.GetUnpricedCalls()))
				}
				fmt.Fprintf(tw, "TOTAL\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.GetCalls(), r.GetInputTokens(), r.GetCacheReadTokens(), r.GetCacheWriteTokens(),
					r.GetOutputTokens(), r.GetReasoningTokens(), costText(r.GetCostMicroUsd(), r.GetCalls(), r.GetUnpricedCalls()))
			})
		}),
	}
	cmd.Flags().StringVar(&by, "by", "", "group by provider, model, session, day (UTC), agent, job or principal; default model")
	cmd.Flags().StringVar(&since, "since", "", "count calls from this date or RFC 3339 time on (inclusive)")
	cmd.Flags().StringVar(&until, "until", "", "count calls before this date or RFC 3339 time (exclusive)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the usage.summary result as JSON")
	return cmd
}

// usageHeader is the first column's title for a grouping.
func usageHeader(groupBy string) string {
	switch groupBy {
	case "provider":
		return "PROVIDER"
	case "session":
		return "SESSION"
	case "day":
		return "DAY"
	case "agent":
		return "AGENT"
	case "job":
		return "JOB"
	case "principal":
		return "PRINCIPAL"
	}
	return "MODEL"
}

// usageBound turns a --since or --until value into usage.summary's RFC 3339
// time: a bare date is its midnight UTC ("" = no bound).
func usageBound(flag, v string) (*string, error) {
	if v == "" {
		return nil, nil
	}
	if d, err := time.Parse(time.DateOnly, v); err == nil {
		s := d.UTC().Format(time.RFC3339)
		return &s, nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		return nil, usageError{fmt.Errorf("%s %q: want a date (2026-12-01) or an RFC 3339 time (2026-12-01T15:04:05Z)", flag, v)}
	}
	return &v, nil
}
