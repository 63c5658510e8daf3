// A session of a TrellisClient, and one turn of it. `session.prompt(text)`
// returns the turn: an async iterable of that turn's events alone, ending at
// its turn.done, and a promise of its result. Loops over different turns,
// queued or running at once, each get their own turn's events, and leaving
// one loop ends no other. This file imports nothing of Node: browsers use it
// too.

import { TrellisConnectionError } from "./errors.js";
import type { EventsOptions } from "./client.js";
import type { ErrorEvent, MethodParams, MethodResult, SessionEvent, TurnDoneEvent } from "./protocol.js";

/** What a Session needs of its client (a TrellisClient). */
export interface SessionClient {
  readonly url: string;
  call(method: "session.prompt", params: MethodParams<"session.prompt">, options?: CallOptionsLike): Promise<{ turnId: string }>;
  call(method: "session.steer", params: MethodParams<"session.steer">, options?: CallOptionsLike): Promise<{ turnId: string; started: boolean }>;
  call(method: "session.setBudget", params: MethodParams<"session.setBudget">, options?: CallOptionsLike): Promise<MethodResult<"session.setBudget">>;
  onEvent(sessionId: string, handler: (event: SessionEvent) => void): () => void;
  events(sessionId: string, options?: EventsOptions): AsyncIterableIterator<SessionEvent>;
}

/** Per-call options (TrellisClient's CallOptions). */
export interface CallOptionsLike {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** Options of `session.prompt`: session.prompt's params besides the text, and the call's options. */
export type PromptOptions = Omit<MethodParams<"session.prompt">, "sessionId" | "text"> & CallOptionsLike;

/** What a turn came to, from its events. */
export interface TurnResult {
  turnId: string;
  /** turn.done's reason: complete, interrupted, error, denied or budget. */
  reason: TurnDoneEvent["reason"];
  /** The turn's last answer (its last message.done), "" when it gave none. */
  text: string;
  /** The turn's usage events, summed. */
  usage: { inputTokens: number; outputTokens: number };
  /** The turn's error events, in order. */
  errors: ErrorEvent[];
}

/**
 * Session is one session of a client: `client.session(id)`, or
 * `client.createSession(params)`.
 */
export class Session {
  /** The session's id. */
  readonly id: string;
  readonly #client: SessionClient;
  readonly #onClose: (f: (err: TrellisConnectionError) => void) => () => void;

  /**
   * Made by TrellisClient (`client.session`, `client.createSession`);
   * onClose registers a function called when the client closes for good.
   */
  constructor(client: SessionClient, id: string, onClose: (f: (err: TrellisConnectionError) => void) => () => void) {
    this.#client = client;
    this.id = id;
    this.#onClose = onClose;
  }

  /**
   * prompt sends text (session.prompt) and returns its turn: iterate it for
   * the turn's events (from turn.queued or turn.started to turn.done), await
   * it (or its `result`) for what the turn came to. With `whenBusy: "steer"`
   * the text joins the running turn and the Turn is that turn, from now on.
   */
  prompt(text: string, options: PromptOptions = {}): Turn {
    const { signal, timeoutMs, ...params } = options;
    const callOptions = { ...(signal !== undefined ? { signal } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) };
    return new Turn(this.#client, this.id, this.#onClose, async () => {
      const { turnId } = await this.#client.call("session.prompt", { ...params, sessionId: this.id, text }, callOptions);
      return { turnId, joined: params.whenBusy === "steer" };
    });
  }

  /**
   * setBudget sets the session's own budget (session.setBudget): the most
   * its model calls may cost, in millionths of a US dollar, and/or their
   * input + output tokens; neither clears it. A turn that reached the old
   * budget and fits the new one resumes (turn.resumed). Resolves to the
   * budget in force, what the session spent and whether its turn is still
   * paused.
   */
  setBudget(budget: { maxCostMicroUsd?: number; maxTokens?: number }, options: CallOptionsLike = {}): Promise<MethodResult<"session.setBudget">> {
    return this.#client.call("session.setBudget", { ...budget, sessionId: this.id }, options);
  }

  /** events iterates over all the session's events, turn after turn: `client.events(id, options)`. */
  events(options?: EventsOptions): AsyncIterableIterator<SessionEvent> {
    return this.#client.events(this.id, options);
  }

  /**
   * steer sends text into the running turn (session.steer) and returns that
   * turn, from now on; with no turn to steer, the text starts one and the
   * Turn is the new turn.
   */
  steer(text: string, options: CallOptionsLike = {}): Turn {
    return new Turn(this.#client, this.id, this.#onClose, async () => {
      const { turnId, started } = await this.#client.call("session.steer", { sessionId: this.id, text }, options);
      return { turnId, joined: !started };
    });
  }
}

// The turn an event belongs to: its payload's turnId, else the running turn
// (unknown until a turn.started or turn.done is seen).
const UNKNOWN = Symbol("unknown");
type Owner = string | typeof UNKNOWN | undefined;

/**
 * Turn is one turn of a session: an async iterable of its events (once),
 * and, awaited, its TurnResult. The events are kept from the moment the
 * Turn is made until they are taken, so iterating it later misses none;
 * leaving the loop early stops keeping them, and the result still comes.
 */
export class Turn implements AsyncIterable<SessionEvent>, PromiseLike<TurnResult> {
  /** The session's id. */
  readonly sessionId: string;
  /** The turn's id, once the daemon accepted the prompt; rejects as the call does. */
  readonly turnId: Promise<string>;
  /** What the turn came to, at its turn.done; rejects when the call fails or the client closes first. */
  readonly result: Promise<TurnResult>;

  #id: string | undefined;
  #joined = false; // the turn ran already when the call was made (steered)
  #running: Owner = UNKNOWN;
  #early: { ev: SessionEvent; owner: Owner }[] = []; // events before the call's answer
  readonly #items: SessionEvent[] = [];
  #iterated = false;
  #left = false;
  #ended = false;
  #error: unknown = undefined;
  #waiter: { resolve: (r: IteratorResult<SessionEvent>) => void; reject: (e: unknown) => void } | undefined;
  readonly #summary: TurnResult = { turnId: "", reason: "complete", text: "", usage: { inputTokens: 0, outputTokens: 0 }, errors: [] };
  #resolve!: (r: TurnResult) => void;
  #reject!: (e: unknown) => void;
  readonly #detach: () => void;

  /** Made by Session.prompt and Session.steer; start makes the call. */
  constructor(client: SessionClient, sessionId: string, onClose: (f: (err: TrellisConnectionError) => void) => () => void,
    start: () => Promise<{ turnId: string; joined: boolean }>) {
    this.sessionId = sessionId;
    this.result = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    // Subscribed before the call goes out: no event of the turn is missed.
    const off = client.onEvent(sessionId, (ev) => this.#receive(ev));
    const offClose = onClose((err) => this.#fail(new TrellisConnectionError(client.url,
      `session ${sessionId}: the client closed before the turn ended: ${err.message}`, { cause: err })));
    this.#detach = () => {
      off();
      offClose();
    };
    this.turnId = start().then(({ turnId, joined }) => {
      this.#accept(turnId, joined);
      return turnId;
    }, (err: unknown) => {
      this.#fail(err);
      throw err;
    });
    // Whoever uses only one of them must not see the other's rejection as unhandled.
    this.turnId.catch(() => {});
    this.result.catch(() => {});
  }

  /** Awaiting a Turn awaits its result. */
  then<A = TurnResult, B = never>(onFulfilled?: ((r: TurnResult) => A | PromiseLike<A>) | null,
    onRejected?: ((e: unknown) => B | PromiseLike<B>) | null): Promise<A | B> {
    return this.result.then(onFulfilled, onRejected);
  }

  /** The turn's events, in seq order, ending after its turn.done. A Turn is iterated once. */
  [Symbol.asyncIterator](): AsyncIterator<SessionEvent> {
    if (this.#iterated) throw new Error(`session ${this.sessionId}: a Turn's events are iterated once (this one was already)`);
    this.#iterated = true;
    return {
      next: () => this.#next(),
      return: () => {
        this.#left = true;
        this.#items.length = 0;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }

  #next(): Promise<IteratorResult<SessionEvent>> {
    if (this.#waiter !== undefined) return Promise.reject(new Error("Turn: next() called again before the previous call settled"));
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
      this.#wake();
    });
  }

  #wake(): void {
    const w = this.#waiter;
    if (w === undefined) return;
    const ev = this.#items.shift();
    if (ev !== undefined) {
      this.#waiter = undefined;
      w.resolve({ value: ev, done: false });
    } else if (this.#ended) {
      this.#waiter = undefined;
      if (this.#error !== undefined) {
        const err = this.#error;
        this.#error = undefined; // fail once, then report done
        w.reject(err);
      } else {
        w.resolve({ value: undefined, done: true });
      }
    }
  }

  // receive sees every event of the session, in seq order.
  #receive(ev: SessionEvent): void {
    if (this.#ended) return;
    const own = "turnId" in ev.payload && typeof ev.payload.turnId === "string" ? ev.payload.turnId : undefined;
    const owner: Owner = own ?? this.#running;
    if (ev.kind === "turn.started") this.#running = ev.payload.turnId;
    else if (ev.kind === "turn.done" && (this.#running === ev.payload.turnId || this.#running === UNKNOWN)) this.#running = undefined;
    if (this.#id === undefined) this.#early.push({ ev, owner });
    else if (this.#owns(owner)) this.#take(ev);
  }

  #owns(owner: Owner): boolean {
    return owner === this.#id || (owner === UNKNOWN && this.#joined);
  }

  // accept learns the turn's id from the call's answer and takes the turn's
  // events that came before it.
  #accept(turnId: string, joined: boolean): void {
    if (this.#ended) return;
    this.#id = turnId;
    this.#summary.turnId = turnId;
    // A steered turn started before this Turn was made, unless its start is here.
    this.#joined = joined && !this.#early.some(({ ev }) => ev.kind === "turn.started" && ev.payload.turnId === turnId);
    const early = this.#early;
    this.#early = [];
    for (const { ev, owner } of early) {
      if (this.#owns(owner)) this.#take(ev);
      if (this.#ended) return;
    }
  }

  #take(ev: SessionEvent): void {
    const s = this.#summary;
    if (ev.kind === "message.done") s.text = ev.payload.text;
    else if (ev.kind === "usage") {
      s.usage.inputTokens += ev.payload.inputTokens;
      s.usage.outputTokens += ev.payload.outputTokens;
    } else if (ev.kind === "error") s.errors.push(ev.payload);
    if (!this.#left) this.#items.push(ev);
    if (ev.kind === "turn.done" && ev.payload.turnId === this.#id) {
      s.reason = ev.payload.reason;
      this.#end(undefined);
      this.#resolve(s);
    }
    this.#wake();
  }

  #fail(err: unknown): void {
    if (this.#ended) return;
    this.#end(err);
    this.#reject(err);
    this.#wake();
  }

  #end(err: unknown): void {
    this.#ended = true;
    this.#error = err;
    this.#early = [];
    this.#detach();
  }
}
