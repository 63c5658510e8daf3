// Jobs: a form to schedule one (job.schedule), the schedules with their next
// run, run now, cancel (job.cancel), and their history (the scheduled
// sessions each fire ran).

import type { Job, TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ago, ErrorNote, useAction, useLoad, when } from "./util.js";

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
      <ScheduleJob client={client} onScheduled={jobs.reload} />
      <ErrorNote error={jobs.error} />
      {jobs.data !== undefined && jobs.data.jobs.length === 0 && <p class="empty">No jobs: schedule one above.</p>}
      {jobs.data?.jobs.map((job) => (
        <JobCard key={job.jobId} client={client} job={job}
          history={(runs.data?.sessions ?? []).filter((s) => s.jobId === job.jobId)}
          onRan={() => { jobs.reload(); runs.reload(); }} />
      ))}
    </section>
  );
}

/** ScheduleJob is job.schedule's form: when (spec), what (task), mode, workdir and agent. */
function ScheduleJob(props: { client: TrellisClient; onScheduled: () => void }) {
  const { client } = props;
  const agents = useLoad(() => client.call("agent.list", {}), []);
  const [spec, setSpec] = useState("");
  const [task, setTask] = useState("");
  const [mode, setMode] = useState<"plan" | "accept" | "auto">("accept");
  const [workdir, setWorkdir] = useState("");
  const [agent, setAgent] = useState("");
  const { busy, error, act } = useAction();
  const [done, setDone] = useState<string | undefined>(undefined);
  const submit = (e: Event): void => {
    e.preventDefault();
    setDone(undefined);
    act(() => client.call("job.schedule", {
      spec: spec.trim(), task, mode,
      ...(workdir.trim() !== "" ? { workdir: workdir.trim() } : {}),
      ...(agent !== "" ? { agent } : {}),
    }), (r) => {
      setDone(`Scheduled ${r.jobId}; next run ${when(r.nextRunAt)}.`);
      setSpec("");
      setTask("");
      props.onScheduled();
    });
  };
  const definitions = agents.data?.agents.filter((a) => a.kind === "definition") ?? [];
  return (
    <form class="create" onSubmit={submit} aria-labelledby="schedule-title">
      <h3 id="schedule-title">Schedule a job</h3>
      <div class="fields">
        <label>When <input name="spec" required value={spec} placeholder="@every 1h · @daily · 0 9 * * 1-5 · once 2026-12-24T09:00:00Z"
          onInput={(e) => setSpec((e.currentTarget as HTMLInputElement).value)} /></label>
        <label>Mode <select name="mode" value={mode} onChange={(e) => setMode((e.currentTarget as HTMLSelectElement).value as typeof mode)}>
          <option value="plan">plan</option><option value="accept">accept</option><option value="auto">auto</option>
        </select></label>
        <label>Agent <select name="agent" value={agent} onChange={(e) => setAgent((e.currentTarget as HTMLSelectElement).value)}>
          <option value="">(default)</option>
          {definitions.map((a) => <option key={a.name} value={a.name}>{a.name}</option>)}
        </select></label>
      </div>
      <div class="fields">
        <label class="grow">Task <textarea name="task" required rows={2} value={task} placeholder="The prompt each run sends"
          onInput={(e) => setTask((e.currentTarget as HTMLTextAreaElement).value)} /></label>
      </div>
      <div class="fields">
        <label class="grow">Workdir <input name="workdir" value={workdir} placeholder="empty: the daemon's default workdir for jobs"
          onInput={(e) => setWorkdir((e.currentTarget as HTMLInputElement).value)} /></label>
        <button type="submit" disabled={busy || spec.trim() === "" || task.trim() === ""}>Schedule</button>
      </div>
      <ErrorNote error={error} />
      {done !== undefined && <p role="status">{done}</p>}
    </form>
  );
}

function JobCard(props: { client: TrellisClient; job: Job; history: { sessionId: string; createdAt: string; status: string }[]; onRan: () => void }) {
  const { job } = props;
  const { busy, error, act } = useAction();
  const [running, setRunning] = useState(false); // which action is busy: run now, else cancel
  const [last, setLast] = useState<string | undefined>(undefined);
  const cancel = (): void => {
    setRunning(false);
    act(() => props.client.call("job.cancel", { jobId: job.jobId }), () => {
      setLast("cancelled: no more runs");
      props.onRan();
    });
  };
  const runNow = (): void => {
    setRunning(true);
    act(() => props.client.call("job.runNow", { jobId: job.jobId }), (r) => {
      setLast(`ran: ${r.status} (session ${r.sessionId})`);
      props.onRan();
    });
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
        <button type="button" disabled={busy || !job.enabled} onClick={runNow}>{busy && running ? "Running…" : "Run now"}</button>
        {job.enabled && <button type="button" class="deny" disabled={busy} onClick={cancel}
          title="Disables future runs and interrupts a running one; the history stays">Cancel job</button>}
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
