// The web console over TLS: a daemon started with --tls-cert serves the
// console on https://, `trellis ui` prints an https:// login link, and the
// page talks to the daemon over wss://. Chromium trusts exactly the
// daemon's key (--ignore-certificate-errors-spki-list), as a browser that
// was told to trust the daemon's certificate would.

import assert from "node:assert/strict";
import { createHash, X509Certificate } from "node:crypto";
import { mkdir, mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { BrowserContext, Page } from "playwright-core";

import { buildTrellis, openBrowser, freePort, loginLink, screenshotDir, startDaemon, writeTestCert, type Daemon, tearDown } from "./harness.js";

const script = { steps: [{ default: true, text: "Hello over TLS, from the scripted model." }] };


describe("the web console over https:// and wss://", { timeout: 600_000 }, () => {
  let tmp: string;
  let home: string;
  let workdir: string;
  let bin: string;
  let port: number;
  let daemon: Daemon;
  let context: BrowserContext;
  let page: Page;
  const sockets: string[] = [];

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-ui-tls-"));
    home = join(tmp, "home");
    workdir = join(tmp, "work");
    await mkdir(home, { mode: 0o700 });
    await mkdir(workdir);
    await mkdir(screenshotDir, { recursive: true });
    const cert = join(tmp, "cert.pem");
    const key = join(tmp, "key.pem");
    await writeTestCert(cert, key);
    // The SHA-256 of the certificate's public key, as Chromium pins it.
    const spki = new X509Certificate(await readFile(cert)).publicKey.export({ type: "spki", format: "der" });
    const pin = createHash("sha256").update(spki).digest("base64");
    bin = await buildTrellis(tmp);
    port = await freePort();
    daemon = await startDaemon(bin, home, port, script, ["--tls-cert", cert, "--tls-key", key]);
    ({ context, page } = await openBrowser(tmp, [`--ignore-certificate-errors-spki-list=${pin}`]));
    page.on("websocket", (ws) => sockets.push(ws.url()));
  }, { timeout: 600_000 });

  after(() => tearDown(context, daemon, tmp));

  it("logs in with an https:// link and streams an answer over wss://", async () => {
    const link = await loginLink(bin, home);
    assert.match(link, new RegExp(`^https://127\\.0\\.0\\.1:${String(port)}/ui/#login=[\\w-]+$`));
    await page.goto(link);
    await page.getByRole("heading", { name: "Sessions" }).waitFor();

    await page.getByLabel("Workdir").fill(workdir);
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    await page.getByLabel("Prompt").fill("hello");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").first();
    await turn.locator(".text").filter({ hasText: "Hello over TLS, from the scripted model." }).waitFor();
    await turn.locator(".chip.done-complete").waitFor();
    await page.screenshot({ path: join(screenshotDir, "tls-session.png"), fullPage: true });

    assert.ok(sockets.length > 0, "the page opened no WebSocket");
    for (const url of sockets) assert.match(url, new RegExp(`^wss://127\\.0\\.0\\.1:${String(port)}/`), `the page's WebSocket ${url}`);
  });
});
