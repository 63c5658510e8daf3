// The Trellis client: JSON-RPC 2.0 over WebSocket to trellisd (PROTOCOL.md).
// One TrellisClient is one logical connection that survives daemon
// restarts: typed calls, session events in seq order, notifications, and
// answers to the daemon's approval.request and question.request. When the socket drops it
// reconnects with backoff (asking `endpoint` for a possibly new address and
// token) and resumes every watched session from the last seq it delivered.
// This file imports nothing of Node: browsers use it too.
import { isRecord, TrellisConnectionError, TrellisError } from "./errors.js";
import { MUTATING_METHODS, PROTOCOL_VERSION, } from "./protocol.js";
import { EventQueue, SeqOrderer } from "./session-events.js";
import { Session } from "./session.js";
import { standardSocket } from "./socket.js";
/** The SDK's own version, sent as `clientVersion` unless the caller sets one. */
export const SDK_VERSION = "0.2.0";
const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_OFFLINE_CALL_TIMEOUT_MS = 30_000;
const DEFAULT_MAX_QUEUED_EVENTS = 10_000;
/**
 * TrellisClient is a connection to a daemon that reconnects by itself.
 * Create it with `connect`; end it with `close`.
 */
export class TrellisClient {
    /** Resolves when the client has closed for good, with the reason (undefined after `close()`). */
    closed;
    #url;
    #token;
    #options;
    #openSocket;
    #endpoint;
    #reconnect;
    #clientId;
    #onError;
    #state = "connecting";
    #socket;
    #gen = 0; // increases with each socket
    #socketClosed = Promise.resolve();
    #paused = false;
    #hello;
    #nextId = 1;
    #pending = new Map();
    #waiting = new Set(); // calls waiting for a connection
    #sessions = new Map();
    #notificationListeners = new Map();
    #clientListeners = new Map();
    #approvalHandler;
    #questionHandler;
    /** Lent tools' handlers and definitions, by lentKey(sessionId, name): registered again after a reconnect. */
    #lent = new Map();
    #approvals = new Map(); // requestId or questionId → in-flight handler
    #serving = new Set(); // the daemon's requests being answered (close() waits for them)
    #iterators = new Set();
    #closeWatchers = new Set(); // turns under way
    #closeReason;
    #finished = false;
    #lastError;
    #attempts = 0;
    #wakeSleep;
    #resolveClosed;
    /** Same as the function `connect` (with the global WebSocket unless `socket` is set). */
    static async connect(options) {
        const url = normalizeUrl(options.url);
        if (typeof options.token !== "string" || options.token === "") {
            throw new TypeError("connect: token is required (daemon.json's \"token\"; readDaemonInfo() returns it)");
        }
        const client = new TrellisClient(url, options);
        try {
            await client.#open({ url, token: options.token });
        }
        catch (err) {
            client.#finish(err instanceof TrellisConnectionError ? err : new TrellisConnectionError(url, String(err)));
            throw err;
        }
        client.#state = "open";
        return client;
    }
    constructor(url, options) {
        this.#url = url;
        this.#token = options.token;
        this.#options = options;
        this.#openSocket = options.socket ?? standardSocket();
        this.#endpoint = options.endpoint ?? (() => ({ url: this.#url, token: this.#token }));
        const r = options.reconnect ?? true;
        this.#reconnect = r === false ? undefined : {
            initialDelayMs: (r === true ? undefined : r.initialDelayMs) ?? 100,
            maxDelayMs: (r === true ? undefined : r.maxDelayMs) ?? 5_000,
            giveUpAfterMs: (r === true ? undefined : r.giveUpAfterMs) ?? Infinity,
        };
        this.#clientId = options.clientId ?? randomClientId();
        this.#onError = options.onError ?? ((err) => console.error("@trellis/sdk:", err));
        this.#approvalHandler = options.onApprovalRequest;
        this.#questionHandler = options.onQuestionRequest;
        this.closed = new Promise((resolve) => {
            this.#resolveClosed = resolve;
        });
    }
    /** The WebSocket URL this client is (or was last) connected to. */
    get url() {
        return this.#url;
    }
    /** connecting, open, reconnecting or closed. */
    get state() {
        return this.#state;
    }
    /** The daemon's answer to the latest system.hello (protocol version, capabilities, limits, connectionId). */
    get hello() {
        if (this.#hello === undefined)
            throw new Error("TrellisClient: system.hello has not completed");
        return this.#hello;
    }
    /**
     * call invokes a protocol method and resolves with its result. A JSON-RPC
     * error rejects with a TrellisError (`code`, `numeric`, `data`). Made while
     * disconnected, it waits for the reconnect (up to `offlineCallTimeoutMs`,
     * then it rejects with a TrellisConnectionError saying the daemon is
     * unreachable). A call whose connection drops before the answer rejects
     * with a TrellisConnectionError (the daemon may have carried it out),
     * except a mutating call (one that takes `operationId`): it carries an
     * operation id (the caller's `operationId`, or a new one) and is sent
     * again with the same id once the client is connected again, so that the
     * daemon acts on it once and answers every try with that outcome.
     */
    call(method, ...args) {
        const [params, options] = args;
        return this.#call(method, params ?? {}, options, false);
    }
    /**
     * session returns a handle on the session `sessionId` (no call is made):
     * `session.prompt(text)` runs a turn and gives its events and result.
     */
    session(sessionId) {
        return new Session(this, sessionId, (f) => {
            this.#closeWatchers.add(f);
            return () => {
                this.#closeWatchers.delete(f);
            };
        });
    }
    /** createSession creates a session (session.create) and returns its handle. */
    async createSession(params, options) {
        const { sessionId } = await this.call("session.create", params, options);
        return this.session(sessionId);
    }
    /**
     * steer sends text into the session's running turn (session.steer): the
     * model reads it as a user message at its next call, after the tool calls
     * under way, and the turn's events carry it as turn.steered. With no turn
     * to steer the text starts one (`started` is true). `turnId` names the
     * turn the text went into, or the one it started.
     */
    steer(sessionId, text, options) {
        return this.call("session.steer", { sessionId, text }, options);
    }
    /** queue lists the prompts waiting behind the session's running turn, in the order they run (session.queue.list). */
    async queue(sessionId, options) {
        return (await this.call("session.queue.list", { sessionId }, options)).prompts;
    }
    /**
     * removeQueued removes one queued prompt, named by its turn id
     * (session.queue.remove): its turn ends with turn.dequeued{removed} and
     * turn.done{interrupted}. A prompt no longer queued rejects with not_found.
     */
    async removeQueued(sessionId, turnId, options) {
        await this.call("session.queue.remove", { sessionId, turnId }, options);
    }
    /** clearQueue removes every queued prompt (session.queue.clear) and resolves with how many; the running turn goes on. */
    async clearQueue(sessionId, options) {
        return (await this.call("session.queue.clear", { sessionId }, options)).removed;
    }
    /**
     * onEvent calls handler with each session.event of the session, in seq
     * order with no gap and no duplicate, from now on, across reconnects. The
     * connection receives a session's events once it created, resumed or
     * prompted it. It returns a function that removes the handler.
     */
    onEvent(sessionId, handler) {
        const stream = this.#stream(sessionId);
        stream.listeners.add(handler);
        return () => {
            stream.listeners.delete(handler);
        };
    }
    /**
     * events iterates over the session's events in seq order: from now on, or,
     * with `afterSeq`, the stored ones after it first (session.resume). It goes
     * on across reconnects, ends when the client is closed with `close()`, and
     * fails with a TrellisConnectionError when the client gives up
     * reconnecting. Leaving a `for await` loop early unsubscribes it.
     */
    events(sessionId, options = {}) {
        const stream = this.#stream(sessionId);
        const listener = (ev) => queue.push(ev);
        const detach = () => {
            stream.listeners.delete(listener);
            this.#iterators.delete(queue);
            options.signal?.removeEventListener("abort", onAbort);
            this.#updatePause();
        };
        const queue = new EventQueue(detach, () => this.#updatePause());
        const onAbort = () => {
            detach();
            queue.fail(options.signal?.reason);
        };
        if (this.#state === "closed") {
            queue.end(this.#closeReason?.message.endsWith("closed by the client") === true ? undefined : this.#closeReason);
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
            this.call("session.resume", { sessionId, afterSeq: options.afterSeq }).then((r) => queue.replay(r.events), (err) => {
                detach();
                queue.fail(err);
            });
        }
        return queue;
    }
    onNotification(method, handler) {
        return addListener(this.#notificationListeners, method, handler);
    }
    /**
     * on calls handler when the connection drops (`disconnected`), before each
     * reconnect attempt (`reconnecting`) and once connected again with every
     * watched session resumed (`reconnected`). It returns a function that
     * removes the handler.
     */
    on(event, handler) {
        return addListener(this.#clientListeners, event, handler);
    }
    /**
     * onApprovalRequest sets the handler that answers the daemon's
     * approval.request for the sessions this connection originates (it
     * replaces any earlier one). Without a handler, requests are answered
     * with an error, which the daemon treats as a denial. It returns a
     * function that removes the handler.
     */
    onApprovalRequest(handler) {
        this.#approvalHandler = handler;
        return () => {
            if (this.#approvalHandler === handler)
                this.#approvalHandler = undefined;
        };
    }
    /**
     * onQuestionRequest sets the handler that answers the agent's questions
     * (question.request) for the sessions this connection originates (it
     * replaces any earlier one). Without a handler, questions are declined.
     * It returns a function that removes the handler.
     */
    onQuestionRequest(handler) {
        this.#questionHandler = handler;
        return () => {
            if (this.#questionHandler === handler)
                this.#questionHandler = undefined;
        };
    }
    /**
     * registerTools lends tools of this client to a session (`sessionId`), or
     * to every session this connection originates (tool.register): the model
     * sees them as built-ins, and each call of one runs its `handler`, whose
     * answer (a string, or `{output, isError}`) is what the model reads; a
     * handler that throws fails the call. The tools are registered again
     * after a reconnect (the daemon drops a connection's tools when it
     * closes). It resolves with the names lent.
     */
    async registerTools(tools, options = {}) {
        const defs = tools.map(({ handler: _h, ...def }) => def);
        const res = await this.call("tool.register", options.sessionId === undefined ? { tools: defs } : { sessionId: options.sessionId, tools: defs });
        for (const t of tools) {
            const { handler, ...def } = t;
            this.#lent.set(lentKey(options.sessionId, t.name), { sessionId: options.sessionId, tool: def, handler });
        }
        return res;
    }
    /**
     * unregisterTools takes back tools registerTools lent to the same target
     * (all of them without names) and resolves with the names taken back.
     */
    async unregisterTools(names, options = {}) {
        const params = {};
        if (options.sessionId !== undefined)
            params.sessionId = options.sessionId;
        if (names !== undefined)
            params.names = names;
        const res = await this.call("tool.unregister", params);
        for (const [k, v] of [...this.#lent]) {
            if (v.sessionId === options.sessionId && (names === undefined || names.length === 0 || names.includes(v.tool.name)))
                this.#lent.delete(k);
        }
        return res.removed ?? [];
    }
    // #relend registers the lent tools again on a new connection.
    async #relend() {
        const byTarget = new Map();
        for (const v of this.#lent.values())
            byTarget.set(v.sessionId, [...(byTarget.get(v.sessionId) ?? []), v.tool]);
        for (const [sessionId, tools] of byTarget) {
            try {
                await this.#call("tool.register", sessionId === undefined ? { tools } : { sessionId, tools }, undefined, true);
            }
            catch (err) {
                this.#onError(new Error(`the lent tools ${tools.map((t) => t.name).join(", ")} could not be lent again after the reconnect: ${err instanceof Error ? err.message : String(err)}`));
            }
        }
    }
    /**
     * close closes the connection for good. Calls still waiting reject with a
     * TrellisConnectionError; event iterators end. An answer the handlers are
     * giving (an approval, a question's answer, a lent tool's result) is sent
     * first: close waits for the running handlers, at most a second, so that
     * an approval given just before a program quits still reaches the daemon.
     */
    async close() {
        if (this.#state === "closed")
            return;
        this.#state = "closed";
        this.#wakeSleep?.();
        if (this.#serving.size > 0 && this.#socket !== undefined) {
            let timer;
            await Promise.race([Promise.allSettled([...this.#serving]), new Promise((r) => { timer = setTimeout(r, 1_000); })]);
            clearTimeout(timer);
        }
        const socket = this.#socket;
        if (socket !== undefined) {
            socket.close(1000, "client closed");
            // The close handshake is short; a daemon that does not answer it does
            // not hold close() up for long.
            await Promise.race([this.#socketClosed, new Promise((r) => setTimeout(r, 2_000))]);
        }
        this.#finish(undefined);
    }
    #stream(sessionId) {
        let stream = this.#sessions.get(sessionId);
        if (stream === undefined) {
            const listeners = new Set();
            const orderer = new SeqOrderer((ev) => {
                for (const l of [...listeners])
                    this.#safely(() => l(ev));
            }, () => this.#fillGap(sessionId));
            stream = { orderer, listeners, resuming: false };
            this.#sessions.set(sessionId, stream);
        }
        return stream;
    }
    // open connects one socket to ep and completes system.hello on it.
    async #open(ep) {
        const url = normalizeUrl(ep.url);
        const timeoutMs = this.#options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
        const gen = ++this.#gen;
        let socketClosed;
        this.#socketClosed = new Promise((r) => {
            socketClosed = r;
        });
        let socket;
        try {
            socket = await this.#openSocket(url, timeoutMs, {
                message: (text) => {
                    if (gen === this.#gen)
                        this.#receive(text);
                },
                close: (code, reason, error) => {
                    socketClosed();
                    if (gen === this.#gen)
                        this.#lost(code, reason, error);
                },
            });
        }
        catch (err) {
            socketClosed();
            const message = err instanceof Error ? err.message : String(err);
            const hint = /ECONNREFUSED/.test(message) ? " (is the daemon running? readDaemonInfo() reads its address from daemon.json)" : "";
            throw new TrellisConnectionError(url, `cannot connect to ${url}: ${message}${hint}`, { cause: err });
        }
        if (gen !== this.#gen || this.#state === "closed") {
            socket.close(1000, "client closed");
            throw new TrellisConnectionError(url, `the connection to ${url} was closed by the client`);
        }
        this.#socket = socket;
        this.#paused = false;
        this.#url = url;
        this.#token = ep.token;
        try {
            this.#hello = await this.#call("system.hello", {
                token: ep.token,
                clientVersion: this.#options.clientVersion ?? SDK_VERSION,
                protocolVersion: PROTOCOL_VERSION,
                clientKind: this.#options.clientKind ?? "sdk",
                clientId: this.#clientId,
            }, { timeoutMs }, true);
        }
        catch (err) {
            if (gen === this.#gen) {
                this.#socket = undefined;
                socket.close(1000, "hello failed");
            }
            throw err;
        }
    }
    // lost handles the end of the current socket: calls in flight on it fail,
    // then the client reconnects or closes.
    #lost(code, reason, error) {
        this.#socket = undefined;
        const detail = error !== undefined ? error.message : reason !== "" ? `code ${String(code)}: ${reason}` : `code ${String(code)}`;
        const err = this.#state === "closed"
            ? new TrellisConnectionError(this.#url, `the connection to ${this.#url} was closed by the client`)
            : new TrellisConnectionError(this.#url, `the connection to ${this.#url} closed (${detail})`, { cause: error });
        this.#lastError = err;
        for (const [id, p] of [...this.#pending]) {
            this.#pending.delete(id);
            if (this.#state !== "closed" && this.#reconnect !== undefined && p.retry !== undefined) {
                p.retry();
                continue;
            }
            p.reject(new TrellisConnectionError(this.#url, this.#state === "closed"
                ? `${p.method}: ${err.message}`
                : `${p.method}: the connection to ${this.#url} was lost before the answer (the daemon may have carried the call out): ${detail}`, { cause: err }));
        }
        for (const ac of this.#approvals.values())
            ac.abort(err);
        for (const s of this.#sessions.values())
            s.resuming = false;
        if (this.#state !== "open")
            return; // connecting: connect() fails; reconnecting: the loop goes on; closed: done
        if (this.#reconnect === undefined) {
            this.#finish(err);
            return;
        }
        this.#state = "reconnecting";
        this.#emit("disconnected", { error: err });
        void this.#reconnectLoop(err, this.#reconnect);
    }
    async #reconnectLoop(first, opts) {
        const started = Date.now();
        let delay = opts.initialDelayMs;
        let last = first;
        for (let attempt = 1;; attempt++) {
            if (this.#state === "closed")
                return;
            if (Date.now() - started > opts.giveUpAfterMs) {
                this.#finish(new TrellisConnectionError(this.#url, `the Trellis daemon is unreachable: no connection for ${String(Date.now() - started)} ms (${String(attempt - 1)} attempts; last error: ${last.message})`, { cause: last }));
                return;
            }
            this.#attempts = attempt;
            const wait = Math.round(delay * (0.75 + Math.random() / 2)); // jitter: clients of one daemon do not come back in step
            this.#emit("reconnecting", { attempt, delayMs: wait, error: last });
            await this.#sleep(wait);
            if (this.state === "closed")
                return; // close() ran while we slept
            try {
                await this.#open(await this.#endpoint());
                await this.#resumeAll();
                if (this.#socket === undefined)
                    throw this.#lastError ?? new Error("the connection closed again");
                this.#state = "open";
                this.#attempts = 0;
                this.#emit("reconnected", { attempt, url: this.#url, hello: this.#hello });
                for (const w of [...this.#waiting])
                    w.start();
                if (this.#lent.size > 0)
                    void this.#relend();
                return;
            }
            catch (err) {
                last = err instanceof Error ? err : new Error(String(err));
                this.#lastError = last;
                delay = Math.min(delay * 2, opts.maxDelayMs);
            }
        }
    }
    // resumeAll re-subscribes this connection to every session the client
    // watches, from the last seq it delivered, so that nothing is missed or
    // repeated across the reconnect.
    async #resumeAll() {
        const results = await Promise.allSettled([...this.#sessions.keys()].map((id) => this.#resume(id)));
        for (const r of results) {
            if (r.status === "rejected" && r.reason instanceof TrellisConnectionError)
                throw r.reason;
        }
    }
    // resume asks the daemon for the session's events after the last one
    // delivered (all of them when none was: the replay is then dropped and the
    // stream starts after it, as "from now" means).
    async #resume(sessionId) {
        const stream = this.#stream(sessionId);
        stream.resuming = true;
        const before = stream.orderer.nextSeq;
        try {
            await this.#call("session.resume", { sessionId, afterSeq: Math.max(0, before - 1) }, undefined, true);
        }
        catch (err) {
            if (err instanceof TrellisConnectionError)
                throw err;
            this.#onError(new Error(`could not resume session ${sessionId} after a reconnect: ${err instanceof Error ? err.message : String(err)}`, { cause: err }));
            return;
        }
        finally {
            stream.resuming = false;
        }
        if (stream.orderer.waiting > 0)
            this.#fillGap(sessionId, before);
    }
    // fillGap runs when a session's events wait for a missing one: it asks
    // the daemon for the missing events instead of waiting. A resume that
    // brings nothing new means the daemon has no such event: the gap is then
    // skipped (and reported) rather than waited on forever.
    #fillGap(sessionId, before) {
        const stream = this.#sessions.get(sessionId);
        if (stream === undefined || stream.resuming || this.#socket === undefined || this.#state === "closed" || stream.orderer.waiting === 0)
            return;
        if (before !== undefined && stream.orderer.nextSeq === before) {
            const skipped = stream.orderer.skipGap();
            if (skipped !== undefined) {
                this.#onError(new Error(`session ${sessionId}: the daemon has no events ${String(skipped[0])}..${String(skipped[1])}; delivering from ${String(skipped[1] + 1)} on`));
            }
            return;
        }
        void this.#resume(sessionId).catch(() => { }); // a lost connection resumes everything anyway
    }
    #sleep(ms) {
        return new Promise((resolve) => {
            const timer = setTimeout(done, ms);
            function done() {
                clearTimeout(timer);
                resolve();
            }
            this.#wakeSleep = done;
        });
    }
    // finish closes the client for good.
    #finish(err) {
        if (this.#finished)
            return;
        this.#finished = true;
        this.#state = "closed";
        const reason = err ?? new TrellisConnectionError(this.#url, `the connection to ${this.#url} was closed by the client`);
        this.#closeReason = reason;
        for (const [id, p] of [...this.#pending]) {
            this.#pending.delete(id);
            p.reject(new TrellisConnectionError(this.#url, `${p.method}: ${reason.message}`, { cause: reason }));
        }
        for (const w of [...this.#waiting])
            w.fail(new TrellisConnectionError(this.#url, reason.message, { cause: reason }));
        for (const ac of this.#approvals.values())
            ac.abort(reason);
        for (const q of [...this.#iterators])
            q.end(err);
        this.#iterators.clear();
        for (const f of [...this.#closeWatchers])
            f(reason);
        this.#closeWatchers.clear();
        this.#resolveClosed(err);
    }
    #emit(event, ev) {
        const set = this.#clientListeners.get(event);
        if (set === undefined)
            return;
        for (const h of [...set])
            this.#safely(() => h(ev));
    }
    #call(method, params, options, internal) {
        if (this.#state === "closed") {
            return Promise.reject(new TrellisConnectionError(this.#url, `${method}: ${this.#closeReason?.message ?? `the connection to ${this.#url} is closed`}`, { cause: this.#closeReason }));
        }
        if (options?.signal?.aborted === true)
            return Promise.reject(options.signal.reason);
        // A mutating call gets an operation id (the caller's, or a new one),
        // the same on every try of it.
        const operationId = !internal && MUTATING_METHODS.has(method) ? operationIdOf(params) : undefined;
        return new Promise((resolve, reject) => {
            let timer;
            let offlineTimer;
            let id;
            const waiter = { start: () => send(), fail: (err) => settle(() => reject(err)) };
            const settle = (f) => {
                if (id !== undefined)
                    this.#pending.delete(id);
                this.#waiting.delete(waiter);
                if (timer !== undefined)
                    clearTimeout(timer);
                if (offlineTimer !== undefined)
                    clearTimeout(offlineTimer);
                options?.signal?.removeEventListener("abort", onAbort);
                f();
                this.#updatePause();
            };
            const onAbort = () => settle(() => reject(options?.signal?.reason));
            const send = () => {
                this.#waiting.delete(waiter);
                if (offlineTimer !== undefined)
                    clearTimeout(offlineTimer);
                const socket = this.#socket;
                if (socket === undefined) {
                    wait();
                    return;
                }
                // The id goes out when the daemon keeps receipts (an older one
                // refuses the unknown param) or when the caller chose it.
                const withId = operationId !== undefined &&
                    ((this.#hello?.limits?.operationWindowMs ?? 0) > 0 || (isRecord(params) && params.operationId !== undefined));
                id = this.#nextId++;
                this.#pending.set(id, {
                    method, gen: this.#gen,
                    resolve: (r) => settle(() => resolve(r)),
                    reject: (e) => settle(() => reject(e)),
                    retry: withId ? () => { id = undefined; wait(); } : undefined,
                });
                this.#updatePause(); // a paused socket would hold this call's answer back
                try {
                    socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: withId ? { ...params, operationId } : params }));
                }
                catch (err) {
                    settle(() => reject(new TrellisConnectionError(this.#url, `${method}: could not send to ${this.#url}: ${err.message}`, { cause: err })));
                }
            };
            const wait = () => {
                this.#waiting.add(waiter);
                const ms = this.#options.offlineCallTimeoutMs ?? DEFAULT_OFFLINE_CALL_TIMEOUT_MS;
                offlineTimer = setTimeout(() => settle(() => reject(this.#unreachable(method, ms))), ms);
            };
            if (options?.timeoutMs !== undefined) {
                timer = setTimeout(() => settle(() => reject(new TrellisConnectionError(this.#url, `${method}: no answer from ${this.#url} within ${String(options.timeoutMs)} ms`))), options.timeoutMs);
            }
            options?.signal?.addEventListener("abort", onAbort, { once: true });
            if (internal || this.#state === "open")
                send();
            else
                wait();
        });
    }
    #unreachable(method, waitedMs) {
        const last = this.#lastError !== undefined ? `; last error: ${this.#lastError.message}` : "";
        return new TrellisConnectionError(this.#url, `${method}: the Trellis daemon is unreachable (no connection to ${this.#url} for ${String(waitedMs)} ms, ${String(this.#attempts)} reconnect attempts${last}); the call was not sent`, { cause: this.#lastError });
    }
    // updatePause stops reading the socket while the iterators hold more than
    // maxQueuedEvents and resumes it below half of that. It never pauses while
    // a call waits for its answer (the consumer may be awaiting it).
    #updatePause() {
        const socket = this.#socket;
        if (socket?.pause === undefined || socket.resume === undefined)
            return;
        const max = this.#options.maxQueuedEvents ?? DEFAULT_MAX_QUEUED_EVENTS;
        let queued = 0;
        for (const q of this.#iterators)
            queued += q.size;
        if (!this.#paused && queued > max && this.#pending.size === 0) {
            this.#paused = true;
            socket.pause();
        }
        else if (this.#paused && (queued <= max / 2 || this.#pending.size > 0)) {
            this.#paused = false;
            socket.resume();
        }
    }
    #send(msg) {
        try {
            this.#socket?.send(JSON.stringify(msg));
        }
        catch {
            // The connection closed; the daemon resolves what this answered.
        }
    }
    #receive(text) {
        let msg;
        try {
            msg = JSON.parse(text);
        }
        catch {
            this.#onError(new Error(`received a frame that is not JSON: ${text.slice(0, 200)}`));
            return;
        }
        for (const m of Array.isArray(msg) ? msg : [msg])
            this.#dispatch(m);
    }
    #dispatch(msg) {
        if (!isRecord(msg)) {
            this.#onError(new Error(`received a JSON-RPC message that is not an object: ${JSON.stringify(msg).slice(0, 200)}`));
            return;
        }
        const method = msg["method"];
        const id = msg["id"];
        if (typeof method === "string") {
            if (id === undefined || id === null)
                this.#notification(method, msg["params"]);
            else if (typeof id === "string" || typeof id === "number") {
                // Registered before the handler runs: a handler may call close().
                let served;
                const serving = new Promise((resolve) => { served = resolve; });
                this.#serving.add(serving);
                void this.#serverRequest(id, method, msg["params"]).finally(() => {
                    this.#serving.delete(serving);
                    served();
                });
            }
            return;
        }
        if (typeof id !== "string" && typeof id !== "number") {
            this.#onError(new Error(`received a response without an id: ${JSON.stringify(msg).slice(0, 200)}`));
            return;
        }
        const pending = this.#pending.get(id);
        if (pending === undefined)
            return; // timed out or aborted already
        if (isRecord(msg["error"])) {
            const e = msg["error"];
            const error = {
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
    #observeResult(method, result) {
        if (!isRecord(result) || typeof result["sessionId"] !== "string")
            return;
        const stream = this.#stream(result["sessionId"]);
        if (method === "session.create") {
            stream.orderer.start(1);
        }
        else if (method === "session.resume" && Array.isArray(result["events"])) {
            const events = result["events"].filter(isSessionEvent);
            const last = events.length > 0 ? events[events.length - 1].seq : 0;
            if (!stream.orderer.start(last + 1)) {
                for (const ev of events)
                    stream.orderer.add(ev);
            }
        }
    }
    #notification(method, params) {
        if (method === "session.event") {
            if (isSessionEvent(params)) {
                this.#stream(params.sessionId).orderer.add(params);
            }
            else {
                this.#onError(new Error(`received a session.event without sessionId, seq or kind: ${JSON.stringify(params).slice(0, 200)}`));
            }
        }
        else if (method === "approval.resolved" && isRecord(params) && typeof params["requestId"] === "string") {
            this.#approvals.get(params["requestId"])?.abort(new Error(`approval request ${params["requestId"]} was resolved elsewhere`));
        }
        else if (method === "question.resolved" && isRecord(params) && typeof params["questionId"] === "string") {
            this.#approvals.get(params["questionId"])?.abort(new Error(`question ${params["questionId"]} was resolved elsewhere`));
        }
        const set = this.#notificationListeners.get(method);
        if (set === undefined)
            return;
        for (const h of [...set])
            this.#safely(() => h(params));
    }
    async #serverRequest(id, method, params) {
        let run;
        let key = "";
        let what = "";
        if (method === "approval.request") {
            const handler = this.#approvalHandler;
            what = "approval";
            key = "requestId";
            if (handler !== undefined)
                run = async (signal) => checkApprovalReply(await handler(params, { signal }));
        }
        else if (method === "question.request") {
            const handler = this.#questionHandler;
            what = "question";
            key = "questionId";
            if (handler !== undefined)
                run = async (signal) => checkQuestionReply(await handler(params, { signal }));
        }
        else if (method === "tool.call") {
            const call = params;
            const lent = this.#lent.get(lentKey(call.sessionId, call.name)) ?? this.#lent.get(lentKey(undefined, call.name));
            what = "tool";
            key = "callId";
            if (lent !== undefined)
                run = async (signal) => toolCallReply(await lent.handler(call, { signal }));
        }
        else {
            this.#send({ jsonrpc: "2.0", id, error: { code: -32601, message: `this client does not serve ${method}`, data: { code: "method_not_found" } } });
            return;
        }
        if (run === undefined) {
            const setter = what === "approval" ? "onApprovalRequest" : what === "tool" ? "registerTools" : "onQuestionRequest";
            this.#send({ jsonrpc: "2.0", id, error: { code: -32603, message: `this client has no ${what} handler (TrellisClient.${setter})`, data: { code: "internal" } } });
            return;
        }
        const named = isRecord(params) ? params[key] : undefined;
        const requestId = typeof named === "string" ? named : String(id);
        const ac = new AbortController();
        this.#approvals.set(requestId, ac);
        const gen = this.#gen;
        try {
            const reply = await run(ac.signal);
            if (gen === this.#gen)
                this.#send({ jsonrpc: "2.0", id, result: reply });
        }
        catch (err) {
            const message = err instanceof Error ? err.message : String(err);
            if (gen === this.#gen)
                this.#send({ jsonrpc: "2.0", id, error: { code: -32603, message: `the ${what} handler failed: ${message}`, data: { code: "internal" } } });
        }
        finally {
            this.#approvals.delete(requestId);
        }
    }
    #safely(f) {
        try {
            f();
        }
        catch (err) {
            this.#onError(err);
        }
    }
}
/** lentKey keys a lent tool by its target session ("" for every session) and name. */
function lentKey(sessionId, name) {
    return `${sessionId ?? ""}\u0000${name}`;
}
/** toolCallReply turns a tool handler's answer into tool.call's result. */
function toolCallReply(r) {
    if (typeof r === "string")
        return { output: r };
    if (!isRecord(r))
        throw new Error(`a tool handler must return a string or {output, isError}, got ${JSON.stringify(r)}`);
    return r;
}
function addListener(map, key, handler) {
    let set = map.get(key);
    if (set === undefined) {
        set = new Set();
        map.set(key, set);
    }
    const s = set;
    s.add(handler);
    return () => {
        s.delete(handler);
    };
}
function randomClientId() {
    return "sdk-" + randomHex(8);
}
function randomHex(n) {
    const bytes = new Uint8Array(n);
    globalThis.crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
// operationIdOf is the operation id of a mutating call's params: the
// caller's operationId, or a new one.
function operationIdOf(params) {
    if (isRecord(params) && typeof params.operationId === "string")
        return params.operationId;
    return "sdk-" + randomHex(16);
}
function normalizeUrl(raw) {
    let u;
    try {
        u = new URL(raw);
    }
    catch {
        throw new TypeError(`connect: url ${JSON.stringify(raw)} is not a URL; expected ws://127.0.0.1:PORT/ws (readDaemonInfo() returns it)`);
    }
    if (u.protocol === "http:")
        u.protocol = "ws:";
    else if (u.protocol === "https:")
        u.protocol = "wss:";
    if (u.protocol !== "ws:" && u.protocol !== "wss:") {
        throw new TypeError(`connect: url ${JSON.stringify(raw)} must be ws:// or wss://`);
    }
    if (u.pathname === "" || u.pathname === "/")
        u.pathname = "/ws";
    return u.toString();
}
function isSessionEvent(v) {
    return isRecord(v) && typeof v["sessionId"] === "string" && typeof v["kind"] === "string" &&
        typeof v["seq"] === "number" && Number.isInteger(v["seq"]) && v["seq"] >= 1;
}
const DECISIONS = new Set(["allow", "deny"]);
const SCOPES = new Set(["once", "session", "project", "always"]);
// checkApprovalReply keeps the fields of a reply the daemon accepts and
// rejects one it would refuse, with a message that names the field.
function checkApprovalReply(reply) {
    if (!isRecord(reply))
        throw new Error(`the handler returned ${JSON.stringify(reply)}, not {decision: "allow" | "deny", scope?, reason?}`);
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
    const out = { decision: decision };
    if (scope !== undefined)
        out.scope = scope;
    if (reason !== undefined)
        out.reason = reason;
    return out;
}
// checkQuestionReply keeps the fields of an answer to question.request the
// daemon accepts and rejects one it would refuse, naming the field.
function checkQuestionReply(reply) {
    if (!isRecord(reply))
        throw new Error(`the handler returned ${JSON.stringify(reply)}, not {answers: [{values}]} or {declined: true}`);
    const { answers, declined, reason } = reply;
    if (reason !== undefined && typeof reason !== "string") {
        throw new Error(`the handler returned reason ${JSON.stringify(reason)}; want a string`);
    }
    if (declined === true) {
        return reason === undefined ? { answers: [], declined: true } : { answers: [], declined: true, reason };
    }
    if (!Array.isArray(answers) || !answers.every((a) => isRecord(a) && Array.isArray(a["values"]) && a["values"].every((v) => typeof v === "string"))) {
        throw new Error(`the handler returned answers ${JSON.stringify(answers)}; want one {values: string[]} per question`);
    }
    const out = { answers: answers.map((a) => ({ values: [...a.values] })) };
    if (reason !== undefined)
        out.reason = reason;
    return out;
}
