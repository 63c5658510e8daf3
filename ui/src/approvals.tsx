// Approvals: the requests waiting for a person, and the agent's questions
// (its ask_user tool). Interactive ones come to this page as
// approval.request / question.request for the sessions it originates
// (answered by returning from the SDK's handler); the unattended queue
// comes from approval.list / question.list and the pending / resolved
// notifications (answered with approval.respond / question.respond).

import type { ApprovalReply, ApprovalRequest, QuestionReply, QuestionRequest, TrellisClient } from "@trellis/sdk";
import { useEffect, useRef, useState } from "preact/hooks";

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

/** A question of the agent's shown to the person. */
export interface PendingQuestion {
  question: QuestionRequest;
  /** interactive: this page is the session's origin; queue: unattended. */
  kind: "interactive" | "queue";
  receivedAt: number;
  /** Interactive only: answers the daemon's question.request. */
  answer?: (reply: QuestionReply) => void;
}

/** Something that waits for a person: an approval request or a question. */
export type Waiting = PendingApproval | PendingQuestion;

/** idOf is the id of a waiting item (requestId or questionId). */
export function idOf(item: Waiting): string {
  return "question" in item ? item.question.questionId : item.request.requestId;
}

/** sessionOf is the session a waiting item is about. */
export function sessionOf(item: Waiting): string {
  return "question" in item ? item.question.sessionId : item.request.sessionId;
}

/** ApprovalStore keeps the pending requests and questions and tells subscribers when they change. */
export class ApprovalStore {
  readonly #items = new Map<string, Waiting>();
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
    client.onQuestionRequest((question, ctx) => new Promise<QuestionReply>((resolve, reject) => {
      this.#set({ question, kind: "interactive", receivedAt: Date.now(), answer: resolve });
      ctx.signal.addEventListener("abort", () => {
        this.#delete(question.questionId);
        reject(ctx.signal.reason);
      }, { once: true });
    }));
    client.onNotification("approval.pending", (p) => this.#set({ request: p.request, kind: "queue", receivedAt: Date.now() }));
    client.onNotification("approval.resolved", (p) => this.#delete(p.requestId));
    client.onNotification("question.pending", (p) => this.#set({ question: p.question, kind: "queue", receivedAt: Date.now() }));
    client.onNotification("question.resolved", (p) => this.#delete(p.questionId));
    client.on("reconnected", () => void this.refresh());
    void this.refresh();
  }

  /** refresh reloads the unattended queue. */
  async refresh(): Promise<void> {
    const [{ requests }, { questions }] = await Promise.all([this.#client.call("approval.list", {}), this.#client.call("question.list", {})]);
    const queued = new Set([...requests.map((r) => r.requestId), ...questions.map((q) => q.questionId)]);
    for (const [id, item] of this.#items) {
      if (item.kind === "queue" && !queued.has(id)) this.#items.delete(id);
    }
    for (const request of requests) {
      if (!this.#items.has(request.requestId)) this.#items.set(request.requestId, { request, kind: "queue", receivedAt: Date.now() });
    }
    for (const question of questions) {
      if (!this.#items.has(question.questionId)) this.#items.set(question.questionId, { question, kind: "queue", receivedAt: Date.now() });
    }
    this.#changed();
  }

  get items(): Waiting[] {
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

  /** answer answers a question: through the handler when interactive, question.respond otherwise. */
  async answer(item: PendingQuestion, reply: QuestionReply): Promise<void> {
    if (item.answer !== undefined) {
      item.answer(reply);
    } else {
      await this.#client.call("question.respond", { questionId: item.question.questionId, ...reply });
    }
    this.#delete(item.question.questionId);
  }

  subscribe(f: () => void): () => void {
    this.#subs.add(f);
    return () => this.#subs.delete(f);
  }

  #set(item: Waiting): void {
    this.#items.set(idOf(item), item);
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
export function useApprovals(store: ApprovalStore): Waiting[] {
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
export function ApprovalCard(props: { item: PendingApproval; store: ApprovalStore; inbox?: boolean }) {
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
    <article class={`approval risk-${request.risk}`} aria-labelledby={`${id}-title`} tabIndex={props.inbox === true ? 0 : undefined}>
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
        <button type="button" class="allow" disabled={busy} aria-keyshortcuts={props.inbox === true ? "a" : undefined} onClick={() => answer("allow")}>Allow</button>
        <button type="button" class="deny" disabled={busy} aria-keyshortcuts={props.inbox === true ? "d" : undefined} onClick={() => answer("deny")}>Deny</button>
      </div>
      {error !== undefined && <p class="error" role="alert">{error}</p>}
    </article>
  );
}

/** QuestionCard shows the agent's questions, each with its options (one, or several when it takes several) and a field for the person's own words. */
export function QuestionCard(props: { item: PendingQuestion; store: ApprovalStore; inbox?: boolean }) {
  const { question } = props.item;
  const [chosen, setChosen] = useState<string[][]>(() => question.questions.map(() => []));
  const [own, setOwn] = useState<string[]>(() => question.questions.map(() => ""));
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const now = useNow(1000);
  const left = Math.max(0, Math.round(question.timeoutSec - (now - props.item.receivedAt) / 1000));
  const id = `q-${question.questionId}`;
  const answers = question.questions.map((_, i) => (own[i]!.trim() !== "" ? [own[i]!.trim()] : chosen[i]!));
  const complete = answers.every((a) => a.length > 0);
  const pick = (i: number, label: string, multiple: boolean, on: boolean): void => {
    setChosen(chosen.map((c, j) => (j !== i ? c : multiple ? (on ? [...c, label] : c.filter((l) => l !== label)) : [label])));
  };
  const send = (reply: QuestionReply): void => {
    setBusy(true);
    props.store.answer(props.item, reply).catch((err: unknown) => {
      setError(message(err));
      setBusy(false);
    });
  };
  return (
    <article class="approval question" aria-labelledby={`${id}-title`} tabIndex={props.inbox === true ? 0 : undefined}>
      <h3 id={`${id}-title`}>The agent asks</h3>
      {question.questions.map((q, i) => (
        <fieldset key={i}>
          <legend>{q.header != null && q.header !== "" ? `${q.header}: ` : ""}{q.question}</legend>
          {q.options.map((o) => (
            <label key={o.label} class="option">
              <input type={q.multiple === true ? "checkbox" : "radio"} name={`${id}-${String(i)}`} disabled={busy}
                checked={chosen[i]!.includes(o.label)}
                onChange={(e) => pick(i, o.label, q.multiple === true, (e.currentTarget as HTMLInputElement).checked)} />
              <span>{o.label}{o.description != null && o.description !== "" && <span class="sub"> — {o.description}</span>}</span>
            </label>
          ))}
          <label class="own">Your own words{" "}
            <input type="text" value={own[i]} disabled={busy}
              onInput={(e) => setOwn(own.map((v, j) => (j === i ? (e.currentTarget as HTMLInputElement).value : v)))} />
          </label>
        </fieldset>
      ))}
      <dl class="facts">
        <dt>Session</dt><dd><a href={`#/session/${question.sessionId}`}>{question.sessionId}</a></dd>
        <dt>Deadline</dt>
        <dd><span class="countdown" role="timer" aria-label={`${String(left)} seconds left`}>{left} s left</span>
          {props.item.kind === "queue" && <span class="queued"> (unattended queue)</span>}</dd>
      </dl>
      <div class="actions">
        <button type="button" class="allow" disabled={busy || !complete} aria-keyshortcuts={props.inbox === true ? "a" : undefined}
          onClick={() => send({ answers: answers.map((values) => ({ values })) })}>Answer</button>
        <button type="button" class="deny" disabled={busy} aria-keyshortcuts={props.inbox === true ? "d" : undefined}
          onClick={() => send({ answers: [], declined: true })}>Decline</button>
      </div>
      {error !== undefined && <p class="error" role="alert">{error}</p>}
    </article>
  );
}

/** WaitingCard shows an approval request or a question. */
export function WaitingCard(props: { item: Waiting; store: ApprovalStore; inbox?: boolean }) {
  return "question" in props.item
    ? <QuestionCard item={props.item} store={props.store} inbox={props.inbox} />
    : <ApprovalCard item={props.item} store={props.store} inbox={props.inbox} />;
}

/** typing says whether a key pressed on el is text being typed (so no shortcut). */
function typing(el: EventTarget | null): boolean {
  if (!(el instanceof HTMLElement)) return false;
  if (el.isContentEditable || el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement) return true;
  return el instanceof HTMLInputElement && !["checkbox", "radio", "button", "submit", "reset"].includes(el.type);
}

/**
 * useInboxKeys gives the inbox its keyboard: j / k focus the next / previous
 * request, a / d allow / deny the focused one (answer / decline a question),
 * with its card's scope. Keys typed into a field are left alone, and a / d
 * do nothing until a request has the focus. After an answer the focus goes
 * to the request that took its place.
 */
function useInboxKeys(list: { current: HTMLDivElement | null }, count: number): void {
  const refocus = useRef<number | undefined>(undefined);
  useEffect(() => {
    const cards = (): HTMLElement[] => [...(list.current?.querySelectorAll<HTMLElement>(":scope > article") ?? [])];
    const onKey = (e: KeyboardEvent): void => {
      if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
      const all = cards();
      const at = all.findIndex((c) => c.contains(document.activeElement));
      switch (e.key) {
        case "j":
        case "k": {
          if (all.length === 0) return;
          const next = at < 0 ? 0 : e.key === "j" ? Math.min(at + 1, all.length - 1) : Math.max(at - 1, 0);
          all[next]!.focus();
          all[next]!.scrollIntoView({ block: "nearest" });
          e.preventDefault();
          return;
        }
        case "a":
        case "d": {
          if (at < 0) return;
          const button = all[at]!.querySelector<HTMLButtonElement>(`.actions button.${e.key === "a" ? "allow" : "deny"}`);
          if (button === null || button.disabled) return;
          refocus.current = at;
          button.click();
          e.preventDefault();
          return;
        }
      }
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [list]);
  useEffect(() => {
    const at = refocus.current;
    if (at === undefined) return;
    const all = [...(list.current?.querySelectorAll<HTMLElement>(":scope > article") ?? [])];
    if (all.length === 0 || all.length > count) return;
    refocus.current = undefined;
    all[Math.min(at, all.length - 1)]!.focus();
  }, [count, list]);
}

/** ApprovalsView lists every pending request, with keyboard shortcuts. */
export function ApprovalsView(props: { store: ApprovalStore }) {
  const items = useApprovals(props.store);
  const list = useRef<HTMLDivElement>(null);
  useInboxKeys(list, items.length);
  return (
    <section aria-labelledby="approvals-title">
      <header class="view-head">
        <h2 id="approvals-title">Approvals</h2>
        <button type="button" onClick={() => void props.store.refresh()}>Refresh</button>
      </header>
      {items.length > 0 && (
        <p class="keys" id="inbox-keys">
          Keys: <kbd>j</kbd> / <kbd>k</kbd> next / previous request · <kbd>a</kbd> allow (answer) · <kbd>d</kbd> deny (decline) the focused one, with its scope
        </p>
      )}
      <div ref={list} class="inbox" aria-describedby={items.length > 0 ? "inbox-keys" : undefined}>
        {items.length === 0
          ? <p class="empty">Nothing waits for a decision.</p>
          : items.map((item) => <WaitingCard key={idOf(item)} item={item} store={props.store} inbox />)}
      </div>
    </section>
  );
}
