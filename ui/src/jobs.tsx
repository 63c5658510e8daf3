// Jobs: schedules with their next run, run now, and their history (the
// scheduled sessions each fire ran).

import type { Job, TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ago, ErrorNote, message, useLoad, when } from "./util.js";

export function JobsView(props: { client: TrellisClient }) {
  const { client } = props;
  const jobs = useLoad(() => client.call("job.list", {}), [], 5_000);
  const runs = useLoad(() => client.call("session.list", { includeClosed: true }), [], 5_000);
  return (
    <section aria-labelledby="jobs-title">
      <header class="view-head">
        <h2 id="jobs-title">Jobs</h2>
        <button type="button" onClick={() => { jobs.reload(); runs.reload(); }}>Refresh</button>
      </header>
      <ErrorNote error={jobs.error} />
      {jobs.data !== undefined && jobs.data.jobs.length === 0 && <p class="empty">No jobs. Schedule one with <code>job.schedule</code>.</p>}
      {jobs.data?.jobs.map((job) => (
        <JobCard key={job.jobId} client={client} job={job}
          history={(runs.data?.sessions ?? []).filter((s) => s.jobId === job.jobId)}
          onRan={() => { jobs.reload(); runs.reload(); }} />
      ))}
    </section>
  );
}

function JobCard(props: { client: TrellisClient; job: Job; history: { sessionId: string; createdAt: string; status: string }[]; onRan: () => void }) {
  const { job } = props;
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const [last, setLast] = useState<string | undefined>(undefined);
  const runNow = (): void => {
    setBusy(true);
    setError(undefined);
    props.client.call("job.runNow", { jobId: job.jobId }).then(
      (r) => {
        setLast(`ran: ${r.status} (session ${r.sessionId})`);
        setBusy(false);
        props.onRan();
      },
      (err: unknown) => {
        setError(message(err));
        setBusy(false);
      },
    );
  };
  const id = `job-${job.jobId}`;
  return (
    <article class="job" aria-labelledby={id}>
      <h3 id={id}><code>{job.spec}</code> {job.task}</h3>
      <dl class="facts">
        <dt>State</dt><dd>{job.state}{job.enabled ? "" : " (disabled)"}</dd>
        <dt>Next run</dt><dd>{when(job.nextRunAt)}</dd>
        <dt>Last run</dt><dd>{ago(job.lastRunAt)}{job.lastStatus !== null ? ` · ${job.lastStatus}` : ""}</dd>
        <dt>Mode · workdir</dt><dd>{job.mode} · <span class="path">{job.workdir}</span></dd>
        <dt>Owner</dt><dd class="owner">{job.owner === null ? "daemon token" : job.owner.name}</dd>
      </dl>
      <div class="actions">
        <button type="button" disabled={busy || !job.enabled} onClick={runNow}>{busy ? "Running…" : "Run now"}</button>
        {last !== undefined && <span role="status">{last}</span>}
      </div>
      <ErrorNote error={error} />
      <details>
        <summary>History ({props.history.length} runs)</summary>
        <ul class="history">
          {props.history.map((s) => (
            <li key={s.sessionId}><a href={`#/session/${s.sessionId}`}>{s.sessionId}</a> · {ago(s.createdAt)} · {s.status}</li>
          ))}
        </ul>
      </details>
    </article>
  );
}
