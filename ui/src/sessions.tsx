// Sessions: the list (status, workdir, last activity), searched by text and
// filtered by state, and a form to create one with a workdir, mode and agent.

import type { SessionSummary, TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ago, ErrorNote, useAction, useLoad } from "./util.js";

/** The state filter of the list: "open" is every state but closed. */
type StateFilter = "open" | "all" | SessionSummary["status"];

const stateFilters: [StateFilter, string][] = [
  ["open", "open (not closed)"], ["all", "all"], ["idle", "idle"], ["running", "running"],
  ["awaiting_approval", "awaiting approval"], ["closed", "closed"],
];

/** matches says whether a session shows under a state filter and a search text (title, id, last prompt, workdir, agent). */
export function matches(s: SessionSummary, state: StateFilter, query: string): boolean {
  if (state === "open" ? s.status === "closed" : state !== "all" && s.status !== state) return false;
  const q = query.trim().toLowerCase();
  if (q === "") return true;
  return [s.title, s.sessionId, s.lastPrompt, s.workdir, s.agent].some((f) => f !== null && f.toLowerCase().includes(q));
}

export function SessionsView(props: { client: TrellisClient; navigate: (hash: string) => void }) {
  const { client } = props;
  const [state, setState] = useState<StateFilter>("open");
  const [query, setQuery] = useState("");
  const includeClosed = state === "all" || state === "closed";
  const list = useLoad(() => client.call("session.list", { includeClosed }), [includeClosed], 5_000);
  const shown = list.data?.sessions.filter((s) => matches(s, state, query)) ?? [];
  return (
    <section aria-labelledby="sessions-title">
      <header class="view-head">
        <h2 id="sessions-title">Sessions</h2>
        <button type="button" onClick={list.reload}>Refresh</button>
      </header>
      <CreateSession client={client} recent={list.data?.sessions ?? []} onCreated={(id) => props.navigate(`#/session/${id}`)} />
      <search class="filters" aria-label="Find sessions">
        <label>Search <input type="search" name="q" value={query} placeholder="title, id, prompt or workdir"
          onInput={(e) => setQuery((e.currentTarget as HTMLInputElement).value)} /></label>
        <label>State <select name="state" value={state} onChange={(e) => setState((e.currentTarget as HTMLSelectElement).value as StateFilter)}>
          {stateFilters.map(([v, label]) => <option key={v} value={v}>{label}</option>)}
        </select></label>
        {list.data !== undefined && <span class="sub" role="status">{shown.length} of {list.data.sessions.length} shown</span>}
      </search>
      <ErrorNote error={list.error} />
      {list.data !== undefined && list.data.sessions.length === 0 && <p class="empty">No sessions yet: create one above.</p>}
      {list.data !== undefined && list.data.sessions.length > 0 && shown.length === 0 && <p class="empty">No session matches.</p>}
      {shown.length > 0 && (
        <div class="table-wrap">
          <table class="sessions">
            <caption class="sr-only">Sessions, newest first</caption>
            <thead><tr><th scope="col">Session</th><th scope="col">Status</th><th scope="col">Workdir</th><th scope="col">Mode</th><th scope="col">Last activity</th></tr></thead>
            <tbody>
              {shown.map((s) => (
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

/** isAbsolute says whether a path is absolute (POSIX, or a Windows drive or UNC path). */
function isAbsolute(p: string): boolean {
  return p.startsWith("/") || /^[A-Za-z]:[\\/]/.test(p) || p.startsWith("\\\\");
}

/** resolvePath joins a relative path to an absolute POSIX base, folding "." and "..". */
export function resolvePath(base: string, rel: string): string {
  const parts = base.split("/").filter((p) => p !== "");
  for (const p of rel.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  return "/" + parts.join("/");
}

/**
 * The workdir a new session gets: what was typed when absolute; empty: the
 * default (the latest session's workdir); relative: resolved against the
 * default, shown before it is sent. With no session yet there is no default,
 * and a relative path goes to the daemon as it is (session.create resolves
 * it against the daemon's own working directory, which the console cannot
 * see).
 */
export function chooseWorkdir(typed: string, base: string | undefined): { workdir: string; note: string } {
  const t = typed.trim();
  if (t === "") return base !== undefined ? { workdir: base, note: `Default: ${base} (the latest session's)` } : { workdir: "", note: "" };
  if (isAbsolute(t)) return { workdir: t, note: "" };
  if (base !== undefined && isAbsolute(base) && base.startsWith("/")) {
    const abs = resolvePath(base, t);
    return { workdir: abs, note: `Relative to ${base}: ${abs}` };
  }
  return { workdir: t, note: "Relative to the daemon's own working directory (the session's page shows where it resolved)" };
}

function CreateSession(props: { client: TrellisClient; recent: SessionSummary[]; onCreated: (sessionId: string) => void }) {
  const { client } = props;
  const agents = useLoad(() => client.call("agent.list", {}), []);
  const [workdir, setWorkdir] = useState("");
  const recent = [...new Set(props.recent.map((s) => s.workdir))];
  const chosen = chooseWorkdir(workdir, recent[0]);
  const [mode, setMode] = useState<"plan" | "accept" | "auto">("accept");
  const [agent, setAgent] = useState("");
  const { busy, error, act } = useAction();
  const submit = (e: Event): void => {
    e.preventDefault();
    act(() => client.call("session.create", { workdir: chosen.workdir, mode, ...(agent !== "" ? { agent } : {}) }), (r) => props.onCreated(r.sessionId));
  };
  const definitions = agents.data?.agents.filter((a) => a.kind === "definition") ?? [];
  return (
    <form class="create" onSubmit={submit} aria-labelledby="create-title">
      <h3 id="create-title">New session</h3>
      <div class="fields">
        <div class="workdir-field">
          <label>Workdir <input name="workdir" required={recent.length === 0} value={workdir} list="recent-workdirs"
            placeholder={recent[0] ?? "/path/to/project"} aria-describedby="workdir-note"
            onInput={(e) => setWorkdir((e.currentTarget as HTMLInputElement).value)} /></label>
          <span id="workdir-note" class="sub" aria-live="polite">{chosen.note}</span>
          <datalist id="recent-workdirs">{recent.map((w) => <option key={w} value={w} />)}</datalist>
        </div>
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
