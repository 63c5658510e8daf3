// The SDK across daemon failures, against a real trellisd: a daemon killed
// with SIGKILL mid-turn and started again on a new port, and a consumer that
// stops reading for seconds during a long turn. The app must see every event
// once, in order.

import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { connect, type ClientEvents, type SessionEvent, type TrellisClient } from "../src/index.js";
import { buildDaemon, startDaemon, writeTestCert, type Daemon } from "./daemon.js";

function words(n: number): string {
  return Array.from({ length: n }, (_, i) => `w${String(i)}`).join(" ");
}

// The fake model streams 3 words per delta.
const SLOW_WORDS = 900; // 300 deltas over 12 s: a turn the test can kill in the middle
const LONG_WORDS = 60_000; // 20,000 chunks as fast as the daemon goes (it may merge them into fewer deltas)

const script = {
  steps: [
    { match: "slow", text: words(SLOW_WORDS), delaySec: 12 },
    { match: "long", text: words(LONG_WORDS) },
    { default: true, text: "ok" },
  ],
};

/** Collects events from it until turn.done, calling onEvent after each. */
type TurnDone = Extract<SessionEvent, { kind: "turn.done" }>;

async function untilTurnDone(it: AsyncIterator<SessionEvent>, got: SessionEvent[], onEvent: (ev: SessionEvent) => Promise<void> | void = () => {}): Promise<TurnDone> {
  for (;;) {
    const r = await it.next();
    assert.ok(!r.done, `the event stream ended before turn.done after seq ${String(got.at(-1)?.seq)}`);
    got.push(r.value);
    await onEvent(r.value);
    if (r.value.kind === "turn.done") return r.value;
  }
}

function assertSameEvents(got: readonly SessionEvent[], stored: readonly SessionEvent[]): void {
  assert.equal(got.length, stored.length, `the app got ${String(got.length)} events; the daemon stored ${String(stored.length)}`);
  for (let i = 0; i < got.length; i++) {
    assert.equal(got[i]!.seq, i + 1, `event #${String(i)} has seq ${String(got[i]!.seq)}`);
    assert.deepEqual({ seq: got[i]!.seq, kind: got[i]!.kind, payload: got[i]!.payload },
      { seq: stored[i]!.seq, kind: stored[i]!.kind, payload: stored[i]!.payload });
  }
}

describe("@trellis/sdk across daemon restarts and slow consumers", { timeout: 1_200_000 }, () => {
  let tmp: string;
  let workdir: string;
  let bin: string;
  const daemons: Daemon[] = [];

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-sdk-reconnect-"));
    workdir = join(tmp, "work");
    await mkdir(workdir);
    bin = await buildDaemon(tmp);
  }, { timeout: 600_000 });

  after(async () => {
    for (const d of daemons) {
      if (process.env["TRELLIS_SDK_TEST_LOGS"] === "1") console.error(`trellisd output:\n${d.output()}`);
      await d.stop();
    }
    await rm(tmp, { recursive: true, force: true });
  });

  // killAndRestart: a daemon started with args is killed with SIGKILL in
  // the middle of a turn and started again (same home, same args) on a new
  // port; the app sees every event once, in order.
  async function killAndRestart(args: string[], scheme: "ws:" | "wss:"): Promise<void> {
    const first = await startDaemon(bin, script, { args });
    assert.equal(new URL(first.info.url).protocol, scheme, `daemon.json's address ${first.info.url}`);
    daemons.push(first);
    const lifecycle: string[] = [];
    const client: TrellisClient = await connect({
      home: first.home, // re-read daemon.json on reconnect: the new daemon has another port
      reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
      offlineCallTimeoutMs: 120_000,
      onError: () => {},
    });
    try {
      const reconnected = new Promise<ClientEvents["reconnected"]>((resolve) => client.on("reconnected", resolve));
      const disconnected = new Promise((resolve) => client.on("disconnected", resolve));
      client.on("disconnected", () => lifecycle.push("disconnected"));
      client.on("reconnecting", () => lifecycle.push("reconnecting"));
      client.on("reconnected", () => lifecycle.push("reconnected"));

      const { sessionId } = await client.call("session.create", { workdir });
      const it = client.events(sessionId);
      await client.call("session.prompt", { sessionId, text: "slow" });
      const got: SessionEvent[] = [];
      let deltas = 0;
      let during: Promise<unknown> | undefined;
      let second: Daemon | undefined;
      const done = await untilTurnDone(it, got, async (ev) => {
        if (ev.kind !== "message.delta" || ++deltas !== 20) return;
        // Mid-turn: kill the daemon, make a call while it is down, start it again.
        await first.kill();
        await disconnected;
        during = client.call("session.list", {});
        second = await startDaemon(bin, undefined, { home: first.home, args });
        daemons.push(second);
      });
      assert.ok(second !== undefined, "the turn ended before the daemon was killed");
      assert.notEqual(second.info.port, first.info.port, "the restarted daemon listens on a new port");
      assert.equal((await reconnected).url, second.info.url);
      const listed = await during as { sessions: { sessionId: string }[] };
      assert.ok(listed.sessions.some((s) => s.sessionId === sessionId), "the call made during the outage was answered by the new daemon");

      assert.equal(done.payload.reason, "interrupted", `turn.done: ${JSON.stringify(done.payload)}`);
      const stored = (await client.call("session.resume", { sessionId, afterSeq: 0 })).events;
      assertSameEvents(got, stored);
      assert.equal(lifecycle[0], "disconnected");
      assert.equal(lifecycle.at(-1), "reconnected");

      // The client goes on working on the new daemon.
      const next = await client.call("session.prompt", { sessionId, text: "hi" });
      const more: SessionEvent[] = [];
      const d2 = await untilTurnDone(it, more);
      assert.equal(d2.payload.turnId, next.turnId);
      assert.equal(d2.payload.reason, "complete");
      assert.equal(more[0]!.seq, got.at(-1)!.seq + 1);
    } finally {
      await client.close();
    }
  }

  it("kill -9 and restart on a new port mid-turn: every event once, in order; a call made during the outage resolves after the restart", { timeout: 180_000 }, async () => {
    await killAndRestart([], "ws:");
  });

  it("the same over wss://, trusting the daemon's certificate from daemon.json", { timeout: 240_000 }, async () => {
    const cert = join(tmp, "tls-cert.pem");
    const key = join(tmp, "tls-key.pem");
    await writeTestCert(cert, key);
    await killAndRestart(["--tls-cert", cert, "--tls-key", key], "wss:");
  });

  it("a consumer that pauses 2 s during a 20,000-chunk turn, 10 times, receives the whole text", { timeout: 1_000_000 }, async () => {
    const daemon = await startDaemon(bin, script);
    daemons.push(daemon);
    // A small queue bound, so that the pause stops reading the socket (the
    // daemon then holds this connection's stream back) rather than buffering.
    const client = await connect({ home: daemon.home, maxQueuedEvents: 1_000, onError: () => {} });
    try {
      const { sessionId } = await client.call("session.create", { workdir });
      const it = client.events(sessionId);
      const want = words(LONG_WORDS);
      for (let run = 1; run <= 10; run++) {
        const { turnId } = await client.call("session.prompt", { sessionId, text: "long" });
        const got: SessionEvent[] = [];
        let text = "";
        let paused = false;
        const done = await untilTurnDone(it, got, async (ev) => {
          if (ev.kind !== "message.delta") return;
          text += (ev.payload as { text: string }).text;
          if (!paused && text.length >= want.length / 10) {
            paused = true;
            await sleep(2_000); // the consumer stops reading for 2 s
          }
        });
        assert.equal(done.payload.turnId, turnId);
        assert.equal(done.payload.reason, "complete", `run ${String(run)}: ${JSON.stringify(done.payload)}`);
        assert.ok(paused, `run ${String(run)}: the consumer paused`);
        assert.equal(text, want, `run ${String(run)}: the text is whole`);
        for (let i = 1; i < got.length; i++) assert.equal(got[i]!.seq, got[i - 1]!.seq + 1, `run ${String(run)}: seqs are contiguous`);
      }
    } finally {
      await client.close();
    }
  });
});
