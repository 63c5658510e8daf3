// Test helper: builds trellisd from this repository and runs it as a child
// process with a fresh home and a scripted fake model.

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { DaemonInfoError, readDaemonInfo, type DaemonInfo } from "../src/index.js";

const run = promisify(execFile);

/** The repository root (this file runs as sdk/dist/test/daemon.js). */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

/**
 * buildDaemon builds cmd/trellisd into dir and returns the binary's path;
 * $TRELLISD_BIN, when set, names a binary to use instead.
 */
export async function buildDaemon(dir: string): Promise<string> {
  const prebuilt = process.env["TRELLISD_BIN"];
  if (prebuilt !== undefined && prebuilt !== "") return prebuilt;
  const bin = join(dir, "trellisd");
  try {
    await run("go", ["build", "-o", bin, "./cmd/trellisd"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`go build ./cmd/trellisd failed: ${e.stderr ?? e.message}`);
  }
  return bin;
}

/**
 * writeTestCert writes a self-signed certificate for 127.0.0.1 and
 * localhost and its key (the Go tests' internal/testcert), for a daemon
 * that serves wss://.
 */
export async function writeTestCert(certFile: string, keyFile: string): Promise<void> {
  try {
    await run("go", ["run", "./internal/testcert/gen", certFile, keyFile], { cwd: repoRoot, maxBuffer: 16 << 20 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`go run ./internal/testcert/gen failed: ${e.stderr ?? e.message}`);
  }
}

/** A running daemon. */
export interface Daemon {
  /** Its home directory (fresh, temporary). */
  home: string;
  /** Its daemon.json, as readDaemonInfo returns it. */
  info: DaemonInfo;
  /** The child process. */
  proc: ChildProcess;
  /** Resolves with the exit code when the process exits. */
  exited: Promise<number | null>;
  /** What the daemon printed (logs on stderr), for failure messages. */
  output(): string;
  /** Stops the daemon if it still runs (SIGTERM, then SIGKILL) and removes its home. */
  stop(): Promise<void>;
  /** Kills the daemon with SIGKILL (no clean stop: daemon.json stays) and waits for it to exit; the home stays. */
  kill(): Promise<void>;
}

/** Options of startDaemon. */
export interface StartOptions {
  /** Reuse this home (a daemon killed earlier) instead of a fresh one; its script.json is used again. */
  home?: string;
  /** Extra flags for trellisd. */
  args?: string[];
}

/**
 * startDaemon runs bin with a fresh --home and `--provider fake:<script>`
 * and waits (bounded) until its daemon.json names it.
 */
export async function startDaemon(bin: string, script: unknown, opts: StartOptions = {}): Promise<Daemon> {
  const home = opts.home ?? await mkdtemp(join(tmpdir(), "trellis-sdk-home-"));
  const scriptPath = join(home, "script.json");
  if (opts.home === undefined) await writeFile(scriptPath, JSON.stringify(script), { mode: 0o600 });
  const proc = spawn(bin, ["--home", home, "--provider", `fake:${scriptPath}`, "--log-stderr", "--approval-timeout", "30s", ...(opts.args ?? [])], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const keep = (chunk: Buffer): void => {
    out = (out + chunk.toString("utf8")).slice(-20_000);
  };
  proc.stdout?.on("data", keep);
  proc.stderr?.on("data", keep);
  const exited = once(proc, "exit").then(([code]) => code as number | null);
  let gone = false;
  void exited.then(() => {
    gone = true;
  });

  const stop = async (): Promise<void> => {
    if (!gone && proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(home, { recursive: true, force: true });
  };
  const kill = async (): Promise<void> => {
    if (!gone && proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
  };

  // A bounded poll: daemon.json appears (written atomically) once both
  // listeners are bound.
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (gone) {
      await stop();
      throw new Error(`trellisd exited before writing daemon.json:\n${out}`);
    }
    try {
      const info = await readDaemonInfo(home);
      if (info.pid === proc.pid) {
        return { home, info, proc, exited, output: () => out, stop, kill };
      }
    } catch (err) {
      if (!(err instanceof DaemonInfoError)) throw err;
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`trellisd wrote no daemon.json within 30 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
