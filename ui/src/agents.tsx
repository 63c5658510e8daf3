// Agents and skills: a form to define an agent (agent.create), the
// definitions (deleted with agent.delete) and running sub-agents, and the
// installed skills.

import type { Agent, TrellisClient } from "@trellis/sdk";
import { useState } from "preact/hooks";

import { ErrorNote, useAction, useLoad } from "./util.js";

export function AgentsView(props: { client: TrellisClient }) {
  const { client } = props;
  const agents = useLoad(() => client.call("agent.list", {}), [], 10_000);
  const skills = useLoad(() => client.call("skill.list", {}), [], 10_000);
  return (
    <section aria-labelledby="agents-title">
      <header class="view-head"><h2 id="agents-title">Agents and skills</h2>
        <button type="button" onClick={() => { agents.reload(); skills.reload(); }}>Refresh</button></header>
      <h3>Agents</h3>
      <CreateAgent client={client} onCreated={agents.reload} />
      <ErrorNote error={agents.error} />
      {agents.data !== undefined && agents.data.agents.length === 0 && <p class="empty">No agents defined.</p>}
      {agents.data !== undefined && agents.data.agents.length > 0 && (
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Name</th><th scope="col">Kind</th><th scope="col">Description</th><th scope="col">Status</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>{agents.data.agents.map((a) => (
            <tr key={a.agentId ?? a.name}>
              <td>{a.name}<div class="sub">{a.source}</div></td>
              <td>{a.kind}</td>
              <td>{a.description}{a.task !== null && <div class="sub">task: {a.task}</div>}</td>
              <td>{a.status ?? "—"}{a.sessionId !== null && <div class="sub"><a href={`#/session/${a.sessionId}`}>{a.sessionId}</a></div>}</td>
              <td>{a.kind === "definition" && <DeleteAgent client={client} agent={a} onDeleted={agents.reload} />}</td>
            </tr>
          ))}</tbody>
        </table></div>
      )}
      <h3>Skills</h3>
      <ErrorNote error={skills.error} />
      {skills.data !== undefined && skills.data.skills.length === 0 && <p class="empty">No skills installed.</p>}
      {skills.data !== undefined && skills.data.skills.length > 0 && (
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Name</th><th scope="col">Description</th><th scope="col">Source</th></tr></thead>
          <tbody>{skills.data.skills.map((s) => (
            <tr key={s.name}><td>/{s.name}</td><td>{s.description}</td><td class="path">{s.source}</td></tr>
          ))}</tbody>
        </table></div>
      )}
    </section>
  );
}

/**
 * CreateAgent is agent.create's form: a name (empty: made from the
 * description), a description, instructions, the tools it may use (empty:
 * all) and a model.
 */
function CreateAgent(props: { client: TrellisClient; onCreated: () => void }) {
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [instructions, setInstructions] = useState("");
  const [tools, setTools] = useState("");
  const [model, setModel] = useState("");
  const { busy, error, act } = useAction();
  const [done, setDone] = useState<string | undefined>(undefined);
  const submit = (e: Event): void => {
    e.preventDefault();
    setDone(undefined);
    const toolList = tools.split(/[\s,]+/).filter((t) => t !== "");
    act(() => props.client.call("agent.create", {
      name: name.trim(), description: description.trim(),
      ...(instructions.trim() !== "" ? { instructions } : {}),
      ...(toolList.length > 0 ? { tools: toolList } : {}),
      ...(model.trim() !== "" ? { model: model.trim() } : {}),
    }), (r) => {
      setDone(`Created ${r.name} (${r.path}).`);
      setName("");
      setDescription("");
      setInstructions("");
      setTools("");
      setModel("");
      props.onCreated();
    });
  };
  return (
    <form class="create" onSubmit={submit} aria-labelledby="agent-create-title">
      <h3 id="agent-create-title">New agent</h3>
      <div class="fields">
        <label>Name <input name="name" value={name} pattern="[a-z0-9-]+" maxLength={64} placeholder="lowercase-with-dashes (empty: from the description)"
          onInput={(e) => setName((e.currentTarget as HTMLInputElement).value)} /></label>
        <label class="grow">Description <input name="description" required value={description} placeholder="What it is for"
          onInput={(e) => setDescription((e.currentTarget as HTMLInputElement).value)} /></label>
      </div>
      <div class="fields">
        <label class="grow">Instructions <textarea name="instructions" rows={3} value={instructions} placeholder="Its system prompt (markdown)"
          onInput={(e) => setInstructions((e.currentTarget as HTMLTextAreaElement).value)} /></label>
      </div>
      <div class="fields">
        <label class="grow">Tools <input name="tools" value={tools} placeholder="e.g. read_file, grep (empty: all)"
          onInput={(e) => setTools((e.currentTarget as HTMLInputElement).value)} /></label>
        <label>Model <input name="model" value={model} placeholder="vendor:model (empty: the default)"
          onInput={(e) => setModel((e.currentTarget as HTMLInputElement).value)} /></label>
        <button type="submit" disabled={busy || description.trim() === ""}>Create agent</button>
      </div>
      <ErrorNote error={error} />
      {done !== undefined && <p role="status">{done}</p>}
    </form>
  );
}

/** DeleteAgent deletes a definition (agent.delete) after a confirmation. */
function DeleteAgent(props: { client: TrellisClient; agent: Agent; onDeleted: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const { busy, error, act } = useAction();
  const remove = (): void => {
    act(() => props.client.call("agent.delete", { name: props.agent.name }), () => {
      setConfirming(false);
      props.onDeleted();
    });
  };
  return (
    <div class="row-actions">
      {confirming
        ? (
          <span class="confirm" role="group" aria-label={`Confirm deleting ${props.agent.name}`}>
            <button type="button" class="deny" disabled={busy} onClick={remove}>Delete {props.agent.name}</button>
            <button type="button" onClick={() => setConfirming(false)}>Keep</button>
          </span>
        )
        : <button type="button" class="deny" aria-label={`Delete ${props.agent.name}…`} onClick={() => setConfirming(true)}>Delete…</button>}
      <ErrorNote error={error} />
    </div>
  );
}
