// Test harness of the console's browser tests: the `trellis` binary built
// from this repository runs the daemon (`trellis daemon`) on a fixed port
// with a scripted fake model, and prints login links (`trellis ui`); Debian's
// Chromium, driven by playwright-core, is the browser.

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { chromium, type BrowserContext, type Page } from "playwright-core";

const run = promisify(execFile);

/** The repository root (this file runs as ui/test-dist/test/harness.js). */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

/** Where the screenshots go (CI keeps them as artifacts). */
export const screenshotDir = fileURLToPath(new URL("../../test/screenshots/", import.meta.url));

/** The Chromium flags of a hermetic headless run. */
export const chromiumFlags = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

/** chromiumPath is Debian's Chromium, or $CHROMIUM. */
export const chromiumPath = process.env["CHROMIUM"] ?? "/usr/bin/chromium";

/** buildTrellis builds cmd/trellis into dir ($TRELLIS_BIN names a binary to use instead). */
export async function buildTrellis(dir: string): Promise<string> {
  const prebuilt = process.env["TRELLIS_BIN"];
  if (prebuilt !== undefined && prebuilt !== "") return prebuilt;
  const bin = join(dir, "trellis");
  try {
    await run("go", ["build", "-o", bin, "./cmd/trellis"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`go build ./cmd/trellis failed: ${e.stderr ?? e.message}`);
  }
  return bin;
}

/** WAIT bounds each browser wait: generous, as the machine may be busy; nothing here waits on a clock. */
export const WAIT = 60_000;

/**
 * openBrowser launches Debian's Chromium (headless, hermetic, with extra
 * flags args) on a fresh profile in dir and returns its context and first
 * page, whose waits are bounded by WAIT.
 */
export async function openBrowser(dir: string, args: string[] = []): Promise<{ context: BrowserContext; page: Page }> {
  const context = await chromium.launchPersistentContext(join(dir, "profile"), {
    executablePath: chromiumPath,
    headless: true,
    args: [...chromiumFlags, ...args],
    viewport: { width: 1280, height: 860 },
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(WAIT);
  return { context, page };
}

/** freePort returns a loopback port nothing listened on a moment ago. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** A running daemon. */
export interface Daemon {
  proc: ChildProcess;
  port: number;
  token: string;
  output(): string;
  /** SIGKILL: no clean stop, the home keeps daemon.json. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after 10 s. */
  stop(): Promise<void>;
}

/**
 * startDaemon runs `trellis daemon` for home on port (with extra flags args)
 * and waits (bounded) until its daemon.json names it.
 */
export async function startDaemon(bin: string, home: string, port: number, script: unknown, args: string[] = []): Promise<Daemon> {
  const scriptPath = join(home, "script.json");
  await writeFile(scriptPath, JSON.stringify(script), { mode: 0o600 });
  const proc = spawn(bin, ["daemon", "--home", home, "--provider", `fake:${scriptPath}`, "--port", String(port),
    "--log-stderr", "--approval-timeout", "120s", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  const keep = (chunk: Buffer): void => {
    out = (out + chunk.toString("utf8")).slice(-20_000);
  };
  proc.stdout?.on("data", keep);
  proc.stderr?.on("data", keep);
  const exited = once(proc, "exit");
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  const kill = async (): Promise<void> => {
    if (!gone) proc.kill("SIGKILL");
    await exited;
  };
  const stop = async (): Promise<void> => {
    if (gone) return;
    proc.kill("SIGTERM");
    const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(t);
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (gone) throw new Error(`trellis daemon exited before writing daemon.json:\n${out}`);
    try {
      const info = JSON.parse(await readFile(join(home, "daemon.json"), "utf8")) as { pid: number; port: number; token: string };
      if (info.pid === proc.pid) return { proc, port: info.port, token: info.token, output: () => out, kill, stop };
    } catch {
      // not written yet
    }
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`trellis daemon wrote no daemon.json within 60 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * writeTestCert writes a self-signed certificate for 127.0.0.1 and
 * localhost and its key (the Go tests' internal/testcert), for a daemon
 * that serves https:// and wss://.
 */
export async function writeTestCert(certFile: string, keyFile: string): Promise<void> {
  try {
    await run("go", ["run", "./internal/testcert/gen", certFile, keyFile], { cwd: repoRoot, maxBuffer: 16 << 20 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`go run ./internal/testcert/gen failed: ${e.stderr ?? e.message}`);
  }
}

/** loginLink runs `trellis ui --no-open` and returns the link it prints. */
export async function loginLink(bin: string, home: string): Promise<string> {
  const { stdout } = await run(bin, ["--home", home, "ui", "--no-open"], { timeout: 60_000 });
  return stdout.trim();
}

/** rest calls the daemon's REST mapping with the token, or with key when given. */
export async function rest(d: Daemon, path: string, body: unknown, key?: string): Promise<unknown> {
  const r = await fetch(`http://127.0.0.1:${String(d.port)}${path}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key ?? d.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`POST ${path}: HTTP ${String(r.status)}: ${text}`);
  return JSON.parse(text) as unknown;
}

/**
 * tearDown ends a test file's browser context and daemon (printing the
 * daemon's output first when TRELLIS_UI_TEST_LOGS=1) and removes its
 * temporary directory; any of them may be missing (a before that failed).
 */
export async function tearDown(context: BrowserContext | undefined, daemon: Daemon | undefined, tmp: string | undefined): Promise<void> {
  await context?.close();
  if (daemon !== undefined && process.env["TRELLIS_UI_TEST_LOGS"] === "1") console.error(daemon.output());
  await daemon?.stop();
  if (tmp !== undefined) await rm(tmp, { recursive: true, force: true });
}
