import { TrellisConnectionError } from "./errors.js";
import { type ApprovalReply, type ApprovalRequest, type HelloResponse, type QuestionReply, type QuestionRequest, type LentTool, type RegisterToolsResponse, type ToolCallReply, type ToolCallRequest, type MethodName, type MethodParams, type MethodResult, type NotificationName, type Notifications, type QueuedPrompt, type SessionEvent, type SteerResponse } from "./protocol.js";
import { Session } from "./session.js";
import { type SocketOpener } from "./socket.js";
/** The SDK's own version, sent as `clientVersion` unless the caller sets one. */
export declare const SDK_VERSION = "0.2.0";
/** Where a daemon answers and the token it wants. */
export interface Endpoint {
    /** The WebSocket URL, e.g. `ws://127.0.0.1:PORT/ws`. */
    url: string;
    /** The daemon's auth token. */
    token: string;
}
/** How the client reconnects after the connection drops. */
export interface ReconnectOptions {
    /** The first wait before reconnecting; default 100 ms. It doubles per failed attempt. */
    initialDelayMs?: number;
    /** The longest wait between attempts; default 5 000 ms. */
    maxDelayMs?: number;
    /**
     * Stop trying after this long without a connection: the client then
     * closes and `closed` resolves with the error; default: never (until
     * `close()`).
     */
    giveUpAfterMs?: number;
}
/** Options of `connect`. */
export interface ConnectOptions {
    /**
     * The daemon's WebSocket URL, e.g. `ws://127.0.0.1:PORT/ws` (as returned by
     * `readDaemonInfo`). A URL without a path gets `/ws`.
     */
    url: string;
    /** The daemon's auth token (daemon.json's `token`). */
    token: string;
    /**
     * Called before each reconnect for the daemon's address and token, which a
     * restarted daemon may have changed (the Node entry re-reads daemon.json
     * when `home` is given). Default: the same url and token.
     */
    endpoint?: () => Endpoint | Promise<Endpoint>;
    /** Reconnect after the connection drops (default true); `false` makes a drop final. */
    reconnect?: boolean | ReconnectOptions;
    /**
     * How long a call made while disconnected waits for the reconnect before
     * it fails with a TrellisConnectionError saying the daemon is unreachable;
     * default 30 000 ms.
     */
    offlineCallTimeoutMs?: number;
    /**
     * When more events than this wait in `events()` iterators, the client
     * stops reading the socket (where the runtime can: Node) until they drop
     * to half, so the daemon holds back this connection's stream instead of
     * the client buffering without bound; default 10 000.
     */
    maxQueuedEvents?: number;
    /**
     * Stable across reconnects: the sessions this client originated are
     * re-bound to the new connection (so approvals reach it). Default: a
     * random id per client.
     */
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
    /** Answers question.request from the first moment. Same as calling `onQuestionRequest`. */
    onQuestionRequest?: QuestionHandler;
    /**
     * Receives the errors that have no caller to go to: a listener or handler
     * that threw, a frame that is not valid JSON-RPC. Default: console.error.
     */
    onError?: (err: unknown) => void;
    /** Opens the WebSocket; the entries set it (Node: `ws`; browsers: the global WebSocket). */
    socket?: SocketOpener;
}
/** Per-call options. */
export interface CallOptions {
    /** Rejects the call when aborted (the daemon may still carry it out). */
    signal?: AbortSignal;
    /** Rejects the call with a TrellisConnectionError after this long; default: no limit. */
    timeoutMs?: number;
}
/** The params of a call: optional when every field of the method's params is. */
export type CallArgs<M extends MethodName> = {} extends MethodParams<M> ? [params?: MethodParams<M>, options?: CallOptions] : [params: MethodParams<M>, options?: CallOptions];
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
/**
 * QuestionHandler answers one question.request: the agent's questions
 * (its ask_user tool). Returning `{answers}` (one `{values}` per question,
 * in order) answers them, `{declined: true, reason?}` declines; throwing
 * answers with a JSON-RPC error, which the daemon treats as declined. The
 * context's signal aborts when the question is resolved elsewhere.
 */
/**
 * ToolCallHandler runs one call of a lent tool (tool.call): its answer is a
 * string (the output) or `{output, isError}`; throwing fails the call. The
 * signal aborts when the connection drops.
 */
export type ToolCallHandler = (call: ToolCallRequest, ctx: ApprovalContext) => string | ToolCallReply | Promise<string | ToolCallReply>;
/** LendTool is a tool to lend (LentTool) with the handler that runs its calls. */
export interface LendTool extends LentTool {
    handler: ToolCallHandler;
}
export type QuestionHandler = (request: QuestionRequest, ctx: ApprovalContext) => QuestionReply | Promise<QuestionReply>;
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
/** The connection's life, as `on` reports it. */
export interface ClientEvents {
    /** The connection dropped; the client reconnects (unless `reconnect: false`). */
    disconnected: {
        error: TrellisConnectionError;
    };
    /** An attempt to reconnect starts after delayMs; error is why the last one failed. */
    reconnecting: {
        attempt: number;
        delayMs: number;
        error: Error;
    };
    /** Connected again (url may be new) and every watched session resumed. */
    reconnected: {
        attempt: number;
        url: string;
        hello: HelloResponse;
    };
}
/** Where the client is: connected, reconnecting, or closed for good. */
export type ClientState = "connecting" | "open" | "reconnecting" | "closed";
/**
 * TrellisClient is a connection to a daemon that reconnects by itself.
 * Create it with `connect`; end it with `close`.
 */
export declare class TrellisClient {
    #private;
    /** Resolves when the client has closed for good, with the reason (undefined after `close()`). */
    readonly closed: Promise<TrellisConnectionError | undefined>;
    /** Same as the function `connect` (with the global WebSocket unless `socket` is set). */
    static connect(options: ConnectOptions): Promise<TrellisClient>;
    private constructor();
    /** The WebSocket URL this client is (or was last) connected to. */
    get url(): string;
    /** connecting, open, reconnecting or closed. */
    get state(): ClientState;
    /** The daemon's answer to the latest system.hello (protocol version, capabilities, limits, connectionId). */
    get hello(): HelloResponse;
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
    call<M extends MethodName>(method: M, ...args: CallArgs<M>): Promise<MethodResult<M>>;
    /**
     * session returns a handle on the session `sessionId` (no call is made):
     * `session.prompt(text)` runs a turn and gives its events and result.
     */
    session(sessionId: string): Session;
    /** createSession creates a session (session.create) and returns its handle. */
    createSession(params: MethodParams<"session.create">, options?: CallOptions): Promise<Session>;
    /**
     * steer sends text into the session's running turn (session.steer): the
     * model reads it as a user message at its next call, after the tool calls
     * under way, and the turn's events carry it as turn.steered. With no turn
     * to steer the text starts one (`started` is true). `turnId` names the
     * turn the text went into, or the one it started.
     */
    steer(sessionId: string, text: string, options?: CallOptions): Promise<SteerResponse>;
    /** queue lists the prompts waiting behind the session's running turn, in the order they run (session.queue.list). */
    queue(sessionId: string, options?: CallOptions): Promise<QueuedPrompt[]>;
    /**
     * removeQueued removes one queued prompt, named by its turn id
     * (session.queue.remove): its turn ends with turn.dequeued{removed} and
     * turn.done{interrupted}. A prompt no longer queued rejects with not_found.
     */
    removeQueued(sessionId: string, turnId: string, options?: CallOptions): Promise<void>;
    /** clearQueue removes every queued prompt (session.queue.clear) and resolves with how many; the running turn goes on. */
    clearQueue(sessionId: string, options?: CallOptions): Promise<number>;
    /**
     * onEvent calls handler with each session.event of the session, in seq
     * order with no gap and no duplicate, from now on, across reconnects. The
     * connection receives a session's events once it created, resumed or
     * prompted it. It returns a function that removes the handler.
     */
    onEvent(sessionId: string, handler: (event: SessionEvent) => void): () => void;
    /**
     * events iterates over the session's events in seq order: from now on, or,
     * with `afterSeq`, the stored ones after it first (session.resume). It goes
     * on across reconnects, ends when the client is closed with `close()`, and
     * fails with a TrellisConnectionError when the client gives up
     * reconnecting. Leaving a `for await` loop early unsubscribes it.
     */
    events(sessionId: string, options?: EventsOptions): AsyncIterableIterator<SessionEvent>;
    /**
     * onNotification calls handler with the params of each notification
     * `method` (approval.pending, approval.resolved, job.event, gateway.event,
     * commands.changed, session.event — the latter as received; use onEvent or
     * events for seq order). It returns a function that removes the handler.
     */
    onNotification<N extends NotificationName>(method: N, handler: (params: Notifications[N]) => void): () => void;
    onNotification(method: string, handler: (params: unknown) => void): () => void;
    /**
     * on calls handler when the connection drops (`disconnected`), before each
     * reconnect attempt (`reconnecting`) and once connected again with every
     * watched session resumed (`reconnected`). It returns a function that
     * removes the handler.
     */
    on<E extends keyof ClientEvents>(event: E, handler: (ev: ClientEvents[E]) => void): () => void;
    /**
     * onApprovalRequest sets the handler that answers the daemon's
     * approval.request for the sessions this connection originates (it
     * replaces any earlier one). Without a handler, requests are answered
     * with an error, which the daemon treats as a denial. It returns a
     * function that removes the handler.
     */
    onApprovalRequest(handler: ApprovalHandler): () => void;
    /**
     * onQuestionRequest sets the handler that answers the agent's questions
     * (question.request) for the sessions this connection originates (it
     * replaces any earlier one). Without a handler, questions are declined.
     * It returns a function that removes the handler.
     */
    onQuestionRequest(handler: QuestionHandler): () => void;
    /**
     * registerTools lends tools of this client to a session (`sessionId`), or
     * to every session this connection originates (tool.register): the model
     * sees them as built-ins, and each call of one runs its `handler`, whose
     * answer (a string, or `{output, isError}`) is what the model reads; a
     * handler that throws fails the call. The tools are registered again
     * after a reconnect (the daemon drops a connection's tools when it
     * closes). It resolves with the names lent.
     */
    registerTools(tools: LendTool[], options?: {
        sessionId?: string;
    }): Promise<RegisterToolsResponse>;
    /**
     * unregisterTools takes back tools registerTools lent to the same target
     * (all of them without names) and resolves with the names taken back.
     */
    unregisterTools(names?: string[], options?: {
        sessionId?: string;
    }): Promise<string[]>;
    /**
     * close closes the connection for good. Calls still waiting reject with a
     * TrellisConnectionError; event iterators end. An answer the handlers are
     * giving (an approval, a question's answer, a lent tool's result) is sent
     * first: close waits for the running handlers, at most a second, so that
     * an approval given just before a program quits still reaches the daemon.
     */
    close(): Promise<void>;
}
