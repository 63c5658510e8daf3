// Approvals: the requests waiting for a person. Interactive ones come to
// this page as approval.request for the sessions it originates (answered
// by returning from the SDK's handler); the unattended queue comes from
// approval.list and approval.pending / approval.resolved (answered with
// approval.respond).

import type { ApprovalReply, ApprovalRequest, TrellisClient } from "@trellis/sdk";
import { useEffect, useState } from "preact/hooks";

import { message } from "./util.js";

/** The scopes approval.respond accepts. */
const respondScopes = ["once", "session", "project", "always", "site"] as const;

/** A request shown to the person. */
export interface PendingApproval {
  request: ApprovalRequest;
  /** interactive: this page is the session's origin; queue: unattended. */
  kind: "interactive" | "queue";
  receivedAt: number;
  /** Interactive only: answers the daemon's approval.request. */
  answer?: (reply: ApprovalReply) => void;
}

/** ApprovalStore keeps the pending requests and tells subscribers when they change. */
export class ApprovalStore {
  readonly #items = new Map<string, PendingApproval>();
  readonly #subs = new Set<() => void>();
  readonly #client: TrellisClient;

  constructor(client: TrellisClient) {
    this.#client = client;
    client.onApprovalRequest((request, ctx) => new Promise<ApprovalReply>((resolve, reject) => {
      this.#set({ request, kind: "interactive", receivedAt: Date.now(), answer: resolve });
      ctx.signal.addEventListener("abort", () => {
        this.#delete(request.requestId);
        reject(ctx.signal.reason);
      }, { once: true });
    }));
    client.onNotification("approval.pending", (p) => this.#set({ request: p.request, kind: "queue", receivedAt: Date.now() }));
    client.onNotification("approval.resolved", (p) => this.#delete(p.requestId));
    client.on("reconnected", () => void this.refresh());
    void this.refresh();
  }

  /** refresh reloads the unattended queue. */
  async refresh(): Promise<void> {
    const { requests } = await this.#client.call("approval.list", {});
    for (const [id, item] of this.#items) {
      if (item.kind === "queue" && !requests.some((r) => r.requestId === id)) this.#items.delete(id);
    }
    for (const request of requests) {
      if (!this.#items.has(request.requestId)) this.#items.set(request.requestId, { request, kind: "queue", receivedAt: Date.now() });
    }
    this.#changed();
  }

  get items(): PendingApproval[] {
    return [...this.#items.values()].sort((a, b) => a.receivedAt - b.receivedAt);
  }

  /** respond answers a request: through the handler when interactive, approval.respond otherwise. */
  async respond(item: PendingApproval, reply: ApprovalReply): Promise<void> {
    if (item.answer !== undefined) {
      item.answer(reply);
      this.#delete(item.request.requestId);
      return;
    }
    // approval.respond takes only the scopes it knows; the console offers no other.
    const scope = respondScopes.find((s) => s === reply.scope);
    await this.#client.call("approval.respond", { requestId: item.request.requestId, decision: reply.decision, scope, reason: reply.reason });
    this.#delete(item.request.requestId);
  }

  subscribe(f: () => void): () => void {
    this.#subs.add(f);
    return () => this.#subs.delete(f);
  }

  #set(item: PendingApproval): void {
    this.#items.set(item.request.requestId, item);
    this.#changed();
  }

  #delete(id: string): void {
    if (this.#items.delete(id)) this.#changed();
  }

  #changed(): void {
    for (const f of [...this.#subs]) f();
  }
}

/** useApprovals re-renders with the store's items. */
export function useApprovals(store: ApprovalStore): PendingApproval[] {
  const [items, setItems] = useState(store.items);
  useEffect(() => store.subscribe(() => setItems(store.items)), [store]);
  return items;
}

function useNow(ms: number): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

/** ApprovalCard shows one request with allow / deny, scope, the rule that would match and a countdown. */
export function ApprovalCard(props: { item: PendingApproval; store: ApprovalStore }) {
  const { request } = props.item;
  const [scope, setScope] = useState<NonNullable<ApprovalReply["scope"]>>("once");
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const now = useNow(1000);
  const left = Math.max(0, Math.round(request.timeoutSec - (now - props.item.receivedAt) / 1000));
  const id = `ap-${request.requestId}`;
  const answer = (decision: "allow" | "deny"): void => {
    setBusy(true);
    props.store.respond(props.item, { decision, scope }).catch((err: unknown) => {
      setError(message(err));
      setBusy(false);
    });
  };
  return (
    <article class={`approval risk-${request.risk}`} aria-labelledby={`${id}-title`}>
      <h3 id={`${id}-title`}>
        <span class="tool">{request.tool}</span> wants to run <span class={`tag tag-${request.permissionTag}`}>{request.permissionTag}</span>
        <span class="risk">risk: {request.risk}</span>
      </h3>
      <pre class="args" aria-label="arguments">{JSON.stringify(request.args, null, 2)}</pre>
      <dl class="facts">
        <dt>Session</dt><dd><a href={`#/session/${request.sessionId}`}>{request.sessionId}</a></dd>
        <dt>Rule that would match</dt><dd><code>{request.pattern || request.tool}</code></dd>
        <dt>Suggested scope</dt><dd>{request.scopeHint}</dd>
        {request.note !== "" && <><dt>Note</dt><dd>{request.note}</dd></>}
        <dt>Deadline</dt>
        <dd><span class="countdown" role="timer" aria-label={`${String(left)} seconds left`}>{left} s left</span>
          {props.item.kind === "queue" && <span class="queued"> (unattended queue)</span>}</dd>
      </dl>
      <div class="actions">
        <label>Scope{" "}
          <select value={scope} onChange={(e) => setScope((e.currentTarget as HTMLSelectElement).value as typeof scope)}>
            <option value="once">once</option>
            <option value="session">this session</option>
            <option value="project">this project</option>
            <option value="always">always</option>
          </select>
        </label>
        <button type="button" class="allow" disabled={busy} onClick={() => answer("allow")}>Allow</button>
        <button type="button" class="deny" disabled={busy} onClick={() => answer("deny")}>Deny</button>
      </div>
      {error !== undefined && <p class="error" role="alert">{error}</p>}
    </article>
  );
}

/** ApprovalsView lists every pending request. */
export function ApprovalsView(props: { store: ApprovalStore }) {
  const items = useApprovals(props.store);
  return (
    <section aria-labelledby="approvals-title">
      <header class="view-head">
        <h2 id="approvals-title">Approvals</h2>
        <button type="button" onClick={() => void props.store.refresh()}>Refresh</button>
      </header>
      {items.length === 0
        ? <p class="empty">Nothing waits for a decision.</p>
        : items.map((item) => <ApprovalCard key={item.request.requestId} item={item} store={props.store} />)}
    </section>
  );
}
