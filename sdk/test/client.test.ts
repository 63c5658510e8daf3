// The client's wire behaviour against a scripted peer: ordering by seq,
// answers to server → client requests, error mapping, a lost connection.

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { afterEach, describe, it } from "node:test";

import { connect, TrellisConnectionError, TrellisError, type ConnectOptions, type SessionEvent, type TrellisClient } from "../src/index.js";
import { SeqOrderer } from "../src/session-events.js";
import { event, okHello, startFakeServer, type FakePeer, type FakeServer, type Message } from "./fake-server.js";

async function take(it: AsyncIterator<SessionEvent>, n: number): Promise<number[]> {
  const seqs: number[] = [];
  while (seqs.length < n) {
    const r = await it.next();
    assert.ok(!r.done, `ended after ${seqs.join(",")}`);
    seqs.push(r.value.seq);
  }
  return seqs;
}

function ev(seq: number): SessionEvent {
  return { sessionId: "s-1", seq, kind: "message.delta", payload: { text: "" }, ts: "" };
}

describe("SeqOrderer", () => {
  const cases: { name: string; start?: number; arrive: number[]; want: number[] }[] = [
    { name: "in order", start: 1, arrive: [1, 2, 3], want: [1, 2, 3] },
    { name: "reordered", start: 1, arrive: [3, 1, 2, 5, 4], want: [1, 2, 3, 4, 5] },
    { name: "duplicates dropped", start: 1, arrive: [1, 1, 2, 1, 3, 2], want: [1, 2, 3] },
    { name: "waits for a gap", start: 1, arrive: [2, 3, 4], want: [] },
    { name: "before the start dropped", start: 4, arrive: [2, 3, 4, 6, 5], want: [4, 5, 6] },
    { name: "no start: the first arrival starts", arrive: [7, 8, 10, 9], want: [7, 8, 9, 10] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const got: number[] = [];
      const o = new SeqOrderer((e) => got.push(e.seq));
      if (c.start !== undefined) o.start(c.start);
      for (const seq of c.arrive) o.add(ev(seq));
      assert.deepEqual(got, c.want);
    });
  }

  it("start after early arrivals delivers from the start on", () => {
    const got: number[] = [];
    const o = new SeqOrderer((e) => got.push(e.seq));
    // No start known and nothing delivered yet is impossible (the first
    // arrival starts), so a later start() is ignored.
    o.add(ev(3));
    assert.equal(o.start(1), false);
    o.add(ev(4));
    assert.deepEqual(got, [3, 4]);
  });

  it("a retracted notice voids what came unstored from its seq and the log's events follow", () => {
    const got: string[] = [];
    const o = new SeqOrderer((e) => got.push(`${e.seq}${e.retracted === true ? " " + e.kind + " retracted" : e.unstored === true ? " unstored" : ""}`));
    o.start(1);
    o.add(ev(1));
    o.add(ev(2));
    o.add({ ...ev(3), unstored: true });
    o.add({ ...ev(3), kind: "error", payload: { code: "lease_lost", message: "" }, retracted: true } as SessionEvent);
    o.add({ ...ev(3), kind: "turn.done", payload: { turnId: "t", reason: "error" }, retracted: true } as SessionEvent);
    o.add(ev(3));
    o.add(ev(4));
    assert.deepEqual(got, ["1", "2", "3 unstored", "3 error retracted", "3 turn.done retracted", "3", "4"]);
  });
});

describe("TrellisClient on the wire", { timeout: 10_000 }, () => {
  let server: FakeServer | undefined;
  let client: TrellisClient | undefined;

  afterEach(async () => {
    await client?.close();
    await server?.close();
    client = undefined;
    server = undefined;
  });

  async function setup(options: Partial<ConnectOptions> = {}): Promise<FakePeer> {
    server = await startFakeServer();
    client = await connect({ url: server.url, token: "t", onError: () => {}, ...options });
    return server.connection;
  }

  async function answer(peer: FakePeer, method: string, result: unknown): Promise<Message> {
    const req = await peer.next((m) => m["method"] === method);
    peer.send({ jsonrpc: "2.0", id: req["id"], result });
    return req;
  }

  it("sends hello with the protocol version, token and client id", async () => {
    let hello: Message | undefined;
    server = await startFakeServer((m) => {
      hello = m;
      return okHello(m);
    });
    client = await connect({ url: server.url.replace(/\/ws$/, ""), token: "tok", clientId: "me", clientVersion: "9.9.9" });
    assert.equal(hello?.["method"], "system.hello");
    assert.deepEqual(hello?.["params"], { token: "tok", clientVersion: "9.9.9", protocolVersion: "1.0.0", clientKind: "sdk", clientId: "me" });
    assert.equal(client.hello.connectionId, "c-fake");
  });

  it("delivers a session's events in seq order, without duplicates, to iterators and handlers", async () => {
    const peer = await setup();
    const created = client!.call("session.create", { workdir: "/tmp" });
    await answer(peer, "session.create", { sessionId: "s-1" });
    const { sessionId } = await created;
    const it = client!.events(sessionId);
    const seen: number[] = [];
    client!.onEvent(sessionId, (e) => seen.push(e.seq));
    for (const seq of [3, 1, 2, 2, 5, 4, 1]) peer.send(event(sessionId, seq));
    peer.send(event("s-other", 1));
    assert.deepEqual(await take(it, 5), [1, 2, 3, 4, 5]);
    assert.deepEqual(seen, [1, 2, 3, 4, 5]);
  });

  it("events({afterSeq}) replays through session.resume before live events, with no duplicate", async () => {
    const peer = await setup();
    const it = client!.events("s-9", { afterSeq: 1 });
    const next = take(it, 4);
    const resume = await peer.next((m) => m["method"] === "session.resume");
    assert.deepEqual(resume["params"], { sessionId: "s-9", afterSeq: 1 });
    // A live event overtakes the resume result; the replay still comes first.
    peer.send(event("s-9", 4));
    peer.send({ jsonrpc: "2.0", id: resume["id"], result: { sessionId: "s-9", mode: "accept", provider: "fake", model: "m", events: [event("s-9", 2)["params"], event("s-9", 3)["params"]] } });
    peer.send(event("s-9", 5));
    assert.deepEqual(await next, [2, 3, 4, 5]);
  });

  it("maps a JSON-RPC error to a TrellisError", async () => {
    const peer = await setup();
    const call = client!.call("session.interrupt", { sessionId: "s-1" });
    const req = await peer.next();
    peer.send({ jsonrpc: "2.0", id: req["id"], error: { code: -32004, message: "session s-1 not found", data: { code: "not_found" } } });
    await assert.rejects(call, (e: unknown) => {
      assert.ok(e instanceof TrellisError);
      assert.equal(e.code, "not_found");
      assert.equal(e.numeric, -32004);
      assert.deepEqual(e.data, { code: "not_found" });
      assert.equal(e.message, "session.interrupt: session s-1 not found (not_found, -32004)");
      return true;
    });
  });

  it("matches responses by id, out of order and in a batch", async () => {
    const peer = await setup();
    const a = client!.call("system.health");
    const b = client!.call("session.list", {});
    const ra = await peer.next((m) => m["method"] === "system.health");
    const rb = await peer.next((m) => m["method"] === "session.list");
    peer.send([
      { jsonrpc: "2.0", id: rb["id"], result: { sessions: [] } },
      { jsonrpc: "2.0", id: ra["id"], result: { status: "ok" } },
    ]);
    assert.deepEqual(await a, { status: "ok" });
    assert.deepEqual(await b, { sessions: [] });
  });

  const approvalParams = {
    requestId: "ap-1", sessionId: "s-1", turnId: "t-1", callId: "c-1", tool: "shell", args: { command: "ls" },
    permissionTag: "exec", risk: "medium", timeoutSec: 300, scopeHint: "shell(ls*)", note: "",
  };
  const approvalCases: { name: string; handler?: () => unknown; want: (reply: Message) => void }[] = [
    {
      name: "a returned decision is the result",
      handler: () => ({ decision: "allow", scope: "session", extra: 1 }),
      want: (r) => assert.deepEqual(r["result"], { decision: "allow", scope: "session" }),
    },
    {
      name: "an async handler",
      handler: async () => ({ decision: "deny", reason: "no" }),
      want: (r) => assert.deepEqual(r["result"], { decision: "deny", reason: "no" }),
    },
    {
      name: "a thrown handler answers with an error",
      handler: () => {
        throw new Error("boom");
      },
      want: (r) => {
        assert.equal(r["result"], undefined);
        assert.match(String((r["error"] as Message)["message"]), /approval handler failed: boom/);
        assert.equal((r["error"] as Message)["code"], -32603);
      },
    },
    {
      name: "an invalid decision answers with an error naming it",
      handler: () => ({ decision: "maybe" }),
      want: (r) => assert.match(String((r["error"] as Message)["message"]), /decision "maybe"/),
    },
    {
      name: "no handler answers with an error",
      want: (r) => assert.match(String((r["error"] as Message)["message"]), /no approval handler/),
    },
  ];
  for (const c of approvalCases) {
    it(`approval.request: ${c.name}`, async () => {
      const peer = await setup();
      if (c.handler !== undefined) client!.onApprovalRequest(c.handler as never);
      peer.send({ jsonrpc: "2.0", id: "s1", method: "approval.request", params: approvalParams });
      const reply = await peer.next((m) => m["id"] === "s1");
      assert.equal(reply["method"], undefined);
      c.want(reply);
    });
  }

  it("close() sends the answer a handler is giving before it closes", async () => {
    const peer = await setup();
    let closing: Promise<void> | undefined;
    client!.onApprovalRequest(() => {
      // A program that quits as soon as the user has answered.
      closing = client!.close();
      return { decision: "allow" };
    });
    peer.send({ jsonrpc: "2.0", id: "s9", method: "approval.request", params: approvalParams });
    const reply = await peer.next((m) => m["id"] === "s9");
    assert.deepEqual(reply["result"], { decision: "allow" });
    await closing;
  });

  it("answers an unknown server request with method_not_found", async () => {
    const peer = await setup();
    peer.send({ jsonrpc: "2.0", id: "s7", method: "unknown.thing", params: {} });
    const reply = await peer.next((m) => m["id"] === "s7");
    assert.equal((reply["error"] as Message)["code"], -32601);
  });

  it("passes notifications to onNotification", async () => {
    const peer = await setup();
    const got = new Promise((resolve) => client!.onNotification("job.event", resolve));
    peer.send({ jsonrpc: "2.0", method: "job.event", params: { jobId: "j-1", kind: "started", payload: {} } });
    assert.deepEqual(await got, { jobId: "j-1", kind: "started", payload: {} });
  });

  it("with reconnect: false, a lost connection rejects pending calls, fails iterators and resolves closed", async () => {
    const peer = await setup({ reconnect: false });
    const it = client!.events("s-1");
    const call = client!.call("system.info");
    await peer.next();
    peer.socket.terminate();
    await assert.rejects(call, (e: unknown) => e instanceof TrellisConnectionError && /system\.info: .*lost before the answer/.test(e.message));
    await assert.rejects(it.next(), TrellisConnectionError);
    assert.ok((await client!.closed) instanceof TrellisConnectionError);
    await assert.rejects(client!.call("system.health"), TrellisConnectionError);
  });

  it("a Turn keeps its events from before the prompt's answer, and no other turn's", async () => {
    const peer = await setup();
    const turn = client!.session("s-1").prompt("hi", { whenBusy: "enqueue" });
    const req = await peer.next((m) => m["method"] === "session.prompt");
    assert.deepEqual({ ...(req["params"] as object), operationId: undefined }, { sessionId: "s-1", text: "hi", whenBusy: "enqueue", operationId: undefined });
    peer.send(event("s-1", 1)); // the running turn's, which this client saw no start of
    peer.send(event("s-1", 2, "turn.queued", { turnId: "t-2", position: 1, prompt: "hi" }));
    peer.send(event("s-1", 3, "turn.done", { turnId: "t-1", reason: "complete", synthetic: false, principal: null }));
    peer.send(event("s-1", 4, "turn.started", { turnId: "t-2", prompt: "hi", queued: true }));
    peer.send(event("s-1", 5, "message.done", { text: "answer", role: "assistant" }));
    await new Promise((r) => setTimeout(r, 50)); // the events arrive before the answer
    peer.send({ jsonrpc: "2.0", id: req["id"], result: { turnId: "t-2" } });
    peer.send(event("s-1", 6, "usage", { inputTokens: 10, outputTokens: 2, provider: "fake", model: "m" }));
    peer.send(event("s-1", 7, "error", { code: "internal", message: "oops" }));
    peer.send(event("s-1", 8, "turn.done", { turnId: "t-2", reason: "error", synthetic: false, principal: null }));
    peer.send(event("s-1", 9, "turn.started", { turnId: "t-3", prompt: "next", queued: false }));
    const seqs: number[] = [];
    for await (const e of turn) seqs.push(e.seq);
    assert.deepEqual(seqs, [2, 4, 5, 6, 7, 8]);
    assert.equal(await turn.turnId, "t-2");
    assert.deepEqual(await turn, { turnId: "t-2", reason: "error", text: "answer", usage: { inputTokens: 10, outputTokens: 2 }, errors: [{ code: "internal", message: "oops" }] });
    assert.throws(() => turn[Symbol.asyncIterator](), /iterated once/);
  });

  it("a refused prompt rejects its Turn's loop and result; a client closed mid-turn too", async () => {
    const peer = await setup();
    const session = client!.session("s-1");
    const refused = session.prompt("hi", { whenBusy: "reject" });
    const req = await peer.next((m) => m["method"] === "session.prompt");
    peer.send({ jsonrpc: "2.0", id: req["id"], error: { code: -32002, message: "busy", data: { code: "session_busy" } } });
    await assert.rejects(async () => {
      for await (const _ of refused) assert.fail("a refused prompt's turn gave an event");
    }, (e: unknown) => e instanceof TrellisError && e.code === "session_busy");
    await assert.rejects(refused.result, (e: unknown) => e instanceof TrellisError && e.code === "session_busy");

    const cut = session.prompt("hi");
    const cutReq = await peer.next((m) => m["method"] === "session.prompt");
    peer.send({ jsonrpc: "2.0", id: cutReq["id"], result: { turnId: "t-9" } });
    peer.send(event("s-1", 1, "turn.started", { turnId: "t-9", prompt: "hi", queued: false }));
    const it = cut[Symbol.asyncIterator]();
    assert.equal((await it.next()).value?.kind, "turn.started");
    await client!.close();
    await assert.rejects(it.next(), (e: unknown) => e instanceof TrellisConnectionError && /the client closed before the turn ended/.test(e.message));
    await assert.rejects(cut.result, TrellisConnectionError);
  });

  it("close() ends iterators and rejects later calls", async () => {
    await setup();
    const it = client!.events("s-1");
    const pending = it.next();
    await client!.close();
    assert.deepEqual(await pending, { value: undefined, done: true });
    assert.equal(await client!.closed, undefined);
    await assert.rejects(client!.call("system.health"), /closed/);
  });

  it("a refused hello rejects connect with the TrellisError", async () => {
    server = await startFakeServer((m) => ({
      jsonrpc: "2.0", id: m["id"],
      error: { code: -32000, message: "protocol 2.0.0 is not compatible with 1.0.0", data: { code: "protocol_incompatible" } },
    }));
    await assert.rejects(connect({ url: server.url, token: "t" }), (e: unknown) =>
      e instanceof TrellisError && e.code === "protocol_incompatible" && e.method === "system.hello");
  });

  it("an unreachable daemon rejects connect with a TrellisConnectionError that says so", async () => {
    const port = await freePort();
    await assert.rejects(connect({ url: `ws://127.0.0.1:${String(port)}/ws`, token: "t" }), (e: unknown) => {
      assert.ok(e instanceof TrellisConnectionError);
      assert.match(e.message, /cannot connect to ws:\/\/127\.0\.0\.1:\d+\/ws: .*ECONNREFUSED.*is the daemon running/);
      return true;
    });
  });

  it("a gap in seq is filled through session.resume from the last delivered seq, not waited on", async () => {
    const peer = await setup();
    const created = client!.call("session.create", { workdir: "/tmp" });
    await answer(peer, "session.create", { sessionId: "s-1" });
    await created;
    const it = client!.events("s-1");
    const next = take(it, 5);
    peer.send(event("s-1", 1));
    peer.send(event("s-1", 2));
    peer.send(event("s-1", 5)); // 3 and 4 were lost on the way
    const resume = await peer.next((m) => m["method"] === "session.resume");
    assert.deepEqual(resume["params"], { sessionId: "s-1", afterSeq: 2 });
    peer.send({ jsonrpc: "2.0", id: resume["id"], result: { sessionId: "s-1", mode: "accept", provider: "fake", model: "m", events: [3, 4, 5].map((n) => event("s-1", n)["params"]) } });
    assert.deepEqual(await next, [1, 2, 3, 4, 5]);
  });

  it("a gap the daemon cannot fill either is skipped and reported, not waited on forever", async () => {
    const errors: unknown[] = [];
    const peer = await setup({ onError: (e) => errors.push(e) });
    const created = client!.call("session.create", { workdir: "/tmp" });
    await answer(peer, "session.create", { sessionId: "s-1" });
    await created;
    const it = client!.events("s-1");
    const next = take(it, 2);
    peer.send(event("s-1", 1));
    peer.send(event("s-1", 3));
    const resume = await peer.next((m) => m["method"] === "session.resume");
    peer.send({ jsonrpc: "2.0", id: resume["id"], result: { sessionId: "s-1", mode: "accept", provider: "fake", model: "m", events: [] } });
    assert.deepEqual(await next, [1, 3]);
    assert.match(String(errors[0]), /the daemon has no events 2\.\.2/);
  });

  it("a call made while disconnected fails after offlineCallTimeoutMs saying the daemon is unreachable", async () => {
    const peer = await setup({ offlineCallTimeoutMs: 300, reconnect: { initialDelayMs: 50, maxDelayMs: 100 } });
    const states: string[] = [];
    client!.on("disconnected", () => states.push("disconnected"));
    client!.on("reconnecting", (e) => states.push(`reconnecting ${String(e.attempt)}`));
    const disconnected = new Promise((resolve) => client!.on("disconnected", resolve));
    await server!.close(); // stops listening too: every reconnect fails
    await disconnected;
    void peer;
    await assert.rejects(client!.call("system.health"), (e: unknown) => {
      assert.ok(e instanceof TrellisConnectionError);
      assert.match(e.message, /system\.health: the Trellis daemon is unreachable .*the call was not sent/);
      return true;
    });
    assert.equal(client!.state, "reconnecting");
    assert.deepEqual(states.slice(0, 2), ["disconnected", "reconnecting 1"]);
    server = undefined;
  });

  it("gives up after giveUpAfterMs: closed resolves with the error, iterators fail", async () => {
    await setup({ reconnect: { initialDelayMs: 20, maxDelayMs: 50, giveUpAfterMs: 200 } });
    const it = client!.events("s-1");
    await server!.close();
    server = undefined;
    const reason = await client!.closed;
    assert.ok(reason instanceof TrellisConnectionError);
    assert.match(reason.message, /the Trellis daemon is unreachable: no connection for \d+ ms/);
    await assert.rejects(it.next(), TrellisConnectionError);
    assert.equal(client!.state, "closed");
  });

  it("checks its options", async () => {
    await assert.rejects(connect({ url: "not a url", token: "t" }), /is not a URL/);
    await assert.rejects(connect({ url: "ftp://x/", token: "t" }), /must be ws:\/\/ or wss:\/\//);
    await assert.rejects(connect({ url: "ws://127.0.0.1:1/ws", token: "" }), /token is required/);
  });
});

// freePort returns a loopback port that nothing listens on (it was free a
// moment ago).
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
