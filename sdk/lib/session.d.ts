import { TrellisConnectionError } from "./errors.js";
import type { EventsOptions } from "./client.js";
import type { ErrorEvent, MethodParams, MethodResult, SessionEvent, TurnDoneEvent } from "./protocol.js";
/** What a Session needs of its client (a TrellisClient). */
export interface SessionClient {
    readonly url: string;
    call(method: "session.prompt", params: MethodParams<"session.prompt">, options?: CallOptionsLike): Promise<{
        turnId: string;
    }>;
    call(method: "session.steer", params: MethodParams<"session.steer">, options?: CallOptionsLike): Promise<{
        turnId: string;
        started: boolean;
    }>;
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
    usage: {
        inputTokens: number;
        outputTokens: number;
    };
    /** The turn's error events, in order. */
    errors: ErrorEvent[];
}
/**
 * Session is one session of a client: `client.session(id)`, or
 * `client.createSession(params)`.
 */
export declare class Session {
    #private;
    /** The session's id. */
    readonly id: string;
    /**
     * Made by TrellisClient (`client.session`, `client.createSession`);
     * onClose registers a function called when the client closes for good.
     */
    constructor(client: SessionClient, id: string, onClose: (f: (err: TrellisConnectionError) => void) => () => void);
    /**
     * prompt sends text (session.prompt) and returns its turn: iterate it for
     * the turn's events (from turn.queued or turn.started to turn.done), await
     * it (or its `result`) for what the turn came to. With `whenBusy: "steer"`
     * the text joins the running turn and the Turn is that turn, from now on.
     */
    prompt(text: string, options?: PromptOptions): Turn;
    /**
     * setBudget sets the session's own budget (session.setBudget): the most
     * its model calls may cost, in millionths of a US dollar, and/or their
     * input + output tokens; neither clears it. A turn that reached the old
     * budget and fits the new one resumes (turn.resumed). Resolves to the
     * budget in force, what the session spent and whether its turn is still
     * paused.
     */
    setBudget(budget: {
        maxCostMicroUsd?: number;
        maxTokens?: number;
    }, options?: CallOptionsLike): Promise<MethodResult<"session.setBudget">>;
    /** events iterates over all the session's events, turn after turn: `client.events(id, options)`. */
    events(options?: EventsOptions): AsyncIterableIterator<SessionEvent>;
    /**
     * steer sends text into the running turn (session.steer) and returns that
     * turn, from now on; with no turn to steer, the text starts one and the
     * Turn is the new turn.
     */
    steer(text: string, options?: CallOptionsLike): Turn;
}
/**
 * Turn is one turn of a session: an async iterable of its events (once),
 * and, awaited, its TurnResult. The events are kept from the moment the
 * Turn is made until they are taken, so iterating it later misses none;
 * leaving the loop early stops keeping them, and the result still comes.
 */
export declare class Turn implements AsyncIterable<SessionEvent>, PromiseLike<TurnResult> {
    #private;
    /** The session's id. */
    readonly sessionId: string;
    /** The turn's id, once the daemon accepted the prompt; rejects as the call does. */
    readonly turnId: Promise<string>;
    /** What the turn came to, at its turn.done; rejects when the call fails or the client closes first. */
    readonly result: Promise<TurnResult>;
    /** Made by Session.prompt and Session.steer; start makes the call. */
    constructor(client: SessionClient, sessionId: string, onClose: (f: (err: TrellisConnectionError) => void) => () => void, start: () => Promise<{
        turnId: string;
        joined: boolean;
    }>);
    /** Awaiting a Turn awaits its result. */
    then<A = TurnResult, B = never>(onFulfilled?: ((r: TurnResult) => A | PromiseLike<A>) | null, onRejected?: ((e: unknown) => B | PromiseLike<B>) | null): Promise<A | B>;
    /** The turn's events, in seq order, ending after its turn.done. A Turn is iterated once. */
    [Symbol.asyncIterator](): AsyncIterator<SessionEvent>;
}
