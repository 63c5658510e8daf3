// Agents and skills: the definitions and running sub-agents, and the
// installed skills.

import type { TrellisClient } from "@trellis/sdk";

import { ErrorNote, useLoad } from "./util.js";

export function AgentsView(props: { client: TrellisClient }) {
  const { client } = props;
  const agents = useLoad(() => client.call("agent.list", {}), [], 10_000);
  const skills = useLoad(() => client.call("skill.list", {}), [], 10_000);
  return (
    <section aria-labelledby="agents-title">
      <header class="view-head"><h2 id="agents-title">Agents and skills</h2>
        <button type="button" onClick={() => { agents.reload(); skills.reload(); }}>Refresh</button></header>
      <h3>Agents</h3>
      <ErrorNote error={agents.error} />
      {agents.data !== undefined && agents.data.agents.length === 0 && <p class="empty">No agents defined.</p>}
      {agents.data !== undefined && agents.data.agents.length > 0 && (
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Name</th><th scope="col">Kind</th><th scope="col">Description</th><th scope="col">Status</th></tr></thead>
          <tbody>{agents.data.agents.map((a) => (
            <tr key={a.agentId ?? a.name}>
              <td>{a.name}<div class="sub">{a.source}</div></td>
              <td>{a.kind}</td>
              <td>{a.description}{a.task !== null && <div class="sub">task: {a.task}</div>}</td>
              <td>{a.status ?? "—"}{a.sessionId !== null && <div class="sub"><a href={`#/session/${a.sessionId}`}>{a.sessionId}</a></div>}</td>
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
