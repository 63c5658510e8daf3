// The web console for a team: a member logs in on the login page with an
// API key (no `trellis ui` link), the header names who is logged in, and
// the transcript names who sent each prompt.

import assert from "node:assert/strict";
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { BrowserContext, Page } from "playwright-core";

import { buildTrellis, openBrowser, freePort, rest, screenshotDir, startDaemon, type Daemon, tearDown } from "./harness.js";

const script = { steps: [{ default: true, text: "Hello ann, from the scripted model." }] };


describe("the web console with an API key", { timeout: 600_000 }, () => {
  let tmp: string;
  let workdir: string;
  let daemon: Daemon;
  let context: BrowserContext;
  let page: Page;
  let base: string;
  let key: string;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-ui-key-"));
    const home = join(tmp, "home");
    workdir = join(tmp, "work");
    await mkdir(home, { mode: 0o700 });
    await mkdir(workdir);
    await mkdir(screenshotDir, { recursive: true });
    const bin = await buildTrellis(tmp);
    const port = await freePort();
    daemon = await startDaemon(bin, home, port, script);
    base = `http://127.0.0.1:${String(port)}`;
    const created = await rest(daemon, "/v1/principal/create", { name: "ann", role: "member" }) as { principal: { principalId: string } };
    const made = await rest(daemon, "/v1/key/create", { principalId: created.principal.principalId, name: "console" }) as { secret: string };
    key = made.secret;
    ({ context, page } = await openBrowser(tmp));
  }, { timeout: 600_000 });

  after(() => tearDown(context, daemon, tmp));

  it("refuses an unknown key with the daemon's reason, and logs in with a member's key", async () => {
    await page.goto(`${base}/ui/`);
    await page.getByLabel("API key").fill("trk_not-a-key");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("alert").filter({ hasText: "this API key is not accepted" }).waitFor();

    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    await page.locator(".whoami").filter({ hasText: "ann" }).filter({ hasText: "member" }).waitFor();
    assert.ok(!page.url().includes(key), "the key is not in the URL");
  });

  it("names who sent each prompt", async () => {
    await page.getByLabel("Workdir").fill(workdir);
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    await page.getByLabel("Prompt").fill("hello");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").first();
    await turn.locator(".text").filter({ hasText: "Hello ann, from the scripted model." }).waitFor();
    await turn.locator(".user .who").filter({ hasText: "ann" }).waitFor();
    await page.screenshot({ path: join(screenshotDir, "key-login-session.png"), fullPage: true });
  });

  it("lists only ann's own jobs, naming her as their owner", async () => {
    await rest(daemon, "/v1/job/schedule", { spec: "@every 1h", task: "the admins' job", mode: "accept", workdir });
    await rest(daemon, "/v1/job/schedule", { spec: "@every 2h", task: "ann's job", mode: "accept", workdir }, key);
    await page.getByRole("link", { name: "Jobs" }).click();
    const job = page.locator("article.job").filter({ hasText: "ann's job" });
    await job.locator(".owner").filter({ hasText: "ann" }).waitFor();
    assert.equal(await page.locator("article.job").count(), 1, "ann sees her job only");
    await page.screenshot({ path: join(screenshotDir, "key-login-jobs.png"), fullPage: true });
  });
});
