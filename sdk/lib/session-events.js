// Putting one session's events back in seq order (PROTOCOL.md §7: seq starts
// at 1 and rises by exactly 1). The daemon sends a session's events in order
// on a connection, but the SDK does not rely on it: events ahead of a missing
// one wait until it arrives, and duplicates are dropped.
/**
 * SeqOrderer delivers the events of one session in seq order, without gaps
 * or duplicates, from a starting seq on. The start is set by `start` (after
 * session.create: 1; after session.resume: the seq after the replayed
 * events); if an event arrives first, the start is that event's seq (the
 * daemon's first live event when it subscribed the connection "from now").
 */
export class SeqOrderer {
    #next = 0; // the seq delivered next; 0 = not known yet
    #early = new Map();
    #deliver;
    #onGap;
    /**
     * deliver receives the events in order; onGap is called when events wait
     * for a missing one (the client then asks the daemon for it rather than
     * waiting: the daemon sends a connection's events in order, so a gap
     * means one was lost).
     */
    constructor(deliver, onGap = () => { }) {
        this.#deliver = deliver;
        this.#onGap = onGap;
    }
    /** The seq that will be delivered next, 0 while no start is known. */
    get nextSeq() {
        return this.#next;
    }
    /** How many events wait for a missing one. */
    get waiting() {
        return this.#early.size;
    }
    /**
     * start sets the first seq to deliver if none is known yet; events before
     * it are dropped. It returns whether the start was taken.
     */
    start(next) {
        if (this.#next !== 0)
            return false;
        this.#next = Math.max(1, next);
        for (const seq of this.#early.keys()) {
            if (seq < this.#next)
                this.#early.delete(seq);
        }
        this.#flush();
        return true;
    }
    /**
     * add takes one event, in any order. A lease_lost notice (`retracted`:
     * error{lease_lost}, then turn.done{error}, never stored) is delivered
     * at once and moves the order back to its seq: what was received
     * `unstored` from there on is void, and the log's events under those
     * seqs (the session's new owner's) are delivered next.
     */
    add(ev) {
        if (ev.retracted === true) {
            if (this.#next === 0)
                return;
            for (const seq of this.#early.keys()) {
                if (seq >= ev.seq)
                    this.#early.delete(seq);
            }
            this.#next = Math.min(this.#next, ev.seq);
            this.#deliver(ev);
            return;
        }
        if (this.#next === 0)
            this.#next = ev.seq;
        if (ev.seq < this.#next || this.#early.has(ev.seq))
            return;
        this.#early.set(ev.seq, ev);
        this.#flush();
        if (this.#early.size > 0)
            this.#onGap();
    }
    /**
     * skipGap gives up on the missing events before the earliest waiting one
     * (the daemon does not have them either) and delivers from there on. It
     * returns the seqs skipped as [first, last], or undefined with no gap.
     */
    skipGap() {
        if (this.#early.size === 0)
            return undefined;
        const first = Math.min(...this.#early.keys());
        const skipped = [this.#next, first - 1];
        this.#next = first;
        this.#flush();
        return skipped;
    }
    #flush() {
        for (;;) {
            const ev = this.#early.get(this.#next);
            if (ev === undefined)
                return;
            this.#early.delete(this.#next);
            this.#next++;
            this.#deliver(ev);
        }
    }
}
/**
 * EventQueue is the async iterator behind `TrellisClient.events`: it buffers
 * what it is given until the consumer takes it, and ends (or fails) when
 * told. It is registered as soon as it is created, so nothing sent between
 * its creation and the first `next()` is lost. While held (a replay is on its
 * way), live events are kept back so that the replayed ones come first.
 */
export class EventQueue {
    #items = [];
    #waiter;
    #held = false;
    #ended = false;
    #left = false; // the consumer left (return): a later loop over it fails
    #error = undefined;
    #minSeq = 0; // events with seq <= minSeq were replayed already
    #onReturn;
    #onChange;
    /**
     * onReturn runs when the consumer leaves early; onChange after the queue
     * grew or shrank (the client pauses and resumes the socket on it).
     */
    constructor(onReturn, onChange = () => { }) {
        this.#onReturn = onReturn;
        this.#onChange = onChange;
    }
    /** How many events wait for the consumer. */
    get size() {
        return this.#items.length;
    }
    /** hold keeps live events back until `replay` (or `fail`). */
    hold() {
        this.#held = true;
    }
    /** push hands a live event to the consumer. */
    push(ev) {
        if (this.#ended || ev.seq <= this.#minSeq)
            return;
        this.#items.push(ev);
        this.#wake();
        this.#onChange();
    }
    /**
     * replay puts events (in seq order) before the live ones queued so far,
     * drops the live ones they cover, and releases the hold.
     */
    replay(events) {
        this.#held = false;
        if (this.#ended)
            return;
        if (events.length > 0) {
            const last = events[events.length - 1].seq;
            const live = this.#items.filter((ev) => ev.seq > last);
            this.#items.length = 0;
            this.#items.push(...events, ...live);
            this.#minSeq = Math.max(this.#minSeq, last);
        }
        this.#wake();
    }
    /** end finishes the iterator once the queued events are taken; with err, fails it then. */
    end(err) {
        if (this.#ended)
            return;
        this.#ended = true;
        this.#held = false;
        this.#error = err;
        this.#wake();
    }
    /** fail drops what is queued and fails the iterator with err at once. */
    fail(err) {
        this.#items.length = 0;
        this.end(err);
    }
    next() {
        if (this.#left) {
            return Promise.reject(new Error("events(): this iterator was closed when an earlier loop over it ended (break or return unsubscribes it); " +
                "call events() again for a new one, or iterate session.prompt(text) for one turn's events"));
        }
        if (this.#waiter !== undefined) {
            return Promise.reject(new Error("events(): next() called again before the previous call settled"));
        }
        return new Promise((resolve, reject) => {
            this.#waiter = { resolve, reject };
            this.#wake();
        });
    }
    return() {
        this.#left = true;
        this.#items.length = 0;
        this.end();
        this.#onReturn();
        return Promise.resolve({ value: undefined, done: true });
    }
    [Symbol.asyncIterator]() {
        return this;
    }
    // wake settles a pending next() if it can be settled now.
    #wake() {
        const w = this.#waiter;
        if (w === undefined || this.#held)
            return;
        const ev = this.#items.shift();
        if (ev !== undefined) {
            this.#waiter = undefined;
            w.resolve({ value: ev, done: false });
            this.#onChange();
            return;
        }
        if (!this.#ended)
            return;
        this.#waiter = undefined;
        if (this.#error !== undefined) {
            const err = this.#error;
            this.#error = undefined; // fail once, then report done
            w.reject(err);
        }
        else {
            w.resolve({ value: undefined, done: true });
        }
    }
}
