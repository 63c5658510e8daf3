// The console's shell: navigation (sessions, approvals with a badge, jobs,
// agents and skills, daemon), the connection banner, and hash routing.

import type { ClientState, TrellisClient } from "@trellis/sdk";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";

import { AgentsView } from "./agents.js";
import { AllowlistView } from "./allowlist.js";
import { ApprovalsView, ApprovalStore, useApprovals } from "./approvals.js";
import { logout } from "./auth.js";
import { JobsView } from "./jobs.js";
import { SessionView } from "./session.js";
import { SessionsView } from "./sessions.js";
import { StatusView } from "./status.js";

type Route = { view: "sessions" } | { view: "session"; id: string } | { view: "approvals" } | { view: "jobs" } | { view: "agents" } | { view: "status" };

function parseRoute(hash: string): Route {
  const m = /^#\/session\/([\w-]+)$/.exec(hash);
  if (m !== null) return { view: "session", id: m[1]! };
  switch (hash) {
    case "#/approvals": return { view: "approvals" };
    case "#/jobs": return { view: "jobs" };
    case "#/agents": return { view: "agents" };
    case "#/status": return { view: "status" };
    default: return { view: "sessions" };
  }
}

function useConnectionState(client: TrellisClient): { state: ClientState; detail: string } {
  const [s, set] = useState<{ state: ClientState; detail: string }>({ state: client.state, detail: "" });
  useEffect(() => {
    const offs = [
      client.on("disconnected", (e) => set({ state: "reconnecting", detail: e.error.message })),
      client.on("reconnecting", (e) => set({ state: "reconnecting", detail: `attempt ${String(e.attempt)}: ${e.error.message}` })),
      client.on("reconnected", () => set({ state: "open", detail: "" })),
    ];
    void client.closed.then((err) => set({ state: "closed", detail: err?.message ?? "" }));
    return () => offs.forEach((off) => off());
  }, [client]);
  return s;
}

export function App(props: { client: TrellisClient }) {
  const { client } = props;
  const [route, setRoute] = useState(parseRoute(location.hash));
  const approvals = useMemo(() => new ApprovalStore(client), [client]);
  const pending = useApprovals(approvals).length;
  const conn = useConnectionState(client);
  useEffect(() => {
    const onHash = (): void => setRoute(parseRoute(location.hash));
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  // A new view replaces the one whose link or button had the focus: the
  // focus goes to the main region, so that the next Tab reaches the new
  // view's first control and a screen reader announces it. Left alone, the
  // browser would go on from wherever the removed element was in the page,
  // which depends on the order the views' nodes were swapped in.
  const main = useRef<HTMLElement>(null);
  const shown = route.view === "session" ? `session/${route.id}` : route.view;
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    main.current?.focus();
  }, [shown]);
  const navigate = (hash: string): void => {
    location.hash = hash;
  };
  const link = (hash: string, label: string, view: Route["view"], extra?: preact.ComponentChildren) => (
    <li><a href={hash} aria-current={route.view === view ? "page" : undefined}>{label}{extra}</a></li>
  );
  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <h1><a href="#/sessions">Trellis</a></h1>
        <nav aria-label="Main">
          <ul>
            {link("#/sessions", "Sessions", "sessions")}
            {link("#/approvals", "Approvals", "approvals", pending > 0
              ? <span class="badge" aria-label={`${String(pending)} pending`}>{pending}</span> : undefined)}
            {link("#/jobs", "Jobs", "jobs")}
            {link("#/agents", "Agents & skills", "agents")}
            {link("#/status", "Daemon", "status")}
          </ul>
        </nav>
        <span class="whoami">{props.client.hello.principal.name} <span class="sub">({props.client.hello.principal.role})</span></span>
        <button type="button" class="logout" onClick={() => void logout().then(() => location.reload())}>Log out</button>
      </header>
      <div class={`conn conn-${conn.state}`} role="status" aria-live="polite">
        {conn.state === "reconnecting" && <>Connection lost; reconnecting… <span class="sub">{conn.detail}</span></>}
        {conn.state === "closed" && <>Disconnected. <span class="sub">{conn.detail}</span> Reload the page to connect again.</>}
      </div>
      <main id="main" tabIndex={-1} ref={main}>
        {route.view === "sessions" && <SessionsView client={client} navigate={navigate} />}
        {route.view === "session" && <SessionView key={route.id} client={client} sessionId={route.id} approvals={approvals} />}
        {route.view === "approvals" && <><ApprovalsView store={approvals} /><AllowlistView client={client} /></>}
        {route.view === "jobs" && <JobsView client={client} />}
        {route.view === "agents" && <AgentsView client={client} />}
        {route.view === "status" && <StatusView client={client} state={conn.state} />}
      </main>
    </>
  );
}
