import type { SessionEvent } from "./protocol.js";
/**
 * SeqOrderer delivers the events of one session in seq order, without gaps
 * or duplicates, from a starting seq on. The start is set by `start` (after
 * session.create: 1; after session.resume: the seq after the replayed
 * events); if an event arrives first, the start is that event's seq (the
 * daemon's first live event when it subscribed the connection "from now").
 */
export declare class SeqOrderer {
    #private;
    /**
     * deliver receives the events in order; onGap is called when events wait
     * for a missing one (the client then asks the daemon for it rather than
     * waiting: the daemon sends a connection's events in order, so a gap
     * means one was lost).
     */
    constructor(deliver: (ev: SessionEvent) => void, onGap?: () => void);
    /** The seq that will be delivered next, 0 while no start is known. */
    get nextSeq(): number;
    /** How many events wait for a missing one. */
    get waiting(): number;
    /**
     * start sets the first seq to deliver if none is known yet; events before
     * it are dropped. It returns whether the start was taken.
     */
    start(next: number): boolean;
    /**
     * add takes one event, in any order. A lease_lost notice (`retracted`:
     * error{lease_lost}, then turn.done{error}, never stored) is delivered
     * at once and moves the order back to its seq: what was received
     * `unstored` from there on is void, and the log's events under those
     * seqs (the session's new owner's) are delivered next.
     */
    add(ev: SessionEvent): void;
    /**
     * skipGap gives up on the missing events before the earliest waiting one
     * (the daemon does not have them either) and delivers from there on. It
     * returns the seqs skipped as [first, last], or undefined with no gap.
     */
    skipGap(): [number, number] | undefined;
}
/**
 * EventQueue is the async iterator behind `TrellisClient.events`: it buffers
 * what it is given until the consumer takes it, and ends (or fails) when
 * told. It is registered as soon as it is created, so nothing sent between
 * its creation and the first `next()` is lost. While held (a replay is on its
 * way), live events are kept back so that the replayed ones come first.
 */
export declare class EventQueue implements AsyncIterableIterator<SessionEvent> {
    #private;
    /**
     * onReturn runs when the consumer leaves early; onChange after the queue
     * grew or shrank (the client pauses and resumes the socket on it).
     */
    constructor(onReturn: () => void, onChange?: () => void);
    /** How many events wait for the consumer. */
    get size(): number;
    /** hold keeps live events back until `replay` (or `fail`). */
    hold(): void;
    /** push hands a live event to the consumer. */
    push(ev: SessionEvent): void;
    /**
     * replay puts events (in seq order) before the live ones queued so far,
     * drops the live ones they cover, and releases the hold.
     */
    replay(events: readonly SessionEvent[]): void;
    /** end finishes the iterator once the queued events are taken; with err, fails it then. */
    end(err?: unknown): void;
    /** fail drops what is queued and fails the iterator with err at once. */
    fail(err: unknown): void;
    next(): Promise<IteratorResult<SessionEvent>>;
    return(): Promise<IteratorResult<SessionEvent>>;
    [Symbol.asyncIterator](): this;
}
