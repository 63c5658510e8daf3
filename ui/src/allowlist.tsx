// The allowlist: what runs without asking (permission.allowlist.list), with
// who added each entry and when; a form to add one and a button to remove
// one (permission.allowlist.add / .remove). Answering an approval with a
// scope wider than "once" adds an entry too, so this is where such an
// answer is seen and undone.

import type { AllowlistPattern, TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ago, ErrorNote, useAction, useLoad } from "./util.js";

type Scope = "project" | "session" | "always";

export function AllowlistView(props: { client: TrellisClient }) {
  const { client } = props;
  const list = useLoad(() => client.call("permission.allowlist.list", {}), [], 10_000);
  const sessions = useLoad(() => client.call("session.list", {}), []);
  const open = sessions.data?.sessions ?? [];
  return (
    <section aria-labelledby="allowlist-title">
      <header class="view-head">
        <h2 id="allowlist-title">Allowlist</h2>
        <button type="button" onClick={list.reload}>Refresh allowlist</button>
      </header>
      <p class="sub">Tool calls matching an entry run without asking, within its scope: one session, one project (a workdir) or everywhere.</p>
      <AddPattern client={client} workdirs={[...new Set(open.map((s) => s.workdir))]}
        sessions={open.map((s) => ({ id: s.sessionId, label: s.title ?? s.lastPrompt ?? s.sessionId }))} onAdded={list.reload} />
      <ErrorNote error={list.error} />
      {list.data !== undefined && list.data.patterns.length === 0 && <p class="empty">The allowlist is empty: every tool call that needs approval asks.</p>}
      {list.data !== undefined && list.data.patterns.length > 0 && (
        <div class="table-wrap"><table class="allowlist">
          <caption class="sr-only">Allowlist entries</caption>
          <thead><tr><th scope="col">Pattern</th><th scope="col">Scope</th><th scope="col">Where</th><th scope="col">Added</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>{list.data.patterns.map((p) => <PatternRow key={p.patternId} client={client} pattern={p} onRemoved={list.reload} />)}</tbody>
        </table></div>
      )}
    </section>
  );
}

function PatternRow(props: { client: TrellisClient; pattern: AllowlistPattern; onRemoved: () => void }) {
  const p = props.pattern;
  const { busy, error, act } = useAction();
  const remove = (): void => {
    act(() => props.client.call("permission.allowlist.remove", { patternId: p.patternId }), props.onRemoved);
  };
  return (
    <tr>
      <td><code>{p.pattern}</code><div class="sub">{p.patternId}</div></td>
      <td>{p.scope}</td>
      <td class="path">{p.workdir ?? (p.scope === "always" ? "everywhere" : "—")}</td>
      <td>{ago(p.createdAt)}{p.principal !== null && <div class="sub">by {p.principal.name}</div>}</td>
      <td><button type="button" class="deny" disabled={busy} aria-label={`Remove ${p.pattern}`} onClick={remove}>Remove</button>
        <ErrorNote error={error} /></td>
    </tr>
  );
}

function AddPattern(props: { client: TrellisClient; workdirs: string[]; sessions: { id: string; label: string }[]; onAdded: () => void }) {
  const [pattern, setPattern] = useState("");
  const [scope, setScope] = useState<Scope>("project");
  const [workdir, setWorkdir] = useState("");
  const [sessionId, setSessionId] = useState("");
  const { busy, error, act } = useAction();
  const submit = (e: Event): void => {
    e.preventDefault();
    act(() => props.client.call("permission.allowlist.add", {
      pattern: pattern.trim(), scope,
      ...(scope === "project" ? { workdir: workdir.trim() } : {}),
      ...(scope === "session" ? { sessionId } : {}),
    }), () => {
      setPattern("");
      props.onAdded();
    });
  };
  const ready = pattern.trim() !== "" && (scope !== "project" || workdir.trim() !== "") && (scope !== "session" || sessionId !== "");
  return (
    <form class="create" onSubmit={submit} aria-labelledby="allow-add-title">
      <h3 id="allow-add-title">Allow without asking</h3>
      <div class="fields">
        <label>Pattern <input name="pattern" required value={pattern} placeholder="tool or tool(glob), e.g. shell(git status*)"
          onInput={(e) => setPattern((e.currentTarget as HTMLInputElement).value)} /></label>
        <label>Scope <select name="scope" value={scope} onChange={(e) => setScope((e.currentTarget as HTMLSelectElement).value as Scope)}>
          <option value="project">a project (workdir)</option>
          <option value="session">a session</option>
          <option value="always">everywhere</option>
        </select></label>
        {scope === "project" && (
          <label class="grow">Project workdir <input name="allow-workdir" required value={workdir} list="allow-workdirs" placeholder={props.workdirs[0] ?? "/path/to/project"}
            onInput={(e) => setWorkdir((e.currentTarget as HTMLInputElement).value)} />
            <datalist id="allow-workdirs">{props.workdirs.map((w) => <option key={w} value={w} />)}</datalist></label>
        )}
        {scope === "session" && (
          <label class="grow">Session <select name="allow-session" required value={sessionId} onChange={(e) => setSessionId((e.currentTarget as HTMLSelectElement).value)}>
            <option value="">(choose one)</option>
            {props.sessions.map((s) => <option key={s.id} value={s.id}>{s.label} · {s.id}</option>)}
          </select></label>
        )}
        <button type="submit" disabled={busy || !ready}>Add</button>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}
