// The web console in a real browser (Debian's Chromium, headless, driven by
// playwright-core) against a real daemon: log in with `trellis ui`'s link,
// create a session, prompt the scripted model and see the streamed answer,
// approve a tool call and see its result, kill the daemon mid-turn and start
// it again, and see the page resume with the interrupted turn and no
// duplicated text. Screenshots of each view go to ui/test/screenshots/.

import assert from "node:assert/strict";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { BrowserContext, Page } from "playwright-core";

import { buildTrellis, openBrowser, freePort, loginLink, rest, screenshotDir, startDaemon, type Daemon, tearDown } from "./harness.js";

function words(n: number): string {
  return Array.from({ length: n }, (_, i) => `w${String(i)}`).join(" ");
}

const SLOW_TEXT = words(600); // 200 deltas over 20 s: a turn to kill in the middle

// Markdown with the XSS corpus: raw HTML with an event handler, a raw
// script, javascript: links (markdown and HTML), and a remote image. Each
// probe would set window.__xss if it ran.
const MARKDOWN = [
  "# The plan",
  "",
  "Some **bold** words, `inline code`, a [docs link](https://example.com/docs) and a list:",
  "",
  "- first",
  "- second",
  "",
  "```go",
  "func main() { fmt.Println(\"hi\") }",
  "```",
  "",
  "<img src=x onerror=\"window.__xss = 'img'\">",
  "",
  "<script>window.__xss = 'script'</script>",
  "",
  "[click me](javascript:window.__xss='md-link') and <a href=\"javascript:window.__xss='a'\">raw link</a>",
  "",
  "![a picture](https://example.com/pic.png)",
].join("\n");

// What the read_file tool returns: the same probes, as a file's text.
const PROBE_FILE = "<script>window.__xss = 'tool-script'</script>\n<img src=x onerror=\"window.__xss = 'tool-img'\">\n";

const script = {
  steps: [
    { match: "hello", text: "Hello there, this is the scripted model answering." },
    { match: "run ls", tool_calls: [{ name: "shell", arguments: { command: "ls" } }] },
    { after_tool: "shell", text: "The listing is done." },
    { match: "slow", text: SLOW_TEXT, delaySec: 20 },
    {
      match: "ask me",
      tool_calls: [{ name: "ask_user", arguments: { questions: [{ question: "Which colour?", options: [{ label: "Blue" }, { label: "Green", description: "calmer" }] }] } }],
    },
    { after_tool: "ask_user", text: "Thanks for the answer." },
    { match: "markdown please", text: MARKDOWN },
    { match: "timed please", text: "That took a while.", delaySec: 1.5, usage: { input: 1200, output: 340 }, reasoningTokens: 40 },
    { match: "read the long file", tool_calls: [{ name: "read_file", arguments: { path: "long.txt" } }] },
    { after_tool: "read_file", match: "long file", text: "That was long." },
    { match: "read the probe", tool_calls: [{ name: "read_file", arguments: { path: "probe.html" } }] },
    { after_tool: "read_file", text: "I read the **probe**." },
    { default: true, text: "ok" },
  ],
};


describe("the web console in Chromium", { timeout: 900_000 }, () => {
  let tmp: string;
  let home: string;
  let workdir: string;
  let bin: string;
  let port: number;
  let daemon: Daemon;
  let context: BrowserContext;
  let page: Page;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "trellis-ui-"));
    home = join(tmp, "home");
    workdir = join(tmp, "work");
    await mkdir(home, { mode: 0o700 });
    await mkdir(workdir);
    await writeFile(join(workdir, "marker.txt"), "a file for ls to find\n");
    await writeFile(join(workdir, "probe.html"), PROBE_FILE);
    await mkdir(join(workdir, "sub"));
    await writeFile(join(workdir, "sub", "long.txt"), Array.from({ length: 300 }, (_, i) => `line ${String(i + 1)}`).join("\n") + "\n");
    await mkdir(screenshotDir, { recursive: true });
    bin = await buildTrellis(tmp);
    port = await freePort();
    daemon = await startDaemon(bin, home, port, script);
    ({ context, page } = await openBrowser(tmp));
  }, { timeout: 600_000 });

  after(() => tearDown(context, daemon, tmp));

  async function shot(name: string): Promise<void> {
    await page.screenshot({ path: join(screenshotDir, `${name}.png`), fullPage: true });
  }

  it("logs in with trellis ui's one-time link; the link works once and leaves no secret in the URL", async () => {
    const link = await loginLink(bin, home);
    assert.match(link, new RegExp(`^http://127\\.0\\.0\\.1:${String(port)}/ui/#login=[\\w-]+$`));
    await page.goto(link);
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    assert.ok(!page.url().includes("login="), `the URL after login: ${page.url()}`);
    assert.ok(!page.url().includes(daemon.token), "the token is not in the URL");

    // The same link again, without the cookie: refused.
    await context.clearCookies();
    const p2 = await context.newPage();
    await p2.goto(link);
    await p2.getByRole("alert").filter({ hasText: "used already or has expired" }).waitFor();
    await p2.close();
    // Log in again with a new link (the page loads again, from about:blank: a link that
    // differs from the page's URL by its hash only would not load it, and the code would not be
    // traded for a cookie). The page has the cookie from now on.
    await page.goto("about:blank");
    await page.goto(await loginLink(bin, home));
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
  });

  it("creates a session, prompts the scripted model and shows the streamed answer", async () => {
    await page.getByLabel("Workdir").fill(workdir);
    await page.getByLabel("Mode").selectOption("accept");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    await page.getByLabel("Prompt").fill("hello");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").first();
    await turn.locator(".text").filter({ hasText: "Hello there, this is the scripted model answering." }).waitFor();
    await turn.locator(".chip.done-complete").waitFor();
    await shot("session");

    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    await page.locator("table.sessions tbody tr").first().waitFor();
    await shot("sessions");
  });

  it("asks for approval of a tool call; allowing it shows the tool's result", async () => {
    await page.locator("table.sessions tbody tr a").first().click();
    await page.getByLabel("Prompt").fill("run ls");
    await page.getByRole("button", { name: "Send" }).click();
    // The badge and the approvals panel.
    await page.getByRole("link", { name: /Approvals\s*1/ }).click();
    const card = page.locator("article.approval").first();
    await card.waitFor();
    assert.match(await card.innerText(), /shell\s+wants to run\s+exec/);
    assert.match(await card.locator("dd code").innerText(), /shell/);
    await card.getByRole("timer").waitFor();
    await shot("approvals");
    await card.getByLabel("Scope").selectOption("once");
    await card.getByRole("button", { name: "Allow" }).click();
    await page.getByText("Nothing waits for a decision.").waitFor();

    await page.goBack();
    const turn = page.locator("article.turn").nth(1);
    const tool = turn.locator(".tool-call.ok");
    await tool.waitFor();
    assert.match(await tool.locator("pre.args").innerText(), /"command": "ls"/);
    await tool.locator("pre.result").filter({ hasText: "marker.txt" }).waitFor();
    await turn.locator(".text").filter({ hasText: "The listing is done." }).waitFor();
    await turn.locator(".chip.done-complete").waitFor();
  });

  it("resumes after the daemon is killed and restarted mid-turn: the turn shows interrupted, no text twice", async () => {
    const sessionUrl = page.url();
    const sessionId = /#\/session\/(s-[0-9a-f]+)$/.exec(sessionUrl)![1]!;
    await page.getByLabel("Prompt").fill("slow");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").nth(2);
    const text = turn.locator(".text");
    // Wait for some streamed words, then kill the daemon.
    await page.waitForFunction(() => {
      const t = document.querySelectorAll("article.turn")[2]?.querySelector(".text")?.textContent ?? "";
      return t.split(" ").length >= 30;
    });
    await daemon.kill();
    await page.locator(".conn-reconnecting").waitFor();
    const before = await text.innerText();
    await shot("reconnecting");

    daemon = await startDaemon(bin, home, port, script);
    await turn.locator(".chip.done-interrupted").waitFor();
    await page.locator(".conn-reconnecting").waitFor({ state: "detached" }).catch(() => undefined);
    assert.equal(await page.locator(".conn").innerText(), "", "the connection banner is gone");
    const shown = await text.innerText();
    assert.ok(shown.startsWith(before.trimEnd()), "the text shown before the restart is still there, unchanged");
    assert.ok(SLOW_TEXT.startsWith(shown.trim()), `the text is a prefix of the model's answer, with nothing repeated or missing: ${shown.slice(0, 200)}…`);

    // Exactly what the daemon stored for that turn, no more, no less.
    // (REST answers the same JSON as JSON-RPC: each event's payload under `payload`.)
    type Stored = { kind: string; payload: { prompt?: string; text?: string; reason?: string } };
    const evs = (await rest(daemon, "/v1/session/resume", { sessionId, afterSeq: 0 }) as { events: Stored[] }).events;
    const start = evs.findIndex((e) => e.kind === "turn.started" && e.payload.prompt === "slow");
    const end = evs.findIndex((e, i) => i > start && e.kind === "turn.done");
    assert.ok(start >= 0 && end > start, "the daemon stored the slow turn");
    assert.equal(evs[end]!.payload.reason, "interrupted");
    const deltas = evs.slice(start, end).map((e) => (e.kind === "message.delta" ? e.payload.text : "") ?? "").join("");
    assert.equal(shown.trim(), deltas.trim(), "the page shows exactly the stored deltas of the interrupted turn");
    await shot("session-resumed");

    // The page goes on working with the restarted daemon.
    await page.getByLabel("Prompt").fill("hello");
    await page.getByRole("button", { name: "Send" }).click();
    await page.locator("article.turn").nth(3).locator(".chip.done-complete").waitFor();
  });

  it("shows the agent's question in the session; the answer chosen is what its tool returns", async () => {
    await page.getByLabel("Prompt").fill("ask me");
    await page.getByRole("button", { name: "Send" }).click();
    const card = page.locator("article.question").first();
    await card.waitFor();
    assert.match(await card.innerText(), /Which colour\?/);
    const answer = card.getByRole("button", { name: "Answer" });
    assert.equal(await answer.isDisabled(), true, "nothing chosen yet: Answer is disabled");
    await card.getByLabel("Green").check();
    await shot("question");
    await answer.click();
    await card.waitFor({ state: "detached" });
    const turn = page.locator("article.turn").nth(4);
    await turn.locator(".tool-call.ok pre.result").filter({ hasText: "A: Green" }).waitFor();
    await turn.locator(".text").filter({ hasText: "Thanks for the answer." }).waitFor();
  });

  it("renders the model's markdown safely: the XSS corpus stays inert in answers and tool output", async () => {
    // Every probe would set window.__xss; the page's CSP would also block an
    // inline script, so its violation reports are counted too: a probe that
    // got into the DOM would show there even though it could not run.
    await page.evaluate(() => {
      const w = window as unknown as { __xss?: string; __violations: string[] };
      delete w.__xss;
      w.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) => w.__violations.push(`${e.violatedDirective} ${e.sample}`));
    });
    const dialogs: string[] = [];
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await page.getByLabel("Prompt").fill("markdown please");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").nth(5);
    await turn.locator(".chip.done-complete").waitFor();
    const md = turn.locator(".text.md");
    await md.locator("h1").filter({ hasText: "The plan" }).waitFor();
    assert.equal(await md.locator("strong").innerText(), "bold");
    assert.equal(await md.locator("li").count(), 2);
    // The code block, highlighted.
    const code = md.locator("pre.code code.language-go");
    assert.match(await code.innerText(), /func main\(\) \{ fmt\.Println\("hi"\) \}/);
    assert.ok(await code.locator(".hljs-keyword").count() > 0, "go keywords are highlighted");
    // A link opens in a new tab without a window.opener.
    const docs = md.getByRole("link", { name: "docs link" });
    assert.equal(await docs.getAttribute("href"), "https://example.com/docs");
    assert.equal(await docs.getAttribute("target"), "_blank");
    assert.match((await docs.getAttribute("rel")) ?? "", /\bnoopener\b/);
    // The raw HTML shows as text; nothing of it is in the DOM.
    const text = await md.innerText();
    assert.ok(text.includes(`<img src=x onerror="window.__xss = 'img'">`), `the raw img is shown as text: ${text}`);
    assert.ok(text.includes("<script>window.__xss = 'script'</script>"), "the raw script is shown as text");
    const dom = await turn.evaluate((el) => ({
      scripts: el.querySelectorAll("script").length,
      images: el.querySelectorAll("img").length,
      handlers: [...el.querySelectorAll("*")].flatMap((n) => [...n.attributes].filter((a) => a.name.startsWith("on")).map((a) => a.name)),
      jsLinks: [...el.querySelectorAll("[href], [src]")].map((n) => n.getAttribute("href") ?? n.getAttribute("src") ?? "").filter((u) => /^\s*javascript:/i.test(u)),
    }));
    assert.deepEqual(dom, { scripts: 0, images: 0, handlers: [], jsLinks: [] });
    // The remote image is a link, not a load.
    assert.equal(await md.getByRole("link", { name: "a picture" }).getAttribute("href"), "https://example.com/pic.png");
    // Clicking the javascript: links does nothing.
    await md.getByText("click me").click();
    await md.getByText("raw link").click();
    await shot("markdown");

    // Tool output with the same probes stays plain text.
    await page.getByLabel("Prompt").fill("read the probe");
    await page.getByRole("button", { name: "Send" }).click();
    const turn2 = page.locator("article.turn").nth(6);
    await turn2.locator(".chip.done-complete").waitFor();
    const result = turn2.locator(".tool-call.ok pre.result");
    assert.match(await result.innerText(), /<script>window\.__xss = 'tool-script'<\/script>/);
    assert.match(await result.innerText(), /<img src=x onerror=/);
    assert.equal(await turn2.locator("pre.result script, pre.result img").count(), 0);
    await turn2.locator(".text.md strong").filter({ hasText: "probe" }).waitFor();
    await shot("markdown-tool");

    const state = await page.evaluate(() => {
      const w = window as unknown as { __xss?: string; __violations: string[] };
      return { xss: w.__xss ?? null, violations: w.__violations };
    });
    assert.deepEqual(state, { xss: null, violations: [] }, "no probe ran or was blocked by the CSP");
    assert.deepEqual(dialogs, []);
  });

  it("searches and filters the sessions list; renames, closes and deletes a session", async () => {
    const first = /#\/session\/(s-[0-9a-f]+)$/.exec(page.url())![1]!;
    const { sessionId: second } = await rest(daemon, "/v1/session/create", { workdir }) as { sessionId: string };
    const { sessionId: third } = await rest(daemon, "/v1/session/create", { workdir }) as { sessionId: string };

    // Rename the second one.
    await page.goto(page.url().replace(/#.*$/, `#/session/${second}`));
    await page.getByRole("button", { name: "Rename" }).click();
    await page.getByLabel("Title").fill("Release notes draft");
    await page.getByRole("button", { name: "Save title" }).click();
    await page.getByRole("heading", { name: /Release notes draft/ }).waitFor();

    // Search by title, then by an id's prefix.
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    const rows = page.locator("table.sessions tbody tr");
    await rows.first().waitFor();
    await page.getByLabel("Search").fill("release NOTES");
    await page.waitForFunction(() => document.querySelectorAll("table.sessions tbody tr").length === 1);
    assert.match(await rows.first().innerText(), /Release notes draft/);
    await shot("sessions-search");
    await page.getByLabel("Search").fill(first.slice(0, 8));
    await rows.filter({ hasText: first }).waitFor();
    assert.equal(await rows.count(), (await rows.filter({ hasText: first.slice(0, 8) }).count()));
    await page.getByLabel("Search").fill("no such session anywhere");
    await page.getByText("No session matches.").waitFor();
    await page.getByLabel("Search").fill("");

    // Close the second one: it leaves the open list, and the closed filter shows it.
    await rows.getByRole("link", { name: "Release notes draft" }).click();
    await page.getByRole("button", { name: "Close", exact: true }).click();
    await page.locator(".session-actions").getByRole("button", { name: "Close", exact: true }).waitFor({ state: "detached" });
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    await rows.first().waitFor();
    assert.equal(await rows.filter({ hasText: second }).count(), 0, "a closed session is not in the open list");
    await page.getByLabel("State").selectOption("closed");
    await rows.filter({ hasText: second }).waitFor();
    assert.equal(await rows.filter({ hasText: first }).count(), 0, "the closed filter shows only closed sessions");
    await shot("sessions-closed");

    // Delete the third one, after a confirmation.
    await page.goto(page.url().replace(/#.*$/, `#/session/${third}`));
    await page.getByRole("button", { name: "Delete…" }).click();
    await page.getByRole("group", { name: "Confirm delete" }).waitFor();
    await shot("session-delete");
    await page.getByRole("button", { name: "Delete for good" }).click();
    await page.waitForURL(/#\/sessions$/);
    await page.getByLabel("State").selectOption("all");
    await rows.filter({ hasText: second }).waitFor();
    assert.equal(await rows.filter({ hasText: third }).count(), 0, "the deleted session is gone from the list");
    await assert.rejects(rest(daemon, "/v1/session/resume", { sessionId: third }), /not.?found/i, "the daemon no longer has the deleted session");
    await rest(daemon, "/v1/session/resume", { sessionId: second }); // the closed one is still there

    await page.goto(page.url().replace(/#.*$/, `#/session/${first}`));
    await page.locator("article.turn").first().waitFor();
  });

  it("shows each turn's time (from its events' timestamps) and tokens (from its usage events)", async () => {
    const sessionId = /#\/session\/(s-[0-9a-f]+)$/.exec(page.url())![1]!;
    await page.getByLabel("Prompt").fill("timed please");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").nth(7);
    await turn.locator(".chip.running").waitFor();
    await turn.locator(".turn-foot .timing").waitFor(); // counts while the turn runs
    await turn.locator(".chip.done-complete").waitFor();
    const foot = turn.locator(".turn-foot");
    // The fake provider's model is in the price table at 0: its calls are
    // priced, so a cost is shown, and it is nothing.
    assert.equal(await foot.locator(".usage").innerText(), "1,200 in · 340 out (40 reasoning) · $0.0000");
    assert.equal(await foot.locator(".cost").innerText(), "$0.0000");

    // The time shown is turn.started's ts to turn.done's, as stored.
    type Stored = { kind: string; ts: string; payload: { prompt?: string; turnId?: string } };
    const evs = (await rest(daemon, "/v1/session/resume", { sessionId, afterSeq: 0 }) as { events: Stored[] }).events;
    const started = evs.find((e) => e.kind === "turn.started" && e.payload.prompt === "timed please")!;
    const done = evs.find((e) => e.kind === "turn.done" && e.payload.turnId === started.payload.turnId)!;
    const ms = Date.parse(done.ts) - Date.parse(started.ts);
    assert.ok(ms >= 1400, `the scripted step takes 1.5 s: ${String(ms)} ms`);
    await foot.locator(".timing").filter({ hasText: `${(ms / 1000).toFixed(1)} s` }).waitFor();
    // Tool calls show how long they ran.
    assert.match(await page.locator("article.turn").nth(6).locator(".tool-head .timing").innerText(), /^\d+\.\d s$/);
    await turn.scrollIntoViewIfNeeded();
    await shot("turn-usage");
  });

  it("defaults the workdir to the latest session's and resolves a relative one there; collapses a long tool output", async () => {
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    const box = page.getByLabel("Workdir");
    const note = page.locator("#workdir-note");
    await note.filter({ hasText: `Default: ${workdir} (the latest session's)` }).waitFor();
    assert.equal(await box.getAttribute("placeholder"), workdir);
    assert.ok((await page.locator("#recent-workdirs option").evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value))).includes(workdir),
      "the recent workdirs are offered");
    // A relative path: resolved against the default before it is sent.
    await box.fill("./sub/../sub");
    await note.filter({ hasText: `Relative to ${workdir}: ${workdir}/sub` }).waitFor();
    await shot("workdir");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    await page.locator(".view-head .path").filter({ hasText: `${workdir}/sub` }).waitFor();

    // An empty box: the default, now the session just made.
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    await note.filter({ hasText: `Default: ${workdir}/sub` }).waitFor();
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/#\/session\/s-[0-9a-f]+$/);
    await page.locator(".view-head .path").filter({ hasText: `${workdir}/sub` }).waitFor();

    // A 300-line output shows its first lines and a button for the rest.
    await page.getByLabel("Prompt").fill("read the long file");
    await page.getByRole("button", { name: "Send" }).click();
    const turn = page.locator("article.turn").first();
    await turn.locator(".chip.done-complete").waitFor();
    const result = turn.locator("pre.result");
    const more = turn.getByRole("button", { name: /Show all \d+ lines of the result/ });
    await more.waitFor();
    assert.equal(await more.getAttribute("aria-expanded"), "false");
    let text = await result.innerText();
    assert.ok(text.includes("line 1") && !text.includes("line 300"), `collapsed: ${text}`);
    assert.ok(text.split("\n").length <= 12, "a collapsed output shows about ten lines");
    await shot("long-output");
    await more.click();
    text = await result.innerText();
    assert.ok(text.includes("line 150") && text.includes("line 300"), "expanded: all of it");
    const less = turn.getByRole("button", { name: "Show less of the result" });
    assert.equal(await less.getAttribute("aria-expanded"), "true");
    await less.click();
    assert.ok(!(await result.innerText()).includes("line 300"));
    // Short outputs have no button.
    await turn.locator(".text.md").filter({ hasText: "That was long." }).waitFor();
    assert.equal(await page.locator("pre.args + button.more").count(), 0);
  });

  it("shows jobs (run now, history), agents and skills, and the daemon's status", async () => {
    const { jobId } = await rest(daemon, "/v1/job/schedule", { spec: "@every 1h", task: "hello", mode: "accept", workdir }) as { jobId: string };
    await page.getByRole("link", { name: "Jobs" }).click();
    const job = page.locator("article.job").filter({ hasText: "@every 1h" });
    await job.waitFor();
    await job.getByRole("button", { name: "Run now" }).click();
    await job.getByRole("status").filter({ hasText: /ran: ok/ }).waitFor();
    await job.locator("summary").click();
    await job.locator(".history li").first().waitFor();
    assert.ok(jobId.startsWith("j-"));
    await shot("jobs");

    await page.getByRole("link", { name: "Agents & skills" }).click();
    await page.getByRole("heading", { name: "Skills", exact: true }).waitFor();
    await shot("agents");

    await page.getByRole("link", { name: "Daemon" }).click();
    await page.getByText("sqlite").waitFor();
    await page.getByRole("heading", { name: "Capabilities" }).waitFor();
    await shot("status");
  });

  it("schedules and cancels a job, creates and deletes an agent, adds and removes an allowlist entry, with the forms", async () => {
    // A job.
    await page.getByRole("link", { name: "Jobs" }).click();
    const form = page.locator("form").filter({ has: page.getByRole("heading", { name: "Schedule a job" }) });
    await form.getByLabel("When").fill("@every 2h");
    await form.getByLabel("Task").fill("hello from the form");
    await form.getByLabel("Mode").selectOption("plan");
    await form.getByLabel("Workdir").fill(workdir);
    await form.getByRole("button", { name: "Schedule" }).click();
    await form.getByRole("status").filter({ hasText: /Scheduled j-\w+; next run in/ }).waitFor();
    const job = page.locator("article.job").filter({ hasText: "hello from the form" });
    await job.waitFor();
    assert.match(await job.innerText(), /@every 2h/);
    assert.match(await job.innerText(), /plan · /);
    // The daemon refuses a bad spec, and the form says why.
    await form.getByLabel("When").fill("every now and then");
    await form.getByLabel("Task").fill("x");
    await form.getByRole("button", { name: "Schedule" }).click();
    await form.getByRole("alert").waitFor();
    await shot("jobs-form");
    await job.getByRole("button", { name: "Cancel job" }).click();
    await job.getByRole("status").filter({ hasText: "cancelled" }).waitFor();
    await job.getByText("(disabled)").waitFor();
    assert.equal(await job.getByRole("button", { name: "Run now" }).isDisabled(), true);

    // An agent.
    await page.getByRole("link", { name: "Agents & skills" }).click();
    const agentForm = page.locator("form").filter({ has: page.getByRole("heading", { name: "New agent" }) });
    await agentForm.getByLabel("Name").fill("reviewer");
    await agentForm.getByLabel("Description").fill("Reviews diffs before they land");
    await agentForm.getByLabel("Instructions").fill("Read the diff. Say what is wrong, briefly.");
    await agentForm.getByLabel("Tools").fill("read_file, grep");
    await agentForm.getByRole("button", { name: "Create agent" }).click();
    await agentForm.getByRole("status").filter({ hasText: /Created reviewer/ }).waitFor();
    const row = page.locator("tr").filter({ hasText: "Reviews diffs before they land" });
    await row.waitFor();
    await shot("agents-form");
    // The new agent is offered for new sessions.
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    await page.getByLabel("Agent").locator("option", { hasText: "reviewer" }).waitFor({ state: "attached" });
    await page.getByRole("link", { name: "Agents & skills" }).click();
    await row.getByRole("button", { name: "Delete reviewer…" }).click();
    await row.getByRole("button", { name: "Delete reviewer", exact: true }).click();
    await row.waitFor({ state: "detached" });

    // An allowlist entry.
    await page.getByRole("link", { name: /^Approvals/ }).click();
    const allowForm = page.locator("form").filter({ has: page.getByRole("heading", { name: "Allow without asking" }) });
    await allowForm.getByLabel("Pattern").fill("shell(git status*)");
    await allowForm.getByLabel("Scope").selectOption("project");
    await allowForm.getByLabel("Project workdir").fill(workdir);
    await allowForm.getByRole("button", { name: "Add" }).click();
    const entry = page.locator("table.allowlist tr").filter({ hasText: "shell(git status*)" });
    await entry.waitFor();
    assert.match(await entry.innerText(), /project/);
    assert.ok((await entry.innerText()).includes(workdir));
    await shot("allowlist");
    await entry.getByRole("button", { name: "Remove shell(git status*)" }).click();
    await entry.waitFor({ state: "detached" });
  });

  it("answers the approvals inbox from the keyboard: j / k move, a allows, d denies the focused request", async () => {
    // Three sessions whose turns wait for approval (unattended: no console is their origin).
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { sessionId } = await rest(daemon, "/v1/session/create", { workdir }) as { sessionId: string };
      await rest(daemon, "/v1/session/prompt", { sessionId, text: "run ls" });
      ids.push(sessionId);
    }
    await page.getByRole("link", { name: /^Approvals/ }).click();
    const cards = page.locator(".inbox > article.approval");
    await page.waitForFunction(() => document.querySelectorAll(".inbox > article.approval").length === 3);
    await page.locator("#inbox-keys").filter({ hasText: "j / k next / previous request" }).waitFor();
    assert.equal(await cards.first().getByRole("button", { name: "Allow" }).getAttribute("aria-keyshortcuts"), "a");
    const sessionOfCard = async (i: number): Promise<string> => cards.nth(i).locator("dd a").first().innerText();
    // Waits (bounded) until the inbox's card i has the focus.
    const focused = async (i: number): Promise<void> => {
      await page.waitForFunction((i) => [...document.querySelectorAll(".inbox > article")].indexOf(document.activeElement!) === i, i);
    };

    // a / d do nothing while no request has the focus.
    await page.locator("body").click({ position: { x: 5, y: 200 } });
    await page.keyboard.press("a");
    assert.equal(await cards.count(), 3);
    await page.keyboard.press("j");
    await focused(0);
    await page.keyboard.press("j");
    await page.keyboard.press("j");
    await focused(2);
    await page.keyboard.press("j");
    await focused(2);
    await page.keyboard.press("k");
    await page.keyboard.press("k");
    await focused(0);
    await shot("approvals-keys");

    // d denies the first; the focus goes to the one that took its place.
    const denied = await sessionOfCard(0);
    await page.keyboard.press("d");
    await page.waitForFunction(() => document.querySelectorAll(".inbox > article.approval").length === 2);
    await focused(0);
    // j, then a allows the second of the two left.
    await page.keyboard.press("j");
    const allowed = await sessionOfCard(1);
    await page.keyboard.press("a");
    await page.waitForFunction(() => document.querySelectorAll(".inbox > article.approval").length === 1);
    await focused(0);
    // Keys typed into a field are text, not shortcuts.
    const last = await sessionOfCard(0);
    await page.getByLabel("Pattern").click();
    await page.keyboard.type("ad");
    assert.equal(await page.getByLabel("Pattern").inputValue(), "ad");
    assert.equal(await cards.count(), 1);
    await page.getByLabel("Pattern").fill("");
    await page.keyboard.press("Shift+Tab"); // out of the field
    await page.keyboard.press("j");
    await page.keyboard.press("a");
    await page.getByText("Nothing waits for a decision.").waitFor();

    // The daemon got those answers: the denied call failed, the allowed ones ran.
    assert.deepEqual(new Set([denied, allowed, last]), new Set(ids));
    type Stored = { kind: string; payload: { ok?: boolean; name?: string } };
    const outcome = async (sessionId: string): Promise<boolean> => {
      for (let i = 0; i < 600; i++) {
        const evs = (await rest(daemon, "/v1/session/resume", { sessionId, afterSeq: 0 }) as { events: Stored[] }).events;
        const r = evs.find((e) => e.kind === "tool.result" && e.payload.name === "shell");
        if (r !== undefined) return r.payload.ok === true;
        await new Promise((res) => setTimeout(res, 100));
      }
      throw new Error(`no tool result in ${sessionId}`);
    };
    assert.equal(await outcome(denied), false, "d denied it");
    assert.equal(await outcome(allowed), true, "a allowed it");
    assert.equal(await outcome(last), true, "a allowed it");
  });

  it("is usable on a phone-sized screen and by keyboard", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole("link", { name: "Sessions", exact: true }).click();
    await page.locator("table.sessions tbody tr").first().waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `the page scrolls sideways by ${String(overflow)} px on a phone`);
    await shot("phone-sessions");
    await page.locator("table.sessions tbody tr a").first().click();
    await page.locator("article.turn").first().waitFor();
    await shot("phone-session");

    // Keyboard: a new view takes the focus (its main region), so Tab goes
    // on from the view's start, not from where the link that was clicked
    // used to be; on a page just loaded the skip link comes first; every
    // control has a name.
    await page.waitForFunction(() => document.activeElement?.id === "main");
    await page.getByRole("button", { name: "Rename", disabled: false }).waitFor();
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Rename");
    await page.reload();
    await page.locator("article.turn").first().waitFor();
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Skip to content");
    const unnamed = await page.evaluate(() => [...document.querySelectorAll("button, input, select, textarea")]
      .filter((el) => {
        const e = el as HTMLElement;
        const label = (el as HTMLInputElement).labels?.length ?? 0;
        return label === 0 && (e.getAttribute("aria-label") ?? "") === "" && (e.textContent ?? "").trim() === "";
      }).map((el) => el.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, [], "controls without a label");
  });
});
