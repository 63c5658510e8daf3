// The SDK against a real trellisd: built from this repository, started with
// a fresh home and a scripted fake model, stopped with system.shutdown.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { createServer, connect as connectTcp, type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import {
  connect,
  PROTOCOL_VERSION,
  TrellisConnectionError,
  TrellisError,
  type ApprovalRequest,
  type QuestionRequest,
  type SessionEvent,
  type TrellisClient,
} from "../src/index.js";
import { buildDaemon, startDaemon, type Daemon } from "./daemon.js";

const script = {
  steps: [
    { match: "hello", text: "Hello there" },
    { match: "run ls", tool_calls: [{ name: "shell", arguments: { command: "ls" } }] },
    { after_tool: "shell", text: "done" },
    {
      match: "ask me",
      tool_calls: [{ name: "ask_user", arguments: { questions: [{ question: "Which colour?", options: [{ label: "Blue" }, { label: "Green" }] }] } }],
    },
    { after_tool: "ask_user", text: "thanks" },
    { match: "look up k1", tool_calls: [{ name: "lookup_note", arguments: { key: "k1" } }] },
    { after_tool: "lookup_note", text: "noted" },
    { default: true, text: "ok" },
  ],
};

/** Takes events from it until turn.done of turnId (bounded by the test's timeout). */
async function untilTurnDone(it: AsyncIterator<SessionEvent>, turnId: () => string | undefined): Promise<SessionEvent[]> {
  const events: SessionEvent[] = [];
  for (;;) {
    const r = await it.next();
    assert.ok(!r.done, `the event stream ended before turn.done; got ${events.map((e) => e.kind).join(", ")}`);
    events.push(r.value);
    if (r.value.kind === "turn.done" && r.value.payload.turnId === turnId()) return events;
  }
}

function assertContiguous(events: readonly SessionEvent[], first: number): void {
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => first + i), "seqs are contiguous");
}

describe("@trellis/sdk against trellisd", { timeout: 900_000 }, () => {
  let tmp: string;
  let workdir: string;
  let daemon: Daemon;
  let client: TrellisClient;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-sdk-"));
    workdir = join(tmp, "work");
    await mkdir(workdir);
    const bin = await buildDaemon(tmp); // cold: up to a few minutes; warm: seconds
    daemon = await startDaemon(bin, script);
    client = await connect({ url: daemon.info.url, token: daemon.info.token, clientId: "sdk-test" });
  }, { timeout: 600_000 });

  after(async () => {
    await client?.close();
    if (daemon !== undefined && process.env["TRELLIS_SDK_TEST_LOGS"] === "1") {
      console.error(`trellisd output:\n${daemon.output()}`);
    }
    await daemon?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  it("says hello and answers system.info", { timeout: 10_000 }, async () => {
    assert.equal(client.hello.protocolVersion, PROTOCOL_VERSION);
    assert.ok(client.hello.capabilities.includes("sessions"), `capabilities: ${client.hello.capabilities.join(",")}`);
    assert.ok(client.hello.connectionId !== "");
    assert.ok(client.hello.limits.maxFrameBytes > 0);
    const info = await client.call("system.info");
    assert.equal(info.pid, daemon.info.pid);
    assert.equal(info.port, daemon.info.port);
    assert.equal(info.protocolVersion, PROTOCOL_VERSION);
    assert.equal(info.store, "sqlite");
    assert.ok(info.counters.connections >= 1);
  });

  it("runs a turn: events in seq order, contiguous, until turn.done{complete}", { timeout: 15_000 }, async () => {
    const { sessionId } = await client.call("session.create", { workdir });
    assert.match(sessionId, /^s-/);
    const seen: SessionEvent[] = [];
    const off = client.onEvent(sessionId, (ev) => seen.push(ev));
    const events = client.events(sessionId);
    let turnId: string | undefined;
    const collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "hello" }));
    const got = await collected;
    await events.return?.();
    off();

    assertContiguous(got, 1);
    const kinds = got.map((e) => e.kind);
    assert.equal(kinds[0], "turn.started");
    assert.ok(kinds.includes("message.user"), kinds.join(", "));
    const done = got.find((e) => e.kind === "message.done");
    assert.ok(done?.kind === "message.done");
    assert.equal(done.payload.text, "Hello there");
    const deltas = got.flatMap((e) => (e.kind === "message.delta" ? [e.payload.text] : []));
    assert.equal(deltas.join(""), "Hello there");
    const last = got[got.length - 1]!;
    assert.ok(last.kind === "turn.done");
    assert.equal(last.payload.reason, "complete");
    assert.ok(got.every((e) => e.sessionId === sessionId && /^\d{4}-\d\d-\d\dT.*Z$/.test(e.ts)));
    // onEvent saw the same events in the same order.
    assert.deepEqual(seen.map((e) => e.seq), got.map((e) => e.seq));

    // A second connection replays the stored events (session.resume) with the same seqs.
    const other = await connect({ url: daemon.info.url, token: daemon.info.token });
    try {
      const replay = other.events(sessionId, { afterSeq: 0 });
      const again: SessionEvent[] = [];
      for await (const ev of replay) {
        again.push(ev);
        if (ev.seq === last.seq) break;
      }
      assert.deepEqual(again.map((e) => [e.seq, e.kind]), got.map((e) => [e.seq, e.kind]));
    } finally {
      await other.close();
    }
  });

  it("rejects invalid params with a TrellisError (invalid_params)", { timeout: 10_000 }, async () => {
    const err = await client.call("session.create", { workdir, bogus: true } as never).then(
      () => assert.fail("session.create with an unknown field succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TrellisError, String(err));
    assert.equal(err.code, "invalid_params");
    assert.equal(err.numeric, -32602);
    assert.equal(err.data["code"], "invalid_params");
    assert.equal(err.method, "session.create");
    assert.match(err.message, /bogus/);

    await assert.rejects(client.call("session.prompt", { sessionId: "s-00000000", text: "hi" }), (e: unknown) => {
      assert.ok(e instanceof TrellisError);
      assert.equal(e.code, "not_found");
      assert.equal(e.numeric, -32004);
      return true;
    });
  });

  it("answers approval.request: allow runs the tool, a throwing handler denies it", { timeout: 20_000 }, async () => {
    const asked: ApprovalRequest[] = [];
    const off = client.onApprovalRequest((req) => {
      asked.push(req);
      return { decision: "allow" };
    });
    const { sessionId } = await client.call("session.create", { workdir, mode: "accept" });
    const events = client.events(sessionId);
    let turnId: string | undefined;
    let collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "run ls" }));
    let got = await collected;
    off();

    assert.equal(asked.length, 1);
    const req = asked[0]!;
    assert.equal(req.sessionId, sessionId);
    assert.equal(req.tool, "shell");
    assert.equal(req.permissionTag, "exec");
    assert.deepEqual(req.args, { command: "ls" });
    assert.match(req.requestId, /^ap-/);
    const call = got.find((e) => e.kind === "tool.call");
    assert.ok(call?.kind === "tool.call" && call.payload.name === "shell", "tool.call shell");
    const result = got.find((e) => e.kind === "tool.result");
    assert.ok(result?.kind === "tool.result");
    assert.equal(result.payload.ok, true, JSON.stringify(result.payload));
    const done = got[got.length - 1]!;
    assert.ok(done.kind === "turn.done" && done.payload.reason === "complete");
    assert.ok(got.some((e) => e.kind === "message.done" && e.payload.text === "done"));
    assertContiguous(got, 1);

    // A handler that throws answers with a JSON-RPC error: the daemon denies.
    client.onApprovalRequest(() => {
      throw new Error("not in this test");
    });
    const first = got[got.length - 1]!.seq + 1;
    collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "run ls" }));
    got = await collected;
    await events.return?.();
    assertContiguous(got, first);
    const denied = got.find((e) => e.kind === "tool.result");
    assert.ok(denied?.kind === "tool.result");
    assert.equal(denied.payload.ok, false);
    const error = got.find((e) => e.kind === "error");
    assert.ok(error?.kind === "error" && error.payload.code === "approval_denied", JSON.stringify(error));
    assert.ok(!got.some((e) => e.kind === "tool.call"), "a denied call never runs");
  });

  it("registerTools: the model's call of a lent tool runs its handler, whose answer is the tool's result", { timeout: 20_000 }, async () => {
    const { sessionId } = await client.call("session.create", { workdir, mode: "auto" });
    const calls: string[] = [];
    const lent = await client.registerTools([{
      name: "lookup_note", description: "Looks up a note.", permission: "read",
      inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
      handler: (call) => {
        calls.push(`${call.sessionId} ${call.name} ${String(call.arguments?.["key"])}`);
        return `the note of ${String(call.arguments?.["key"])} is: buy milk`;
      },
    }], { sessionId });
    assert.deepEqual(lent.names, ["lookup_note"]);
    const events = client.events(sessionId);
    let turnId: string | undefined;
    const collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "look up k1" }));
    const got = await collected;
    await events.return?.();
    assert.deepEqual(calls, [`${sessionId} lookup_note k1`]);
    const result = got.find((e) => e.kind === "tool.result");
    assert.ok(result?.kind === "tool.result");
    assert.equal(result.payload.ok, true, JSON.stringify(result.payload));
    assert.match(String(result.payload.output), /buy milk/);
    assert.deepEqual(await client.unregisterTools(undefined, { sessionId }), ["lookup_note"]);
  });

  it("answers question.request: the answer is what ask_user returns", { timeout: 20_000 }, async () => {
    const asked: QuestionRequest[] = [];
    const off = client.onQuestionRequest((req) => {
      asked.push(req);
      return { answers: [{ values: ["Green"] }] };
    });
    const { sessionId } = await client.call("session.create", { workdir });
    const events = client.events(sessionId);
    let turnId: string | undefined;
    const collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "ask me" }));
    const got = await collected;
    off();
    await events.return?.();
    assert.equal(asked.length, 1);
    assert.match(asked[0]!.questionId, /^q-/);
    assert.equal(asked[0]!.sessionId, sessionId);
    assert.deepEqual(asked[0]!.questions.map((q) => q.options.map((o) => o.label)), [["Blue", "Green"]]);
    const result = got.find((e) => e.kind === "tool.result");
    assert.ok(result?.kind === "tool.result");
    assert.equal(result.payload.ok, true, JSON.stringify(result.payload));
    assert.match(String(result.payload.output), /A: Green/);
  });

  it("steers text into a running turn and edits its queue", { timeout: 30_000 }, async () => {
    // The turn waits on its shell call's approval until the test answers.
    let allow!: () => void;
    const answered = new Promise<void>((resolve) => (allow = resolve));
    let asked!: () => void;
    const pending = new Promise<void>((resolve) => (asked = resolve));
    const off = client.onApprovalRequest(async () => {
      asked();
      await answered;
      return { decision: "allow" };
    });
    const { sessionId } = await client.call("session.create", { workdir, mode: "accept" });
    const events = client.events(sessionId);
    let turnId: string | undefined;
    const collected = untilTurnDone(events, () => turnId);
    ({ turnId } = await client.call("session.prompt", { sessionId, text: "run ls" }));
    await pending;

    const steered = await client.steer(sessionId, "and say hello");
    assert.deepEqual(steered, { ok: true, started: false, turnId });
    const q1 = (await client.call("session.prompt", { sessionId, text: "hello one" })).turnId;
    const q2 = (await client.call("session.prompt", { sessionId, text: "hello two" })).turnId;
    assert.deepEqual(await client.queue(sessionId), [
      { turnId: q1, position: 1, prompt: "hello one", attachments: 0 },
      { turnId: q2, position: 2, prompt: "hello two", attachments: 0 },
    ]);
    await client.removeQueued(sessionId, q1);
    await assert.rejects(client.removeQueued(sessionId, q1), (e: unknown) => e instanceof TrellisError && e.code === "not_found");
    assert.equal(await client.clearQueue(sessionId), 1);
    assert.deepEqual(await client.queue(sessionId), []);
    allow();
    const got = await collected;
    await events.return?.();
    off();

    const kinds = got.filter((e) => ["turn.started", "turn.dequeued", "turn.steered", "turn.done"].includes(e.kind));
    assert.deepEqual(kinds.map((e) => e.kind), ["turn.started", "turn.dequeued", "turn.done", "turn.dequeued", "turn.done", "turn.steered", "turn.done"]);
    const steer = got.find((e) => e.kind === "turn.steered");
    assert.ok(steer?.kind === "turn.steered" && steer.payload.text === "and say hello" && steer.payload.turnId === turnId, JSON.stringify(steer));
    // The model read the steered text in the same turn: its last answer is the "hello" step's.
    assert.ok(got.some((e) => e.kind === "message.done" && e.payload.text.endsWith("Hello there")), JSON.stringify(got.filter((e) => e.kind === "message.done")));
  });

  it("session.prompt: two turns, one after the other, each loop gets its own turn's events and result", { timeout: 20_000 }, async () => {
    const session = await client.createSession({ workdir });
    const seen: SessionEvent[][] = [];
    for (const text of ["hello", "something else"]) {
      const turn = session.prompt(text);
      const got: SessionEvent[] = [];
      for await (const ev of turn) got.push(ev);
      const turnId = await turn.turnId;
      const result = await turn;
      assert.equal(got[0]?.kind, "turn.started");
      assert.ok(got[0]?.kind === "turn.started" && got[0].payload.turnId === turnId && got[0].payload.prompt === text);
      const last = got[got.length - 1]!;
      assert.ok(last.kind === "turn.done" && last.payload.turnId === turnId && last.payload.reason === "complete", JSON.stringify(last));
      assert.deepEqual(result, { turnId, reason: "complete", text: text === "hello" ? "Hello there" : "ok", usage: result.usage, errors: [] });
      assert.ok(result.usage.outputTokens > 0, JSON.stringify(result.usage));
      seen.push(got);
    }
    assertContiguous(seen[0]!, 1);
    assertContiguous(seen[1]!, seen[0]![seen[0]!.length - 1]!.seq + 1);

    // The old way, for contrast: a loop over events() that left at turn.done
    // closed that iterator, and a second loop over it says so.
    const events = session.events();
    const turn = session.prompt("hello");
    for await (const ev of events) if (ev.kind === "turn.done") break;
    await turn;
    await assert.rejects(async () => {
      for await (const _ of events) assert.fail("a closed iterator gave an event");
    }, /events\(\): this iterator was closed when an earlier loop over it ended/);
  });

  it("session.prompt: a running turn, a steer into it and a queued turn, iterated at once, each get their own events", { timeout: 30_000 }, async () => {
    // The first turn waits on its shell call's approval until the test answers.
    let allow!: () => void;
    const answered = new Promise<void>((resolve) => (allow = resolve));
    let asked!: () => void;
    const pending = new Promise<void>((resolve) => (asked = resolve));
    const off = client.onApprovalRequest(async () => {
      asked();
      await answered;
      return { decision: "allow" };
    });
    const session = await client.createSession({ workdir, mode: "accept" });
    const collect = async (turn: AsyncIterable<SessionEvent>, leaveAt?: string): Promise<SessionEvent[]> => {
      const got: SessionEvent[] = [];
      for await (const ev of turn) {
        got.push(ev);
        if (ev.kind === leaveAt) break;
      }
      return got;
    };
    const running = session.prompt("run ls");
    const runningEvents = collect(running);
    await pending;
    const steered = session.steer("and say hello");
    const steeredEvents = collect(steered);
    const queued = session.prompt("hello");
    const queuedEvents = collect(queued);
    const left = session.prompt("something else");
    const leftEvents = collect(left, "turn.started"); // leaves its loop early
    assert.equal(await steered.turnId, await running.turnId);
    allow();
    const [r, s, q, l] = await Promise.all([runningEvents, steeredEvents, queuedEvents, leftEvents]);
    const [rr, sr, qr, lr] = await Promise.all([running, steered, queued, left]);
    off();

    const ids = await Promise.all([running.turnId, queued.turnId, left.turnId]);
    const kinds = (got: SessionEvent[]): string[] => got.map((e) => e.kind).filter((k) => k.startsWith("turn."));
    // The running turn: from its start to its end, with the steered text, and
    // none of the queued turns' events.
    assert.deepEqual(kinds(r), ["turn.started", "turn.steered", "turn.done"]);
    assert.ok(r.some((e) => e.kind === "tool.result" && e.payload.ok), "the running turn's tool result");
    assert.ok(r.every((e) => !("turnId" in e.payload) || e.payload.turnId === ids[0]), JSON.stringify(r.map((e) => e.kind)));
    // The steer's turn is the running turn, from the steer on.
    assert.deepEqual(kinds(s), ["turn.steered", "turn.done"]);
    assert.deepEqual(s.map((e) => e.seq), r.filter((e) => e.seq >= s[0]!.seq).map((e) => e.seq));
    assert.equal(sr.turnId, ids[0]);
    assert.deepEqual([sr.reason, sr.text], [rr.reason, rr.text]);
    assert.equal(rr.reason, "complete");
    assert.ok(rr.text.endsWith("Hello there"), rr.text);
    // The queued turn: queued, dequeued, started, done, and its own answer.
    assert.deepEqual(kinds(q), ["turn.queued", "turn.dequeued", "turn.started", "turn.done"]);
    assert.ok(q.every((e) => !("turnId" in e.payload) || e.payload.turnId === ids[1]));
    assert.deepEqual(q.filter((e) => e.kind === "message.done").map((e) => e.kind === "message.done" && e.payload.text), ["Hello there"]);
    assert.deepEqual(qr, { turnId: ids[1], reason: "complete", text: "Hello there", usage: qr.usage, errors: [] });
    // The loop that left early saw up to its turn's start; its result still came.
    assert.deepEqual(kinds(l), ["turn.queued", "turn.dequeued", "turn.started"]);
    assert.equal(lr.text, "ok");
    // Nothing was seen twice across turns, and the turns did not overlap.
    const seqs = [...r, ...q, ...l].map((e) => e.seq);
    assert.equal(new Set(seqs).size, seqs.length);
  });

  it("a mutating call whose answer is cut off is sent again with its operation id and acts once", { timeout: 20_000 }, async () => {
    // A proxy between the SDK and the daemon drops the daemon's answer to
    // the first session.create and cuts the connection; the SDK reconnects
    // through it and repeats the call with the same operationId.
    const daemonUrl = new URL(daemon.info.url);
    let armed = true;
    const proxy = createServer((down) => {
      const up = connectTcp(Number(daemonUrl.port), daemonUrl.hostname);
      down.on("data", (b) => up.write(b));
      up.on("data", (b: Buffer) => {
        if (armed && b.includes('"sessionId":"')) {
          armed = false;
          up.destroy();
          down.destroy();
          return;
        }
        down.write(b);
      });
      const end = (): void => {
        up.destroy();
        down.destroy();
      };
      up.on("error", end).on("close", end);
      down.on("error", end).on("close", end);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const port = (proxy.address() as AddressInfo).port;
    const dir = join(tmp, "retried");
    await mkdir(dir);
    const c = await connect({ url: `ws://127.0.0.1:${String(port)}/ws`, token: daemon.info.token, reconnect: { initialDelayMs: 10 } });
    try {
      const created = await c.call("session.create", { workdir: dir });
      assert.equal(armed, false, "the proxy cut the first answer");
      const list = await client.call("session.list", { workdir: dir });
      assert.deepEqual(list.sessions.map((s) => s.sessionId), [created.sessionId], "one session, the one answered");
    } finally {
      await c.close();
      proxy.close();
    }
  });

  it("refuses a bad token with unauthorized", { timeout: 10_000 }, async () => {
    await assert.rejects(connect({ url: daemon.info.url, token: "not-the-token" }), (e: unknown) => {
      assert.ok(e instanceof TrellisError, String(e));
      assert.equal(e.code, "unauthorized");
      assert.equal(e.numeric, -32000);
      assert.equal(e.method, "system.hello");
      return true;
    });
  });

  it("stops the daemon with system.shutdown; later calls fail saying the daemon is unreachable", { timeout: 30_000 }, async () => {
    const c = await connect({ url: daemon.info.url, token: daemon.info.token, offlineCallTimeoutMs: 1_000, onError: () => {} });
    const disconnected = new Promise((resolve) => c.on("disconnected", resolve));
    assert.deepEqual(await client.call("system.shutdown"), { ok: true });
    await disconnected;
    assert.equal(await daemon.exited, 0, daemon.output());
    assert.ok(!existsSync(join(daemon.home, "daemon.json")), "daemon.json is removed on a clean stop");
    await assert.rejects(c.call("system.health"), (e: unknown) =>
      e instanceof TrellisConnectionError && /system\.health: the Trellis daemon is unreachable/.test(e.message));
    await c.close();
    assert.equal(await c.closed, undefined);
  });
});
