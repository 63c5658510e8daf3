// The SDK as a user installs it: into fresh npm projects, from `npm pack`'s
// tarball and from the folder, then a script of the project's own runs two
// turns with session.prompt against a real trellisd. Offline: the SDK's one
// runtime dependency, ws, comes from the copy `npm ci` installed here (the
// version package-lock.json pins), packed as a tarball, instead of the
// registry.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { lstat, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";

import { buildDaemon, startDaemon, type Daemon } from "./daemon.js";

const run = promisify(execFile);

/** The SDK's folder (this file runs as sdk/dist/test/install.test.js). */
const sdkDir = fileURLToPath(new URL("../../", import.meta.url));

// The child npm and node get none of the npm_* variables of the `npm test`
// running this file (npm_config_local_prefix would point them at sdk/).
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith("npm_")));

async function sh(cmd: string, args: string[], cwd: string, extraEnv: Record<string, string> = {}): Promise<string> {
  try {
    const { stdout } = await run(cmd, args, { cwd, env: { ...env, ...extraEnv }, maxBuffer: 16 << 20 });
    return stdout;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} (in ${cwd}) failed: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`);
  }
}

/** The user's script: two turns, each loop over its own turn, in one process. */
const userScript = `
import { connect } from "@trellis/sdk";

const client = await connect({ url: process.env.TRELLIS_URL, token: process.env.TRELLIS_TOKEN });
const session = await client.createSession({ workdir: process.cwd() });
const turns = [];
for (const text of ["hello", "something else"]) {
  const turn = session.prompt(text);
  const kinds = [];
  for await (const ev of turn) kinds.push(ev.kind);
  const { turnId, reason, text: answer } = await turn;
  turns.push({ turnId, reason, answer, first: kinds[0], last: kinds[kinds.length - 1] });
}
await client.close();
console.log(JSON.stringify(turns));
`;

describe("@trellis/sdk installed into fresh npm projects", { timeout: 900_000 }, () => {
  let tmp: string;
  let daemon: Daemon;
  let wsTarball: string;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-sdk-install-"));
    const bin = await buildDaemon(tmp);
    daemon = await startDaemon(bin, { steps: [{ match: "hello", text: "Hello there" }, { default: true, text: "ok" }] });
    const packed = JSON.parse(await sh("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", tmp, join(sdkDir, "node_modules", "ws")], tmp)) as { filename: string }[];
    wsTarball = join(tmp, packed[0]!.filename);
  }, { timeout: 600_000 });

  after(async () => {
    await daemon?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  // project makes a fresh npm project, installs what, and checks that the
  // SDK landed as a package (not a link) with its built files.
  async function project(name: string, install: string[]): Promise<string> {
    const dir = join(tmp, name);
    await mkdir(dir);
    await writeFile(join(dir, "package.json"), JSON.stringify({ name, version: "1.0.0", private: true, type: "module" }));
    await sh("npm", ["install", "--offline", "--no-audit", "--no-fund", wsTarball, ...install], dir);
    const installed = join(dir, "node_modules", "@trellis", "sdk");
    assert.ok(!(await lstat(installed)).isSymbolicLink(), `${installed} is a link`);
    assert.deepEqual((await readdir(installed)).sort(), ["LICENSE", "README.md", "lib", "package.json"]);
    await writeFile(join(dir, "main.js"), userScript);
    return dir;
  }

  async function packSdk(): Promise<string> {
    const packed = JSON.parse(await sh("npm", ["pack", "--json", "--pack-destination", tmp], sdkDir)) as { filename: string }[];
    return join(tmp, packed[0]!.filename);
  }

  async function twoTurns(dir: string): Promise<void> {
    const out = await sh("node", ["main.js"], dir, { TRELLIS_URL: daemon.info.url, TRELLIS_TOKEN: daemon.info.token });
    const turns = JSON.parse(out) as { turnId: string; reason: string; answer: string; first: string; last: string }[];
    assert.equal(turns.length, 2);
    assert.notEqual(turns[0]!.turnId, turns[1]!.turnId);
    assert.deepEqual(turns.map(({ reason, answer, first, last }) => ({ reason, answer, first, last })), [
      { reason: "complete", answer: "Hello there", first: "turn.started", last: "turn.done" },
      { reason: "complete", answer: "ok", first: "turn.started", last: "turn.done" },
    ]);
  }

  it("from npm pack's tarball", { timeout: 120_000 }, async () => {
    await twoTurns(await project("from-tarball", [await packSdk()]));
  });

  it("from the folder (--install-links: installed as a package, with its dependencies)", { timeout: 120_000 }, async () => {
    await twoTurns(await project("from-folder", ["--install-links", sdkDir]));
  });

  it("from a folder npm only links (no dependencies installed): connect says how to install it", { timeout: 120_000 }, async () => {
    // A folder like a fresh checkout's sdk/: the built files, no node_modules.
    const folder = join(tmp, "checkout");
    await mkdir(folder);
    await sh("tar", ["-xzf", await packSdk(), "-C", folder, "--strip-components=1"], tmp);
    const dir = join(tmp, "linked");
    await mkdir(dir);
    await writeFile(join(dir, "package.json"), JSON.stringify({ name: "linked", version: "1.0.0", private: true, type: "module" }));
    await sh("npm", ["install", "--offline", "--no-audit", "--no-fund", folder], dir);
    assert.ok((await lstat(join(dir, "node_modules", "@trellis", "sdk"))).isSymbolicLink());
    await writeFile(join(dir, "main.js"), `
import { connect } from "@trellis/sdk";
await connect({ url: process.env.TRELLIS_URL, token: process.env.TRELLIS_TOKEN }).then(
  () => console.log("connected"), (err) => console.log(err.message));
`);
    const out = await sh("node", ["main.js"], dir, { TRELLIS_URL: daemon.info.url, TRELLIS_TOKEN: daemon.info.token });
    assert.match(out, /needs its dependency ws, which is not installed: npm links a folder .* `npm install --install-links PATH`/);
  });
});
