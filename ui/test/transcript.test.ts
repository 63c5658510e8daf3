// The transcript's fold of a lease_lost notice, without a browser: events a
// deposed daemon sent unstored from the notice's seq on disappear, and the
// new owner's events under those seqs are folded after it. The console's
// source is bundled with esbuild (as build.mjs does) and imported.

import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { after, before, describe, it } from "node:test";

import { build } from "esbuild";

interface Turn {
  turnId: string;
  inputTokens: number;
  outputTokens: number;
  reasoningTokens: number;
  calls: number;
  cost: number | undefined;
  startedAt: number | undefined;
  endedAt: number | undefined;
  blocks: { type: string; text?: string; code?: string; name?: string; checkpointId?: string; previous?: string; toSeq?: number;
    checkpoint?: { checkpointId: string; previous: string | undefined } }[];
  done: { reason: string; synthetic: boolean } | undefined;
  doneSeq: number | undefined;
  rewound: boolean;
}
interface Transcript {
  turns: Turn[];
  before: Turn["blocks"];
  lastSeq: number;
  apply(ev: unknown): void;
  forget(checkpointId: string): void;
  forgetMissing(kept: Set<string>, newest: number): void;
}

const source = fileURLToPath(new URL("../../src/transcript.ts", import.meta.url));

let tmp: string;
let NewTranscript: new () => Transcript;

// The transcript module, bundled once for the whole file.
before(async () => {
  tmp = await mkdtemp(join(tmpdir(), "trellis-ui-transcript-"));
  const out = join(tmp, "transcript.mjs");
  await build({ entryPoints: [source], bundle: true, format: "esm", platform: "node", outfile: out, logLevel: "silent" });
  ({ Transcript: NewTranscript } = (await import(pathToFileURL(out).href)) as { Transcript: new () => Transcript });
});
after(async () => {
  await rm(tmp, { recursive: true, force: true });
});

function ev(seq: number, kind: string, payload: object, flags: { unstored?: boolean; retracted?: boolean; ts?: string } = {}) {
  return { sessionId: "s-1", seq, kind, payload, ts: "2026-12-04T00:00:00.000Z", ...flags };
}

// The turn up to a streamed "hello " (stored), then what a daemon sent from
// memory once its store failed: more text and a tool call.
function started(t: Transcript): void {
  t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }));
  t.apply(ev(2, "message.user", { text: "hi" }));
  t.apply(ev(3, "message.delta", { text: "hello " }));
  t.apply(ev(4, "message.delta", { text: "phantom" }, { unstored: true }));
  t.apply(ev(5, "tool.call", { callId: "c-1", name: "shell", args: { command: "ls" } }, { unstored: true }));
}

const notice = [
  ev(4, "error", { code: "lease_lost", message: "this daemon lost the lease" }, { retracted: true }),
  ev(4, "turn.done", { turnId: "t-1", reason: "error" }, { retracted: true }),
];

describe("the transcript and a lease_lost notice", () => {

  it("drops what was received unstored from the notice's seq on, and folds the new owner's events after it", () => {
    const t = new NewTranscript();
    started(t);
    assert.deepEqual(t.turns[0]?.blocks.map((b) => b.type), ["text", "tool"]);
    for (const n of notice) t.apply(n);
    const turn = t.turns[0];
    assert.ok(turn);
    assert.deepEqual(turn.blocks, [
      { type: "text", text: "hello " },
      { type: "error", code: "lease_lost", message: "this daemon lost the lease" },
    ]);
    assert.equal(turn.done?.reason, "error");
    assert.equal(t.lastSeq, 3, "the notice is out of the numbering");
    // The session's new owner closes the turn under seq 4.
    t.apply(ev(4, "turn.done", { turnId: "t-1", reason: "interrupted", synthetic: true }));
    assert.deepEqual(turn.done, { reason: "interrupted", synthetic: true });
    assert.equal(t.lastSeq, 4);
  });

  it("keeps unstored events once a stored one follows them (they were stored too)", () => {
    const t = new NewTranscript();
    started(t);
    t.apply(ev(6, "message.delta", { text: " more" }));
    for (const n of notice.map((n) => ({ ...n, seq: 7 }))) t.apply(n);
    const turn = t.turns[0];
    assert.ok(turn);
    assert.deepEqual(turn.blocks.map((b) => b.type), ["text", "tool", "text", "error"]);
    assert.equal(turn.blocks[0]?.text, "hello phantom");
  });
});

describe("the transcript's time and usage per turn", () => {

  const usage = (seq: number, extra: object = {}) =>
    ev(seq, "usage", { inputTokens: 100, outputTokens: 20, provider: "fake", model: "m", reasoningTokens: 5, ...extra });

  it("times a turn from turn.started's ts to turn.done's, and adds up its usage events", () => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }, { ts: "2026-12-04T00:00:01.000Z" }));
    t.apply(usage(2));
    t.apply(usage(3));
    t.apply(ev(4, "turn.done", { turnId: "t-1", reason: "complete", synthetic: false }, { ts: "2026-12-04T00:00:03.250Z" }));
    const turn = t.turns[0]!;
    assert.equal(turn.endedAt! - turn.startedAt!, 2250);
    assert.deepEqual([turn.inputTokens, turn.outputTokens, turn.reasoningTokens, turn.calls], [200, 40, 10, 2]);
    assert.equal(turn.cost, undefined, "no call was priced");
  });

  it("adds up the cost of the priced calls (costMicroUsd) in dollars", () => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }));
    t.apply(usage(2, { costMicroUsd: 1500, priced: true }));
    t.apply(usage(3)); // stored before costs were kept: no cost
    t.apply(usage(4, { costMicroUsd: 2500, priced: true }));
    t.apply(usage(5, { costMicroUsd: 0, priced: false })); // a model the price table does not list
    assert.ok(Math.abs(t.turns[0]!.cost! - 0.004) < 1e-12, String(t.turns[0]!.cost));
  });
});

describe("the transcript's checkpoints, forks and rewinds", () => {
  const cp = (seq: number, id: string, reason: string, flags: { unstored?: boolean } = {}, callId: string | null = null) =>
    ev(seq, "checkpoint", { checkpointId: id, reason, turnId: null, tool: null, callId, files: 1, bytes: 3, skipped: [], restoredFrom: null }, flags);
  /** A turn whose write_file call has its checkpoint before it (cp-1), then the turn's (cp-2). */
  const toolTurn = (): Transcript => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }));
    t.apply(ev(2, "tool.call", { callId: "c-1", name: "write_file", args: { path: "a" } }));
    t.apply(cp(3, "cp-1", "tool", {}, "c-1"));
    t.apply(ev(4, "tool.result", { callId: "c-1", name: "write_file", ok: true, output: "written", error: null }));
    t.apply(cp(5, "cp-2", "turn"));
    return t;
  };

  it("shows a checkpoint recorded before a tool inside that tool's block: after its tool.call, before its output", () => {
    const t = toolTurn();
    const blocks = t.turns[0]!.blocks;
    assert.deepEqual(blocks.map((b) => b.type), ["tool", "checkpoint"]);
    assert.equal(blocks[0]!.checkpoint?.checkpointId, "cp-1");
    assert.deepEqual([blocks[1]!.checkpointId, blocks[1]!.previous], ["cp-2", "cp-1"]);
  });

  it("forgets a deleted checkpoint: its row goes and the next one's diff starts from the one before it", () => {
    const t = toolTurn();
    t.forget("cp-1");
    assert.equal(t.turns[0]!.blocks[0]!.checkpoint, undefined);
    t.forget("cp-2");
    assert.deepEqual(t.turns[0]!.blocks.map((b) => b.type), ["tool"]);
    t.apply(cp(6, "cp-3", "restore"));
    assert.equal(t.turns[0]!.blocks.at(-1)!.previous, undefined, "no checkpoint before it is left");
  });

  it("leaves off the checkpoints checkpoint.list no longer holds below its newest, folded before the list came or after", () => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }));
    t.apply(cp(2, "cp-1", "turn"));
    t.apply(cp(3, "cp-gone", "turn"));
    t.forgetMissing(new Set(["cp-1", "cp-3", "cp-5"]), 7);
    t.apply(cp(4, "cp-3", "turn"));
    t.apply(cp(5, "cp-also-gone", "turn"));
    t.apply(cp(7, "cp-5", "turn"));
    t.apply(cp(8, "cp-new", "turn")); // recorded after the list was read: not judged
    assert.deepEqual(t.turns[0]!.blocks.map((b) => [b.checkpointId, b.previous]),
      [["cp-1", undefined], ["cp-3", "cp-1"], ["cp-5", "cp-3"], ["cp-new", "cp-5"]]);
  });

  it("links each checkpoint to the one before it; one before any turn is kept apart", () => {
    const t = new NewTranscript();
    t.apply(cp(1, "cp-0", "restore"));
    t.apply(ev(2, "turn.started", { turnId: "t-1", prompt: "hi" }));
    t.apply(cp(3, "cp-1", "tool"));
    t.apply(cp(4, "cp-2", "turn"));
    t.apply(ev(5, "turn.done", { turnId: "t-1", reason: "complete", synthetic: false }));
    assert.deepEqual(t.before.map((b) => [b.checkpointId, b.previous]), [["cp-0", undefined]]);
    assert.deepEqual(t.turns[0]!.blocks.map((b) => [b.checkpointId, b.previous]), [["cp-1", "cp-0"], ["cp-2", "cp-1"]]);
    assert.equal(t.turns[0]!.doneSeq, 5);
  });

  it("ends a turn a fork cut (its restore checkpoint follows the copied events), and marks the turns a rewind went back over", () => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "one" }));
    t.apply(cp(2, "cp-1", "tool"));
    t.apply(cp(3, "cp-fork", "restore"));
    assert.equal(t.turns[0]!.done?.reason, "cut");
    t.apply(ev(4, "turn.started", { turnId: "t-2", prompt: "two" }));
    t.apply(ev(5, "turn.done", { turnId: "t-2", reason: "complete", synthetic: false }));
    t.apply(ev(6, "turn.started", { turnId: "t-3", prompt: "three" }));
    t.apply(ev(7, "turn.done", { turnId: "t-3", reason: "complete", synthetic: false }));
    t.apply(ev(8, "session.rewound", { toSeq: 5, fromSeq: 7, checkpointId: "cp-fork", messages: 4 }));
    assert.deepEqual(t.turns.map((x) => x.rewound), [false, false, true]);
    assert.deepEqual(t.turns[2]!.blocks.at(-1), { type: "rewound", toSeq: 5, fromSeq: 7, checkpointId: "cp-fork" });
  });

  it("forgets a checkpoint a lease_lost notice retracts", () => {
    const t = new NewTranscript();
    t.apply(ev(1, "turn.started", { turnId: "t-1", prompt: "hi" }));
    t.apply(cp(2, "cp-1", "tool"));
    t.apply(cp(3, "cp-phantom", "turn", { unstored: true }));
    t.apply(ev(3, "error", { code: "lease_lost", message: "lost" }, { retracted: true }));
    t.apply(cp(3, "cp-2", "turn"));
    const cps = t.turns[0]!.blocks.filter((b) => b.type === "checkpoint");
    assert.deepEqual(cps.map((b) => [b.checkpointId, b.previous]), [["cp-1", undefined], ["cp-2", "cp-1"]]);
  });
});
