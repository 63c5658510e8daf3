// Sessions: the list (status, workdir, last activity) and a form to create
// one with a workdir, mode and agent.

import type { TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ago, ErrorNote, message, useLoad } from "./util.js";

export function SessionsView(props: { client: TrellisClient; navigate: (hash: string) => void }) {
  const { client } = props;
  const [includeClosed, setIncludeClosed] = useState(false);
  const list = useLoad(() => client.call("session.list", { includeClosed }), [includeClosed], 5_000);
  return (
    <section aria-labelledby="sessions-title">
      <header class="view-head">
        <h2 id="sessions-title">Sessions</h2>
        <label class="inline"><input type="checkbox" checked={includeClosed}
          onChange={(e) => setIncludeClosed((e.currentTarget as HTMLInputElement).checked)} /> show closed</label>
        <button type="button" onClick={list.reload}>Refresh</button>
      </header>
      <CreateSession client={client} onCreated={(id) => props.navigate(`#/session/${id}`)} />
      <ErrorNote error={list.error} />
      {list.data !== undefined && list.data.sessions.length === 0 && <p class="empty">No sessions yet: create one above.</p>}
      {list.data !== undefined && list.data.sessions.length > 0 && (
        <div class="table-wrap">
          <table class="sessions">
            <caption class="sr-only">Sessions, newest first</caption>
            <thead><tr><th scope="col">Session</th><th scope="col">Status</th><th scope="col">Workdir</th><th scope="col">Mode</th><th scope="col">Last activity</th></tr></thead>
            <tbody>
              {list.data.sessions.map((s) => (
                <tr key={s.sessionId}>
                  <td><a href={`#/session/${s.sessionId}`}>{s.title ?? s.lastPrompt ?? s.sessionId}</a>
                    <div class="sub">{s.sessionId}{s.agent !== null ? ` · agent ${s.agent}` : ""}{s.kind !== "chat" ? ` · ${s.kind}` : ""}</div></td>
                  <td><span class={`status status-${s.status}`}>{s.status.replace("_", " ")}</span>
                    {s.pendingApprovals > 0 && <span class="badge" aria-label={`${String(s.pendingApprovals)} approvals pending`}>{s.pendingApprovals}</span>}</td>
                  <td class="path">{s.workdir}</td>
                  <td>{s.mode}</td>
                  <td>{ago(s.lastActivityAt ?? s.createdAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function CreateSession(props: { client: TrellisClient; onCreated: (sessionId: string) => void }) {
  const { client } = props;
  const agents = useLoad(() => client.call("agent.list", {}), []);
  const [workdir, setWorkdir] = useState("");
  const [mode, setMode] = useState<"plan" | "accept" | "auto">("accept");
  const [agent, setAgent] = useState("");
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const submit = (e: Event): void => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    client.call("session.create", { workdir, mode, ...(agent !== "" ? { agent } : {}) }).then(
      (r) => props.onCreated(r.sessionId),
      (err: unknown) => {
        setError(message(err));
        setBusy(false);
      },
    );
  };
  const definitions = agents.data?.agents.filter((a) => a.kind === "definition") ?? [];
  return (
    <form class="create" onSubmit={submit} aria-labelledby="create-title">
      <h3 id="create-title">New session</h3>
      <div class="fields">
        <label>Workdir <input name="workdir" required value={workdir} placeholder="/path/to/project"
          onInput={(e) => setWorkdir((e.currentTarget as HTMLInputElement).value)} /></label>
        <label>Mode <select name="mode" value={mode} onChange={(e) => setMode((e.currentTarget as HTMLSelectElement).value as typeof mode)}>
          <option value="plan">plan</option><option value="accept">accept</option><option value="auto">auto</option>
        </select></label>
        <label>Agent <select name="agent" value={agent} onChange={(e) => setAgent((e.currentTarget as HTMLSelectElement).value)}>
          <option value="">(default)</option>
          {definitions.map((a) => <option key={a.name} value={a.name}>{a.name}</option>)}
        </select></label>
        <button type="submit" disabled={busy}>Create</button>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}
