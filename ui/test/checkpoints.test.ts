// Checkpoints on the console's timeline, in Chromium against a real daemon
// (checkpoints are on by default; --checkpoint-max-file is lowered so that
// a small file is skipped as too large): a turn writes a file, its
// checkpoint rows show what they hold and skip, a row's diff shows the
// changed line, "Fork from here" lands on a new session whose workdir holds
// the file as of that checkpoint, "Rewind to here" puts the original's
// file back and marks the later turn rewound, "Restore files" puts a
// checkpoint's files back (and, when files changed outside the session,
// says which and restores only when asked again), and "Delete checkpoint"
// deletes it and takes its row off, for good.

import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { BrowserContext, Locator, Page } from "playwright-core";

import { buildTrellis, openBrowser, freePort, loginLink, rest, screenshotDir, startDaemon, type Daemon, tearDown } from "./harness.js";

const script = {
  steps: [
    { match: "write one", repeat: true, tool_calls: [{ name: "write_file", arguments: { path: "notes.txt", content: "first line\n" } }] },
    { match: "write two", repeat: true, tool_calls: [{ name: "write_file", arguments: { path: "notes.txt", content: "first line\nsecond line\n" } }] },
    { after_tool: "write_file", text: "Written.", repeat: true },
    { default: true, text: "ok" },
  ],
};

describe("checkpoints in the console", { timeout: 900_000 }, () => {
  let tmp: string;
  let home: string;
  let workdir: string;
  let bin: string;
  let daemon: Daemon;
  let context: BrowserContext;
  let page: Page;
  let original: string;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-ui-cp-"));
    home = join(tmp, "home");
    workdir = join(tmp, "work");
    await mkdir(home, { mode: 0o700 });
    await mkdir(workdir);
    await writeFile(join(workdir, ".gitignore"), "node_modules/\n");
    await mkdir(join(workdir, "node_modules"));
    await writeFile(join(workdir, "node_modules", "dep.js"), "module.exports = 1;\n");
    await writeFile(join(workdir, "big.bin"), Buffer.alloc(5 * 1024, 7));
    await mkdir(screenshotDir, { recursive: true });
    bin = await buildTrellis(tmp);
    daemon = await startDaemon(bin, home, await freePort(), script, ["--checkpoint-max-file", "4096"]);
    ({ context, page } = await openBrowser(tmp));
    await page.goto(await loginLink(bin, home));
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
  }, { timeout: 600_000 });

  after(() => tearDown(context, daemon, tmp));

  async function shot(name: string): Promise<void> {
    await page.screenshot({ path: join(screenshotDir, `${name}.png`), fullPage: true });
  }

  async function prompt(text: string, nth: number): Promise<Locator> {
    await page.getByLabel("Prompt").fill(text);
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").nth(nth);
    await turn.locator(".chip.done-complete").waitFor();
    return turn;
  }

  it("shows a turn's checkpoints with what they hold and skip", async () => {
    await page.getByLabel("Workdir").fill(workdir);
    await page.getByLabel("Mode").selectOption("auto");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    original = /#\/session\/(s-[0-9a-f]+)$/.exec(page.url())![1]!;
    const turn = await prompt("write one", 0);
    const rows = turn.locator("section.checkpoint");
    await rows.nth(1).waitFor();
    assert.equal(await rows.count(), 2, "one before the tool, one at the turn's end");
    const beforeTool = rows.nth(0);
    // Recorded after the tool.call and before the tool ran: shown inside the
    // tool's block, after its arguments and before its result.
    const tool = turn.locator(".tool-call").filter({ hasText: "write_file" });
    assert.equal(await tool.locator("section.checkpoint").count(), 1);
    assert.equal(await tool.locator("section.checkpoint").getAttribute("data-checkpoint-id"), await beforeTool.getAttribute("data-checkpoint-id"));
    const order = await tool.evaluate((el) => [...el.querySelectorAll("pre.args, section.checkpoint, pre.result")].map((e) => e.tagName === "SECTION" ? "checkpoint" : e.classList[0]));
    assert.deepEqual(order, ["args", "checkpoint", "result"]);
    assert.match(await beforeTool.locator(".cp-head").innerText(), /before a tool\s+write_file\s+1 file · 14 B/);
    assert.match(await rows.nth(1).locator(".cp-head").innerText(), /end of turn\s+2 files · 25 B/);
    // Skipped paths are listed, with why.
    const skipped = beforeTool.getByRole("list", { name: "Skipped paths" });
    assert.match(await skipped.innerText(), /node_modules\s+ignored/);
    assert.match(await skipped.innerText(), /big\.bin\s+too large, 5\.0 KiB/);
    await shot("checkpoints");
  });

  it("opens a checkpoint's diff from the previous one, and against the current files", async () => {
    const turn = await prompt("write two", 1);
    const rows = turn.locator("section.checkpoint");
    await rows.first().waitFor();
    // The state before this turn's tool equals the latest checkpoint: not recorded again.
    assert.equal(await rows.count(), 1);
    const row = rows.first();
    const toggle = row.getByRole("button", { name: "Diff" });
    assert.equal(await toggle.getAttribute("aria-expanded"), "false");
    await toggle.click();
    const diff = row.getByLabel("unified diff");
    await diff.locator(".d-add").filter({ hasText: "+second line" }).waitFor();
    assert.equal(await diff.locator(".d-del").count(), 0);
    assert.match(await row.getByRole("list", { name: "Changed paths" }).innerText(), /modified\s+notes\.txt/);
    assert.equal(await row.getByRole("button", { name: "Hide diff" }).getAttribute("aria-expanded"), "true");
    await shot("checkpoint-diff");
    // Against the current files: nothing changed since.
    await row.getByLabel("Diff", { exact: true }).selectOption("current");
    await row.getByRole("status").filter({ hasText: "No changes." }).waitFor();

    // The first checkpoint has no previous one: its diff is against the current files.
    const first = page.locator("article.turn").first().locator("section.checkpoint").first();
    await first.getByRole("button", { name: "Diff" }).click();
    const firstDiff = first.getByLabel("unified diff");
    await firstDiff.locator(".d-add").filter({ hasText: "+second line" }).waitFor();
    assert.match(await first.getByRole("list", { name: "Changed paths" }).innerText(), /added\s+notes\.txt/);
  });

  it("forks from a checkpoint: a new session whose workdir holds the files of that point", async () => {
    const row = page.locator("article.turn").first().locator("section.checkpoint").nth(1);
    await row.getByRole("button", { name: "Fork from here" }).click();
    await page.waitForURL((u) => /#\/session\/s-[0-9a-f]+$/.test(u.hash) && !u.hash.endsWith(original));
    const path = page.locator(".view-head .path");
    await path.filter({ hasText: ".fork-" }).waitFor();
    const forked = await path.innerText();
    assert.equal(await readFile(join(forked, "notes.txt"), "utf8"), "first line\n");
    // Its timeline is the original's up to the fork (one turn, cut inside it), then its own restore.
    await page.locator("section.checkpoint").filter({ hasText: "restored" }).waitFor();
    assert.equal(await page.locator("article.turn").count(), 1);
    await page.locator("article.turn .chip.done-cut").waitFor();
    assert.equal(await page.getByRole("button", { name: "Send" }).count(), 1, "the fork is idle");
    await shot("checkpoint-fork");
  });

  it("rewinds the original to a turn's end after a confirmation; the later turn is marked", async () => {
    await page.goBack();
    await page.waitForURL((u) => u.hash.endsWith(original));
    const first = page.locator("article.turn").first();
    await first.locator(".chip.done-complete").waitFor();
    await page.locator("article.turn").nth(1).locator(".chip.done-complete").waitFor();
    const foot = first.locator(".turn-foot");
    await foot.getByRole("button", { name: "Rewind to here…" }).click();
    const confirm = foot.getByRole("group", { name: "Confirm rewind" });
    await confirm.getByRole("button", { name: "Rewind", exact: true }).click();
    await page.locator("article.turn").nth(1).locator(".rewound-chip").waitFor();
    await page.locator(".rewound-note").waitFor();
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "first line\n");
    assert.equal(await first.locator(".rewound-chip").count(), 0);
  });

  it("shows the daemon's refusal to rewind over files changed outside the session, and rewinds anyway when asked", async () => {
    await writeFile(join(workdir, "notes.txt"), "edited by hand\n");
    const foot = page.locator("article.turn").first().locator(".turn-foot");
    await foot.getByRole("button", { name: "Rewind to here…" }).click();
    const confirm = foot.getByRole("group", { name: "Confirm rewind" });
    await confirm.getByRole("button", { name: "Rewind", exact: true }).click();
    await confirm.getByRole("alert").filter({ hasText: /notes\.txt/ }).waitFor();
    await confirm.getByLabel("files changed since the latest checkpoint").locator(".d-add").filter({ hasText: "+edited by hand" }).waitFor();
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "edited by hand\n", "nothing was changed");
    await shot("checkpoint-rewind-refused");
    await confirm.getByRole("button", { name: "Rewind anyway (lose those changes)" }).click();
    await confirm.waitFor({ state: "detached" });
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "first line\n");
  });

  it("says why a diff could not be loaded (its checkpoint was deleted)", async () => {
    const first = page.locator("article.turn").first().locator("section.checkpoint");
    const gone = await first.nth(0).getAttribute("data-checkpoint-id");
    await rest(daemon, "/v1/checkpoint/delete", { sessionId: original, checkpointId: gone });
    // The turn's end checkpoint diffs from the one deleted.
    const row = first.nth(1);
    await row.getByRole("button", { name: "Diff" }).click();
    await row.getByRole("alert").filter({ hasText: /The diff could not be loaded: .*not_found/ }).waitFor();
  });

  /** checkpointIds lists the session's checkpoints through the daemon's REST mapping (GET /v1/checkpoint/list). */
  async function checkpointIds(): Promise<string[]> {
    const r = await fetch(`http://127.0.0.1:${String(daemon.port)}/v1/checkpoint/list?sessionId=${original}`, { headers: { Authorization: `Bearer ${daemon.token}` } });
    const text = await r.text();
    assert.ok(r.ok, `GET /v1/checkpoint/list: HTTP ${String(r.status)}: ${text}`);
    return (JSON.parse(text) as { checkpoints: { checkpointId: string }[] }).checkpoints.map((c) => c.checkpointId);
  }

  /** restoredId is the checkpoint the first restore recorded (reason restore). */
  let restoredId: string;

  it("restores a checkpoint's files after a confirmation, recording the result", async () => {
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "first line\n");
    // The second turn's end: the file with its second line.
    const row = page.locator("article.turn").nth(1).locator("section.checkpoint").filter({ hasText: "end of turn" });
    const id = await row.getAttribute("data-checkpoint-id");
    await row.getByRole("button", { name: "Restore files…" }).click();
    const confirm = row.getByRole("group", { name: "Confirm restore" });
    await confirm.getByRole("button", { name: "Restore", exact: true }).click();
    await confirm.waitFor({ state: "detached" });
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "first line\nsecond line\n");
    // The daemon recorded the restored files as a checkpoint, announced on the timeline.
    const restored = page.locator("section.checkpoint").filter({ hasText: "restored" }).filter({ hasText: `from ${id!}` });
    await restored.waitFor();
    restoredId = (await restored.getAttribute("data-checkpoint-id"))!;
    assert.ok((await checkpointIds()).includes(restoredId));
    await shot("checkpoint-restored");
  });

  it("shows the daemon's refusal to restore over files changed outside the session, and restores anyway when asked", async () => {
    await writeFile(join(workdir, "notes.txt"), "edited again\n");
    const row = page.locator("article.turn").first().locator("section.checkpoint").filter({ hasText: "end of turn" });
    await row.getByRole("button", { name: "Restore files…" }).click();
    const confirm = row.getByRole("group", { name: "Confirm restore" });
    await confirm.getByRole("button", { name: "Restore", exact: true }).click();
    await confirm.getByRole("alert").filter({ hasText: /notes\.txt/ }).waitFor();
    await confirm.getByLabel("files changed since the latest checkpoint").locator(".d-add").filter({ hasText: "+edited again" }).waitFor();
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "edited again\n", "nothing was changed");
    await shot("checkpoint-restore-refused");
    await confirm.getByRole("button", { name: "Restore anyway (lose those changes)" }).click();
    await confirm.waitFor({ state: "detached" });
    assert.equal(await readFile(join(workdir, "notes.txt"), "utf8"), "first line\n");
    // Recorded: the rewind's restore of the same checkpoint, then this one.
    await page.locator("section.checkpoint").filter({ hasText: "restored" }).filter({ hasText: `from ${(await row.getAttribute("data-checkpoint-id"))!}` }).nth(1).waitFor();
  });

  it("deletes a checkpoint after a confirmation, from the keyboard: its row goes, and stays gone after a reload", async () => {
    const row = page.locator(`section.checkpoint[data-checkpoint-id="${restoredId}"]`);
    // The forced restore's checkpoint, recorded next: its diff starts from the one deleted.
    const next = page.locator("section.checkpoint").last();
    const nextId = (await next.getAttribute("data-checkpoint-id"))!;
    assert.notEqual(nextId, restoredId);
    await row.getByRole("button", { name: "Delete checkpoint…" }).press("Enter");
    const confirm = row.getByRole("group", { name: "Confirm checkpoint delete" });
    await confirm.getByRole("button", { name: "Delete checkpoint", exact: true }).press("Enter");
    await row.waitFor({ state: "detached" });
    assert.ok(!(await checkpointIds()).includes(restoredId), "the daemon deleted it");
    // The next one's diff now starts from the checkpoint before the deleted one (the rewind's, the same files).
    const diffs = async (): Promise<void> => {
      const at = page.locator(`section.checkpoint[data-checkpoint-id="${nextId}"]`);
      await at.getByRole("button", { name: "Diff" }).click();
      await at.getByRole("status").filter({ hasText: "No changes." }).waitFor();
      assert.equal(await at.getByRole("alert").count(), 0);
    };
    await diffs();
    // The log keeps the checkpoint's event; a new view leaves its row off all
    // the same, and the row of the one deleted through REST earlier too.
    const viaRest = (await page.locator("article.turn").first().locator("section.checkpoint").first().getAttribute("data-checkpoint-id"))!;
    await page.reload();
    await page.waitForFunction(([last, a, b]) => document.querySelector(`section.checkpoint[data-checkpoint-id="${last!}"]`) !== null
      && document.querySelector(`section.checkpoint[data-checkpoint-id="${a!}"]`) === null
      && document.querySelector(`section.checkpoint[data-checkpoint-id="${b!}"]`) === null, [nextId, restoredId, viaRest]);
    await diffs();
    await shot("checkpoint-deleted");
  });

  it("fits a phone-sized screen", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.locator("section.checkpoint").first().getByRole("button", { name: /Diff/ }).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `the page scrolls sideways by ${String(overflow)} px on a phone`);
    await shot("phone-checkpoints");
  });
});
