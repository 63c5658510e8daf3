// The Trellis client: JSON-RPC 2.0 over WebSocket to trellisd (PROTOCOL.md).
// One TrellisClient is one authenticated connection: typed calls, session
// events in seq order, notifications, and answers to the daemon's
// approval.request.

import WebSocket from "ws";

import { isRecord, TrellisConnectionError, TrellisError, type JsonRpcErrorObject } from "./errors.js";
import {
  PROTOCOL_VERSION,
  type ApprovalReply,
  type ApprovalRequest,
  type HelloResponse,
  type MethodName,
  type MethodParams,
  type MethodResult,
  type NotificationName,
  type Notifications,
  type SessionEvent,
} from "./protocol.js";
import { EventQueue, SeqOrderer } from "./session-events.js";

/** The SDK's own version, sent as `clientVersion` unless the caller sets one. */
export const SDK_VERSION = "0.1.0";

/** Options of `connect`. */
export interface ConnectOptions {
  /**
   * The daemon's WebSocket URL, e.g. `ws://127.0.0.1:PORT/ws` (as returned by
   * `readDaemonInfo`). A URL without a path gets `/ws`.
   */
  url: string;
  /** The daemon's auth token (daemon.json's `token`). */
  token: string;
  /** Stable across reconnects: the sessions this client originated are re-bound to the new connection. */
  clientId?: string;
  /** Sent as `clientVersion` in system.hello; default: SDK_VERSION. */
  clientVersion?: string;
  /** Sent as `clientKind` in system.hello; default: "sdk". */
  clientKind?: string;
  /** How long opening the connection and system.hello may take; default 10 000 ms. */
  timeoutMs?: number;
  /**
   * Answers approval.request from the first moment (a clientId re-bind may
   * bring requests right after hello). Same as calling `onApprovalRequest`.
   */
  onApprovalRequest?: ApprovalHandler;
  /**
   * Receives the errors that have no caller to go to: a listener or handler
   * that threw, a frame that is not valid JSON-RPC. Default: console.error.
   */
  onError?: (err: unknown) => void;
}

/** Per-call options. */
export interface CallOptions {
  /** Rejects the call when aborted (the daemon may still carry it out). */
  signal?: AbortSignal;
  /** Rejects the call with a TrellisConnectionError after this long; default: no limit. */
  timeoutMs?: number;
}

/** The params of a call: optional when every field of the method's params is. */
export type CallArgs<M extends MethodName> = {} extends MethodParams<M>
  ? [params?: MethodParams<M>, options?: CallOptions]
  : [params: MethodParams<M>, options?: CallOptions];

/** Context given to an approval handler. */
export interface ApprovalContext {
  /** Aborted when the request is resolved elsewhere (timeout, interrupt) or the connection closes. */
  signal: AbortSignal;
}

/**
 * ApprovalHandler answers one approval.request. Returning `{decision}` (and
 * optionally `scope`, `reason`) answers it; throwing answers with a JSON-RPC
 * error, which the daemon treats as a denial.
 */
export type ApprovalHandler = (request: ApprovalRequest, ctx: ApprovalContext) => ApprovalReply | Promise<ApprovalReply>;

/** Options of `events`. */
export interface EventsOptions {
  /**
   * Replay the stored events with seq > afterSeq first (through
   * session.resume, which also subscribes this connection), then the live
   * ones, with no gap and no duplicate. Without it, only events from now on.
   */
  afterSeq?: number;
  /** Ends the iterator (it rejects with the abort reason). */
  signal?: AbortSignal;
}

/** A JSON-RPC message id as the daemon may send it. */
type Id = number | string;

interface Pending {
  method: string;
  resolve: (result: unknown) => void;
  reject: (err: unknown) => void;
  cleanup: () => void;
}

interface SessionStream {
  orderer: SeqOrderer;
  listeners: Set<(ev: SessionEvent) => void>;
}

const DEFAULT_TIMEOUT_MS = 10_000;
// The daemon's largest frame is 32 MiB (hello's limits.maxFrameBytes); its
// frames to us are never larger than what it accepts.
const MAX_FRAME_BYTES = 64 << 20;

/**
 * connect opens a WebSocket to the daemon and completes system.hello. It
 * rejects with a TrellisConnectionError when the daemon cannot be reached
 * and with a TrellisError when hello is refused (`unauthorized` for a bad
 * token, `protocol_incompatible` for another major version).
 *
 * `connect(await readDaemonInfo())` connects to the local daemon.
 */
export function connect(options: ConnectOptions): Promise<TrellisClient> {
  return TrellisClient.connect(options);
}

/**
 * TrellisClient is one authenticated connection to a daemon. Create it with
 * `connect`; end it with `close`.
 */
export class TrellisClient {
  /** The WebSocket URL this client is connected to. */
  readonly url: string;
  /** Resolves when the connection has ended, with the reason (undefined after `close()`). */
  readonly closed: Promise<TrellisConnectionError | undefined>;

  readonly #ws: WebSocket;
  readonly #onError: (err: unknown) => void;
  #hello: HelloResponse | undefined;
  #nextId = 1;
  readonly #pending = new Map<Id, Pending>();
  readonly #sessions = new Map<string, SessionStream>();
  readonly #notificationListeners = new Map<string, Set<(params: unknown) => void>>();
  #approvalHandler: ApprovalHandler | undefined;
  readonly #approvals = new Map<string, AbortController>(); // requestId → in-flight handler
  readonly #iterators = new Set<EventQueue>();
  #closeReason: TrellisConnectionError | undefined;
  #closedByUs = false;
  #resolveClosed!: (reason: TrellisConnectionError | undefined) => void;

  /** Same as the function `connect`. */
  static async connect(options: ConnectOptions): Promise<TrellisClient> {
    const url = normalizeUrl(options.url);
    if (typeof options.token !== "string" || options.token === "") {
      throw new TypeError("connect: token is required (daemon.json's \"token\"; readDaemonInfo() returns it)");
    }
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const client = new TrellisClient(await openSocket(url, timeoutMs), url, options);
    try {
      client.#hello = await client.call("system.hello", {
        token: options.token,
        clientVersion: options.clientVersion ?? SDK_VERSION,
        protocolVersion: PROTOCOL_VERSION,
        clientKind: options.clientKind ?? "sdk",
        ...(options.clientId !== undefined ? { clientId: options.clientId } : {}),
      }, { timeoutMs });
    } catch (err) {
      await client.close();
      throw err;
    }
    return client;
  }

  private constructor(ws: WebSocket, url: string, options: ConnectOptions) {
    this.#ws = ws;
    this.url = url;
    this.#onError = options.onError ?? ((err) => console.error("@trellis/sdk:", err));
    this.#approvalHandler = options.onApprovalRequest;
    this.closed = new Promise((resolve) => {
      this.#resolveClosed = resolve;
    });
    ws.on("message", (data) => this.#receive(data));
    ws.on("error", (err) => {
      this.#closeReason ??= new TrellisConnectionError(this.url, `connection to ${this.url} failed: ${err.message}`, { cause: err });
    });
    ws.on("close", (code, reason) => this.#closedEvent(code, reason.toString()));
  }

  /** The daemon's answer to system.hello (protocol version, capabilities, limits, connectionId). */
  get hello(): HelloResponse {
    if (this.#hello === undefined) throw new Error("TrellisClient: system.hello has not completed");
    return this.#hello;
  }

  /**
   * call invokes a protocol method and resolves with its result. A JSON-RPC
   * error rejects with a TrellisError (`code`, `numeric`, `data`); a lost
   * connection with a TrellisConnectionError.
   */
  call<M extends MethodName>(method: M, ...args: CallArgs<M>): Promise<MethodResult<M>> {
    const [params, options] = args as [MethodParams<M> | undefined, CallOptions | undefined];
    return this.#call(method, params ?? {}, options) as Promise<MethodResult<M>>;
  }

  /**
   * onEvent calls handler with each session.event of the session, in seq
   * order with no gap and no duplicate, from now on. The connection receives
   * a session's events once it created, resumed or prompted it. It returns a
   * function that removes the handler.
   */
  onEvent(sessionId: string, handler: (event: SessionEvent) => void): () => void {
    const stream = this.#stream(sessionId);
    stream.listeners.add(handler);
    return () => {
      stream.listeners.delete(handler);
    };
  }

  /**
   * events iterates over the session's events in seq order: from now on, or,
   * with `afterSeq`, the stored ones after it first (session.resume). It ends
   * when the connection is closed with `close()`, and fails with a
   * TrellisConnectionError when the connection is lost. Leaving a
   * `for await` loop early unsubscribes it.
   */
  events(sessionId: string, options: EventsOptions = {}): AsyncIterableIterator<SessionEvent> {
    const stream = this.#stream(sessionId);
    const listener = (ev: SessionEvent): void => queue.push(ev);
    const detach = (): void => {
      stream.listeners.delete(listener);
      this.#iterators.delete(queue);
      options.signal?.removeEventListener("abort", onAbort);
    };
    const queue = new EventQueue(detach);
    const onAbort = (): void => {
      detach();
      queue.fail(options.signal?.reason);
    };
    if (this.#closeReason !== undefined || this.#closedByUs) {
      queue.end(this.#closedByUs ? undefined : this.#closeReason);
      return queue;
    }
    if (options.signal?.aborted === true) {
      queue.fail(options.signal.reason);
      return queue;
    }
    stream.listeners.add(listener);
    this.#iterators.add(queue);
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (options.afterSeq !== undefined) {
      queue.hold();
      this.call("session.resume", { sessionId, afterSeq: options.afterSeq }).then(
        (r) => queue.replay(r.events),
        (err: unknown) => {
          detach();
          queue.fail(err);
        },
      );
    }
    return queue;
  }

  /**
   * onNotification calls handler with the params of each notification
   * `method` (approval.pending, approval.resolved, job.event, gateway.event,
   * commands.changed, session.event — the latter as received; use onEvent or
   * events for seq order). It returns a function that removes the handler.
   */
  onNotification<N extends NotificationName>(method: N, handler: (params: Notifications[N]) => void): () => void;
  onNotification(method: string, handler: (params: unknown) => void): () => void;
  onNotification(method: string, handler: (params: never) => void): () => void {
    let set = this.#notificationListeners.get(method);
    if (set === undefined) {
      set = new Set();
      this.#notificationListeners.set(method, set);
    }
    const h = handler as (params: unknown) => void;
    set.add(h);
    return () => {
      set.delete(h);
    };
  }

  /**
   * onApprovalRequest sets the handler that answers the daemon's
   * approval.request for the sessions this connection originates (it
   * replaces any earlier one). Without a handler, requests are answered
   * with an error, which the daemon treats as a denial. It returns a
   * function that removes the handler.
   */
  onApprovalRequest(handler: ApprovalHandler): () => void {
    this.#approvalHandler = handler;
    return () => {
      if (this.#approvalHandler === handler) this.#approvalHandler = undefined;
    };
  }

  /**
   * close closes the connection. Calls still waiting reject with a
   * TrellisConnectionError; event iterators end.
   */
  async close(): Promise<void> {
    if (this.#ws.readyState === WebSocket.CLOSED) return;
    this.#closedByUs = true;
    if (this.#ws.readyState !== WebSocket.CLOSING) this.#ws.close(1000, "client closed");
    await this.closed;
  }

  #stream(sessionId: string): SessionStream {
    let stream = this.#sessions.get(sessionId);
    if (stream === undefined) {
      const listeners = new Set<(ev: SessionEvent) => void>();
      const orderer = new SeqOrderer((ev) => {
        for (const l of [...listeners]) this.#safely(() => l(ev));
      });
      stream = { orderer, listeners };
      this.#sessions.set(sessionId, stream);
    }
    return stream;
  }

  #call(method: string, params: unknown, options: CallOptions | undefined): Promise<unknown> {
    if (this.#closeReason !== undefined || this.#closedByUs || this.#ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(this.#closeReason ?? new TrellisConnectionError(this.url, `${method}: the connection to ${this.url} is closed`));
    }
    if (options?.signal?.aborted === true) return Promise.reject(options.signal.reason);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => {
        this.#pending.get(id)?.cleanup();
        reject(options?.signal?.reason);
      };
      const cleanup = (): void => {
        this.#pending.delete(id);
        if (timer !== undefined) clearTimeout(timer);
        options?.signal?.removeEventListener("abort", onAbort);
      };
      this.#pending.set(id, { method, resolve, reject, cleanup });
      if (options?.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          cleanup();
          reject(new TrellisConnectionError(this.url, `${method}: no answer from ${this.url} within ${String(options.timeoutMs)} ms`));
        }, options.timeoutMs);
      }
      options?.signal?.addEventListener("abort", onAbort, { once: true });
      this.#send({ jsonrpc: "2.0", id, method, params }, (err) => {
        if (err === undefined || !this.#pending.has(id)) return;
        cleanup();
        reject(new TrellisConnectionError(this.url, `${method}: could not send to ${this.url}: ${err.message}`, { cause: err }));
      });
    });
  }

  #send(msg: unknown, done?: (err?: Error) => void): void {
    if (this.#ws.readyState !== WebSocket.OPEN) {
      done?.(new Error("the connection is closed"));
      return;
    }
    this.#ws.send(JSON.stringify(msg), done !== undefined ? (err) => done(err ?? undefined) : undefined);
  }

  #receive(data: WebSocket.RawData): void {
    // Binary frames are UTF-8 JSON too (PROTOCOL.md §2).
    const text = Array.isArray(data)
      ? Buffer.concat(data).toString("utf8")
      : Buffer.isBuffer(data) ? data.toString("utf8") : Buffer.from(data).toString("utf8");
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      this.#onError(new Error(`received a frame that is not JSON: ${text.slice(0, 200)}`));
      return;
    }
    for (const m of Array.isArray(msg) ? msg : [msg]) this.#dispatch(m);
  }

  #dispatch(msg: unknown): void {
    if (!isRecord(msg)) {
      this.#onError(new Error(`received a JSON-RPC message that is not an object: ${JSON.stringify(msg).slice(0, 200)}`));
      return;
    }
    const method = msg["method"];
    const id = msg["id"];
    if (typeof method === "string") {
      if (id === undefined || id === null) this.#notification(method, msg["params"]);
      else if (typeof id === "string" || typeof id === "number") void this.#serverRequest(id, method, msg["params"]);
      return;
    }
    if (typeof id !== "string" && typeof id !== "number") {
      this.#onError(new Error(`received a response without an id: ${JSON.stringify(msg).slice(0, 200)}`));
      return;
    }
    const pending = this.#pending.get(id);
    if (pending === undefined) return; // timed out or aborted already
    pending.cleanup();
    if (isRecord(msg["error"])) {
      const e = msg["error"];
      const error: JsonRpcErrorObject = {
        code: typeof e["code"] === "number" ? e["code"] : -32603,
        message: typeof e["message"] === "string" ? e["message"] : "(no message)",
        data: e["data"],
      };
      pending.reject(new TrellisError(pending.method, error));
      return;
    }
    const result = msg["result"];
    this.#observeResult(pending.method, result);
    pending.resolve(result);
  }

  // observeResult sets where a session's event stream starts, before the
  // caller sees the result: session.create subscribes from seq 1,
  // session.resume right after the events it returns.
  #observeResult(method: string, result: unknown): void {
    if (!isRecord(result) || typeof result["sessionId"] !== "string") return;
    const stream = this.#stream(result["sessionId"]);
    if (method === "session.create") {
      stream.orderer.start(1);
    } else if (method === "session.resume" && Array.isArray(result["events"])) {
      const events = result["events"].filter(isSessionEvent);
      const last = events.length > 0 ? events[events.length - 1]!.seq : 0;
      if (!stream.orderer.start(last + 1)) {
        for (const ev of events) stream.orderer.add(ev);
      }
    }
  }

  #notification(method: string, params: unknown): void {
    if (method === "session.event") {
      if (isSessionEvent(params)) {
        this.#stream(params.sessionId).orderer.add(params);
      } else {
        this.#onError(new Error(`received a session.event without sessionId, seq or kind: ${JSON.stringify(params).slice(0, 200)}`));
      }
    } else if (method === "approval.resolved" && isRecord(params) && typeof params["requestId"] === "string") {
      this.#approvals.get(params["requestId"])?.abort(new Error(`approval request ${params["requestId"]} was resolved elsewhere`));
    }
    const set = this.#notificationListeners.get(method);
    if (set === undefined) return;
    for (const h of [...set]) this.#safely(() => h(params));
  }

  async #serverRequest(id: Id, method: string, params: unknown): Promise<void> {
    if (method !== "approval.request") {
      this.#send({ jsonrpc: "2.0", id, error: { code: -32601, message: `this client does not serve ${method}`, data: { code: "method_not_found" } } });
      return;
    }
    const handler = this.#approvalHandler;
    if (handler === undefined) {
      this.#send({ jsonrpc: "2.0", id, error: { code: -32603, message: "this client has no approval handler (TrellisClient.onApprovalRequest)", data: { code: "internal" } } });
      return;
    }
    const request = params as ApprovalRequest;
    const requestId = isRecord(params) && typeof params["requestId"] === "string" ? params["requestId"] : String(id);
    const ac = new AbortController();
    this.#approvals.set(requestId, ac);
    try {
      const reply = checkApprovalReply(await handler(request, { signal: ac.signal }));
      this.#send({ jsonrpc: "2.0", id, result: reply });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.#send({ jsonrpc: "2.0", id, error: { code: -32603, message: `the approval handler failed: ${message}`, data: { code: "internal" } } });
    } finally {
      this.#approvals.delete(requestId);
    }
  }

  #closedEvent(code: number, reason: string): void {
    const detail = reason !== "" ? `code ${String(code)}: ${reason}` : `code ${String(code)}`;
    const err = this.#closedByUs
      ? new TrellisConnectionError(this.url, `the connection to ${this.url} was closed by the client`)
      : (this.#closeReason ?? new TrellisConnectionError(this.url, `the connection to ${this.url} closed (${detail})`));
    this.#closeReason = err;
    for (const p of [...this.#pending.values()]) {
      p.cleanup();
      p.reject(new TrellisConnectionError(this.url, `${p.method}: ${err.message}`, { cause: err }));
    }
    for (const ac of this.#approvals.values()) ac.abort(err);
    for (const q of [...this.#iterators]) q.end(this.#closedByUs ? undefined : err);
    this.#iterators.clear();
    this.#resolveClosed(this.#closedByUs ? undefined : err);
  }

  #safely(f: () => void): void {
    try {
      f();
    } catch (err) {
      this.#onError(err);
    }
  }
}

function normalizeUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new TypeError(`connect: url ${JSON.stringify(raw)} is not a URL; expected ws://127.0.0.1:PORT/ws (readDaemonInfo() returns it)`);
  }
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw new TypeError(`connect: url ${JSON.stringify(raw)} must be ws:// or wss://`);
  }
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/ws";
  return u.toString();
}

function openSocket(url: string, timeoutMs: number): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { handshakeTimeout: timeoutMs, maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false });
    const fail = (err: Error): void => {
      ws.removeAllListeners();
      ws.on("error", () => {}); // a late error after terminate must not crash the process
      ws.terminate();
      const hint = /ECONNREFUSED/.test(err.message) ? " (is the daemon running? readDaemonInfo() reads its address from daemon.json)" : "";
      reject(new TrellisConnectionError(url, `cannot connect to ${url}: ${err.message}${hint}`, { cause: err }));
    };
    ws.once("open", () => {
      ws.removeAllListeners();
      resolve(ws);
    });
    ws.once("error", fail);
    ws.once("unexpected-response", (_req, res) => {
      fail(new Error(`the server answered HTTP ${String(res.statusCode)} instead of a WebSocket upgrade (is the path /ws?)`));
    });
  });
}

function isSessionEvent(v: unknown): v is SessionEvent {
  return isRecord(v) && typeof v["sessionId"] === "string" && typeof v["kind"] === "string" &&
    typeof v["seq"] === "number" && Number.isInteger(v["seq"]) && v["seq"] >= 1;
}

const DECISIONS = new Set(["allow", "deny"]);
const SCOPES = new Set(["once", "session", "project", "always"]);

// checkApprovalReply keeps the fields of a reply the daemon accepts and
// rejects one it would refuse, with a message that names the field.
function checkApprovalReply(reply: unknown): ApprovalReply {
  if (!isRecord(reply)) throw new Error(`the handler returned ${JSON.stringify(reply)}, not {decision: "allow" | "deny", scope?, reason?}`);
  const { decision, scope, reason } = reply;
  if (typeof decision !== "string" || !DECISIONS.has(decision)) {
    throw new Error(`the handler returned decision ${JSON.stringify(decision)}; want "allow" or "deny"`);
  }
  if (scope !== undefined && (typeof scope !== "string" || !SCOPES.has(scope))) {
    throw new Error(`the handler returned scope ${JSON.stringify(scope)}; want "once", "session", "project" or "always"`);
  }
  if (reason !== undefined && typeof reason !== "string") {
    throw new Error(`the handler returned reason ${JSON.stringify(reason)}; want a string`);
  }
  const out: ApprovalReply = { decision: decision as ApprovalReply["decision"] };
  if (scope !== undefined) out.scope = scope as NonNullable<ApprovalReply["scope"]>;
  if (reason !== undefined) out.reason = reason;
  return out;
}
