// readDaemonInfo: finding the daemon through daemon.json.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { connect, DaemonInfoError, readDaemonInfo } from "../src/index.js";

describe("readDaemonInfo", () => {
  let home: string;
  let gonePid: number;

  before(async () => {
    home = await mkdtemp(join(tmpdir(), "trellis-sdk-info-"));
    // A pid that has exited: a short-lived child's.
    const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
    await once(child, "exit");
    gonePid = child.pid!;
  });
  after(async () => {
    await rm(home, { recursive: true, force: true });
  });

  const info = (over: Record<string, unknown> = {}): string => JSON.stringify({
    port: 4321, grpcPort: 4322, pid: process.pid, token: "tok", startedAt: "2026-01-01T00:00:00.000Z",
    protocolVersion: "1.0.0", version: "dev", ...over,
  });

  it("returns the URL and token of a running daemon", async () => {
    await writeFile(join(home, "daemon.json"), info());
    const got = await readDaemonInfo(home);
    assert.deepEqual(got, {
      url: "ws://127.0.0.1:4321/ws", tls: false, token: "tok", port: 4321, grpcPort: 4322, pid: process.pid,
      startedAt: "2026-01-01T00:00:00.000Z", protocolVersion: "1.0.0", version: "dev", home,
    });
  });

  it("returns a wss:// URL and the certificate file of a daemon that serves TLS", async () => {
    await writeFile(join(home, "daemon.json"), info({ tls: true, tlsCert: "/etc/trellis/cert.pem" }));
    const got = await readDaemonInfo(home);
    assert.equal(got.url, "wss://127.0.0.1:4321/ws");
    assert.equal(got.tls, true);
    assert.equal(got.tlsCert, "/etc/trellis/cert.pem");
  });

  it("connect through a home fails clearly when the daemon's certificate cannot be read", async () => {
    const missing = join(home, "no-such-cert.pem");
    await writeFile(join(home, "daemon.json"), info({ tls: true, tlsCert: missing }));
    await assert.rejects(connect({ home }), (err: unknown) => err instanceof DaemonInfoError && err.reason === "invalid" &&
      err.message.includes(`cannot read the daemon's certificate ${missing}`));
  });

  it("uses $TRELLIS_HOME when no home is given", async () => {
    await writeFile(join(home, "daemon.json"), info());
    const saved = process.env["TRELLIS_HOME"];
    process.env["TRELLIS_HOME"] = home;
    try {
      assert.equal((await readDaemonInfo()).home, home);
    } finally {
      if (saved === undefined) delete process.env["TRELLIS_HOME"];
      else process.env["TRELLIS_HOME"] = saved;
    }
  });

  const failures: { name: string; content?: string; reason: DaemonInfoError["reason"]; message: RegExp }[] = [
    { name: "missing", reason: "missing", message: /no Trellis daemon is running for .*daemon\.json does not exist/ },
    { name: "stale pid", content: "STALE", reason: "stale", message: /names process \d+, which is gone/ },
    { name: "not JSON", content: "{", reason: "invalid", message: /is not valid JSON/ },
    { name: "bad fields", content: info({ port: "x", token: "" }), reason: "invalid", message: /"port" must be a port number.*"token" must be a non-empty string/ },
  ];
  for (const f of failures) {
    it(`fails clearly: ${f.name}`, async () => {
      const dir = await mkdtemp(join(home, "case-"));
      if (f.content !== undefined) {
        await writeFile(join(dir, "daemon.json"), f.content === "STALE" ? info({ pid: gonePid }) : f.content);
      }
      await assert.rejects(readDaemonInfo(dir), (e: unknown) => {
        assert.ok(e instanceof DaemonInfoError, String(e));
        assert.equal(e.reason, f.reason);
        assert.equal(e.path, join(dir, "daemon.json"));
        assert.match(e.message, f.message);
        return true;
      });
    });
  }
});
