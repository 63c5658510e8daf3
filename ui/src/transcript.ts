// The live session's transcript: session events folded into turns of
// blocks (text, reasoning, tool calls with progress and results, diffs,
// errors). Events arrive once each, in seq order (the SDK guarantees it
// across reconnects), so folding is a plain left fold — but for a lease_lost
// notice (events marked `retracted`, sent by a daemon that lost the
// session): the events it received `unstored` (from memory, while the store
// could not take them) from the notice's seq on are void, and the log's
// events under those seqs follow. So the fold keeps the state from before
// the first unstored event, and folds again from there without the void ones.

import type { CheckpointEvent, CheckpointSkip, ContextEvent, SessionEvent } from "@trellis/sdk";

export type Block =
  | { type: "text"; text: string }
  | { type: "reasoning"; text: string }
  | { type: "tool"; callId: string; name: string; args: Record<string, unknown> | undefined; progress: string; truncated: boolean;
      result: { ok: boolean; output: string; error: string | null } | undefined;
      /** When the call started and ended (ms since the epoch, from the events' ts). */
      startedAt: number | undefined; endedAt: number | undefined;
      /**
       * The checkpoint recorded right before the tool ran (reason tool): the
       * log has it after the tool.call and before the tool's output, which
       * is where the tool's block shows it.
       */
      checkpoint: CheckpointBlock | undefined }
  | { type: "diff"; path: string; patch: string }
  | CheckpointBlock
  | { type: "rewound"; toSeq: number; fromSeq: number; checkpointId: string | null }
  | { type: "error"; code: string; message: string }
  | { type: "note"; text: string };

/**
 * CheckpointBlock is a checkpoint event on the timeline: what the checkpoint
 * recorded and skipped, and the checkpoint before it in the session (the
 * one its diff starts from), undefined for the first.
 */
export interface CheckpointBlock {
  type: "checkpoint";
  seq: number;
  checkpointId: string;
  reason: CheckpointEvent["reason"];
  tool: string | null;
  files: number;
  bytes: number;
  skipped: CheckpointSkip[];
  restoredFrom: string | null;
  previous: string | undefined;
}

export interface Turn {
  turnId: string;
  prompt: string;
  user: string | undefined;
  /** The name of the principal who sent the prompt; undefined when none did (a job's). */
  by: string | undefined;
  blocks: Block[];
  inputTokens: number;
  outputTokens: number;
  /** Of outputTokens, those the model spent reasoning. */
  reasoningTokens: number;
  /** The provider calls (usage events) of the turn. */
  calls: number;
  /** The cost of the priced model calls in US dollars (their costMicroUsd added up); undefined when no call was priced. */
  cost: number | undefined;
  /** When the turn started and ended (ms since the epoch, from turn.started's and turn.done's ts). */
  startedAt: number | undefined;
  endedAt: number | undefined;
  done: { reason: string; synthetic: boolean } | undefined;
  /** The seq of the turn's turn.started and turn.done events (undefined until it ended). */
  startSeq: number;
  doneSeq: number | undefined;
  /** A later session.rewound went back to before this turn: the model no longer reads it. */
  rewound: boolean;
}

/** Transcript is the folded state of one session's events. */
export class Transcript {
  readonly turns: Turn[] = [];
  /** Blocks of events before the first turn (a checkpoint restored or forked before any prompt). */
  readonly before: Block[] = [];
  /** Queued prompts by turnId, with their position. */
  readonly queue = new Map<string, number>();
  mode: string | undefined;
  context: ContextEvent | undefined;
  lastSeq = 0;
  /** The latest checkpoint's id: the next one's diff starts from it. */
  #lastCheckpoint: string | undefined;
  readonly #turns = new Map<string, Turn>();
  readonly #tools = new Map<string, Extract<Block, { type: "tool" }>>();
  /** Checkpoints deleted (checkpoint.delete leaves their events in the log): their rows are not shown. */
  readonly #forgotten = new Set<string>();
  /** What checkpoint.list answered: the ids it held and the newest one's seq. */
  #listed: { kept: Set<string>; newest: number } | undefined;
  /** The state before the first of the unstored events since the last stored one. */
  #beforeUnstored: Snapshot | undefined;
  /** The unstored events since the last stored one: void if a notice retracts them. */
  #unstored: SessionEvent[] = [];

  /** running says whether the latest turn is still open. */
  get running(): boolean {
    const t = this.turns.at(-1);
    return t !== undefined && t.done === undefined;
  }

  apply(ev: SessionEvent): void {
    if (ev.retracted === true) {
      this.#retract(ev.seq);
      this.#fold(ev);
      this.lastSeq = ev.seq - 1; // the notice is out of the numbering
      return;
    }
    if (ev.unstored === true) {
      this.#beforeUnstored ??= this.#snapshot();
      this.#unstored.push(ev);
    } else {
      // Stored in order: whatever came unstored before it was stored too.
      this.#beforeUnstored = undefined;
      this.#unstored = [];
    }
    this.#fold(ev);
  }

  /**
   * forget takes the row of a deleted checkpoint off the timeline: its event
   * stays in the log, the checkpoint is gone. The next checkpoint's diff
   * then starts from the one before it.
   */
  forget(checkpointId: string): void {
    this.#forgotten.add(checkpointId);
    this.#drop(checkpointId);
  }

  /**
   * forgetMissing forgets the checkpoints at a seq below newest that kept
   * (the ids checkpoint.list answered) does not hold, folded already or
   * still to come: they were deleted.
   */
  forgetMissing(kept: Set<string>, newest: number): void {
    this.#listed = { kept, newest };
    const gone: string[] = [];
    for (const blocks of [this.before, ...this.turns.map((t) => t.blocks)]) {
      for (const b of blocks) {
        const c = b.type === "checkpoint" ? b : b.type === "tool" ? b.checkpoint : undefined;
        if (c !== undefined && this.#deleted(c.checkpointId, c.seq)) gone.push(c.checkpointId);
      }
    }
    for (const id of gone) this.forget(id);
  }

  /** deleted says whether the checkpoint of id, announced at seq, was deleted (as far as this view knows). */
  #deleted(id: string, seq: number): boolean {
    if (this.#forgotten.has(id)) return true;
    return this.#listed !== undefined && seq < this.#listed.newest && !this.#listed.kept.has(id);
  }

  /** drop takes a checkpoint's row off the timeline and links the next one's diff past it. */
  #drop(checkpointId: string): void {
    const lists = [this.before, ...this.turns.map((t) => t.blocks)];
    let previous: string | undefined;
    let found = false;
    for (const blocks of lists) {
      for (let i = 0; i < blocks.length; i++) {
        const b = blocks[i]!;
        if (b.type === "checkpoint" && b.checkpointId === checkpointId) {
          previous = b.previous;
          found = true;
          blocks.splice(i, 1);
          break;
        }
        if (b.type === "tool" && b.checkpoint?.checkpointId === checkpointId) {
          previous = b.checkpoint.previous;
          found = true;
          b.checkpoint = undefined;
          break;
        }
      }
    }
    if (!found) return;
    for (const blocks of lists) {
      for (const b of blocks) {
        const c = b.type === "checkpoint" ? b : b.type === "tool" ? b.checkpoint : undefined;
        if (c !== undefined && c.previous === checkpointId) c.previous = previous;
      }
    }
    if (this.#lastCheckpoint === checkpointId) this.#lastCheckpoint = previous;
  }

  /** retract drops the unstored events from seq on: the state is folded again without them. */
  #retract(seq: number): void {
    const snap = this.#beforeUnstored;
    const kept = this.#unstored.filter((ev) => ev.seq < seq);
    this.#beforeUnstored = undefined;
    this.#unstored = [];
    if (snap === undefined) return;
    this.turns.splice(0, this.turns.length, ...snap.turns);
    this.before.splice(0, this.before.length, ...snap.before);
    this.#lastCheckpoint = snap.lastCheckpoint;
    this.queue.clear();
    for (const [k, v] of snap.queue) this.queue.set(k, v);
    this.mode = snap.mode;
    this.context = snap.context;
    this.lastSeq = snap.lastSeq;
    this.#turns.clear();
    for (const [k, v] of snap.byId) this.#turns.set(k, v);
    this.#tools.clear();
    for (const [k, v] of snap.tools) this.#tools.set(k, v);
    for (const id of this.#forgotten) this.#drop(id);
    for (const ev of kept) this.apply(ev);
  }

  /** A deep copy of the state (one structuredClone, so the turns and their maps still share blocks). */
  #snapshot(): Snapshot {
    return structuredClone({
      turns: this.turns, before: this.before, queue: this.queue, mode: this.mode, context: this.context, lastSeq: this.lastSeq,
      lastCheckpoint: this.#lastCheckpoint, byId: this.#turns, tools: this.#tools,
    });
  }

  #fold(ev: SessionEvent): void {
    this.lastSeq = ev.seq;
    const turn = this.turns.at(-1);
    switch (ev.kind) {
      case "turn.started": {
        this.#cut(turn);
        const t: Turn = {
          turnId: ev.payload.turnId, prompt: ev.payload.prompt, user: undefined, by: undefined, blocks: [],
          inputTokens: 0, outputTokens: 0, reasoningTokens: 0, calls: 0, cost: undefined, startedAt: time(ev.ts), endedAt: undefined, done: undefined,
          startSeq: ev.seq, doneSeq: undefined, rewound: false,
        };
        this.turns.push(t);
        this.#turns.set(t.turnId, t);
        this.queue.delete(t.turnId);
        return;
      }
      case "message.user":
        if (turn !== undefined) {
          turn.user = ev.payload.text;
          turn.by = ev.payload.principal?.name;
        }
        return;
      case "message.reasoning":
        this.#append(turn, "reasoning", ev.payload.text);
        return;
      case "message.delta":
        this.#append(turn, "text", ev.payload.text);
        return;
      case "message.done":
        // The deltas carried the text already; only a turn without deltas shows it here.
        if (turn !== undefined && !turn.blocks.some((b) => b.type === "text") && ev.payload.text !== "") {
          turn.blocks.push({ type: "text", text: ev.payload.text });
        }
        return;
      case "tool.call": {
        const b: Extract<Block, { type: "tool" }> = {
          type: "tool", callId: ev.payload.callId, name: ev.payload.name, args: ev.payload.args, progress: "", truncated: false, result: undefined,
          startedAt: time(ev.ts), endedAt: undefined, checkpoint: undefined,
        };
        this.#tools.set(b.callId, b);
        turn?.blocks.push(b);
        return;
      }
      case "tool.progress": {
        const b = this.#tools.get(ev.payload.callId);
        if (b !== undefined) {
          b.progress += ev.payload.chunk;
          b.truncated ||= ev.payload.truncated;
        }
        return;
      }
      case "tool.result": {
        let b = this.#tools.get(ev.payload.callId);
        if (b === undefined) {
          // A denied call has a result but no tool.call.
          b = { type: "tool", callId: ev.payload.callId, name: ev.payload.name, args: undefined, progress: "", truncated: false, result: undefined, startedAt: undefined, endedAt: undefined, checkpoint: undefined };
          this.#tools.set(b.callId, b);
          turn?.blocks.push(b);
        }
        b.result = { ok: ev.payload.ok, output: ev.payload.output, error: ev.payload.error };
        b.endedAt = time(ev.ts);
        return;
      }
      case "diff":
        turn?.blocks.push({ type: "diff", path: ev.payload.path, patch: ev.payload.patch });
        return;
      case "usage":
        if (turn !== undefined) {
          turn.inputTokens += ev.payload.inputTokens;
          turn.outputTokens += ev.payload.outputTokens;
          turn.reasoningTokens += ev.payload.reasoningTokens ?? 0;
          turn.calls++;
          // An unpriced call (a model the price table does not list, or an
          // event stored before costs were kept) has no cost, not a zero one.
          if (ev.payload.priced === true) turn.cost = (turn.cost ?? 0) + (ev.payload.costMicroUsd ?? 0) / 1e6;
        }
        return;
      case "context":
        this.context = ev.payload;
        return;
      case "error":
        turn?.blocks.push({ type: "error", code: ev.payload.code, message: ev.payload.message });
        return;
      case "turn.queued":
        this.queue.set(ev.payload.turnId, ev.payload.position);
        return;
      case "turn.dequeued":
        this.queue.delete(ev.payload.turnId);
        return;
      case "turn.done": {
        const t = this.#turns.get(ev.payload.turnId);
        if (t !== undefined) {
          t.done = { reason: ev.payload.reason, synthetic: ev.payload.synthetic };
          t.endedAt = time(ev.ts);
          t.doneSeq = ev.seq;
        }
        return;
      }
      case "checkpoint": {
        const p = ev.payload;
        // A restore runs only between turns: a turn still open before one
        // was cut (a fork's log copies the original's up to a seq inside it).
        if (p.reason === "restore") this.#cut(turn);
        const b: CheckpointBlock = {
          type: "checkpoint", seq: ev.seq, checkpointId: p.checkpointId, reason: p.reason, tool: p.tool,
          files: p.files, bytes: p.bytes, skipped: p.skipped, restoredFrom: p.restoredFrom, previous: this.#lastCheckpoint,
        };
        if (this.#deleted(p.checkpointId, ev.seq)) return;
        this.#lastCheckpoint = p.checkpointId;
        // Recorded between its tool's tool.call and the tool's output: shown
        // inside that tool's block, after the arguments, before the output.
        const tool = p.reason === "tool" && p.callId !== null ? this.#tools.get(p.callId) : undefined;
        if (tool !== undefined && tool.result === undefined && tool.checkpoint === undefined) tool.checkpoint = b;
        else (turn?.blocks ?? this.before).push(b);
        return;
      }
      case "session.rewound": {
        const p = ev.payload;
        this.#cut(turn);
        for (const t of this.turns) if (t.startSeq > p.toSeq) t.rewound = true;
        (turn?.blocks ?? this.before).push({ type: "rewound", toSeq: p.toSeq, fromSeq: p.fromSeq, checkpointId: p.checkpointId });
        return;
      }
      case "mode.changed":
        this.mode = ev.payload.mode;
        return;
      case "step.started":
      case "step.done":
        return;
      default:
        turn?.blocks.push({ type: "note", text: `${ev.kind}: ${summary(ev.payload)}` });
    }
  }

  /** cut ends a turn whose turn.done will never come (reason "cut"). */
  #cut(turn: Turn | undefined): void {
    if (turn !== undefined && turn.done === undefined) turn.done = { reason: "cut", synthetic: false };
  }

  #append(turn: Turn | undefined, type: "text" | "reasoning", text: string): void {
    if (turn === undefined) return;
    const last = turn.blocks.at(-1);
    if (last !== undefined && last.type === type) last.text += text;
    else turn.blocks.push({ type, text });
  }
}

interface Snapshot {
  turns: Turn[];
  before: Block[];
  lastCheckpoint: string | undefined;
  queue: Map<string, number>;
  mode: string | undefined;
  context: ContextEvent | undefined;
  lastSeq: number;
  byId: Map<string, Turn>;
  tools: Map<string, Extract<Block, { type: "tool" }>>;
}

/** time is an event's RFC3339 ts in ms since the epoch (undefined when it has none). */
function time(ts: string | undefined): number | undefined {
  if (ts === undefined) return undefined;
  const ms = Date.parse(ts);
  return Number.isFinite(ms) ? ms : undefined;
}

function summary(payload: unknown): string {
  const s = JSON.stringify(payload);
  return s.length > 300 ? s.slice(0, 300) + "…" : s;
}
