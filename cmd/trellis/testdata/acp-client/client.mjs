// The editor's side of TestACP: the official ACP client drives
// `trellis acp` and prints what it saw as one JSON object on stdout.
//
// node client.mjs WORKDIR TRELLIS [TRELLIS ARGS...]
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [workdir, command, ...args] = process.argv.slice(2);

// withAgent launches the agent, as an editor does, runs op on the
// connection, and stops the agent.
async function withAgent(op) {
  const agent = spawn(command, args, { cwd: workdir, stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
  try {
    return await app.connectWith(stream, op);
  } finally {
    agent.stdin.end();
    agent.kill();
  }
}

// Every session/update, in arrival order, tagged with the phase it came in.
let phase = "setup";
const updates = [];
let onUpdate = () => {};
const permissions = [];

const app = acp
  .client({ name: "trellis-acp-test" })
  .onNotification("session/update", ({ params }) => {
    updates.push({ phase, update: params.update });
    onUpdate(params.update);
  })
  .onRequest("session/request_permission", ({ params }) => {
    permissions.push({ phase, toolCallId: params.toolCall.toolCallId, status: params.toolCall.status,
      kinds: params.options.map((o) => o.kind) });
    const allow = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

// summary of the updates of one phase.
function summary(p) {
  const mine = updates.filter((u) => u.phase === p).map((u) => u.update);
  const text = (kind) => mine.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text);
  const calls = {};
  for (const u of mine) {
    if (u.sessionUpdate !== "tool_call" && u.sessionUpdate !== "tool_call_update") continue;
    const c = (calls[u.toolCallId] ??= { announced: 0, statuses: [], diffs: [] });
    if (u.sessionUpdate === "tool_call") {
      c.announced++;
      c.title = u.title;
      c.kind = u.kind;
    }
    if (u.status) c.statuses.push(u.status);
    for (const part of u.content ?? []) {
      if (part.type === "diff") c.diffs.push({ path: part.path, oldText: part.oldText ?? null, newText: part.newText });
      if (part.type === "content") c.output = part.content.text;
    }
  }
  return {
    userMessages: text("user_message_chunk"),
    agentText: text("agent_message_chunk").join(""),
    agentChunks: text("agent_message_chunk").length,
    thoughtText: text("agent_thought_chunk").join(""),
    toolCalls: Object.values(calls),
    modeUpdates: mine.filter((u) => u.sessionUpdate === "current_mode_update").map((u) => u.currentModeId),
  };
}

const initialize = (ctx) =>
  ctx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  });

const out = await withAgent(async (ctx) => {
  const init = await initialize(ctx);
  // Requests an agent must refuse, by the error code they answer.
  const code = (request) => request.then(() => null, (err) => err.code ?? String(err));
  const refused = {
    relativeCwd: await code(ctx.request("session/new", { cwd: "work", mcpServers: [] })),
    unknownSession: await code(ctx.request("session/prompt", { sessionId: "s-unknown", prompt: [{ type: "text", text: "hi" }] })),
    loadUnknown: await code(ctx.request("session/load", { sessionId: "s-unknown", cwd: workdir, mcpServers: [] })),
    image: null,
  };
  const created = await ctx.request("session/new", { cwd: workdir, mcpServers: [] });
  refused.image = await code(ctx.request("session/prompt", { sessionId: created.sessionId,
    prompt: [{ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" }] }));
  const sessionId = created.sessionId;

  phase = "write";
  const write = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "write notes" }] });

  // "slow" streams for a minute: cancel it once its first chunk arrived.
  phase = "slow";
  const firstChunk = new Promise((resolve) => {
    onUpdate = (u) => u.sessionUpdate === "agent_message_chunk" && resolve();
  });
  const slow = ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "slow" }] });
  await firstChunk;
  onUpdate = () => {};
  await ctx.notify("session/cancel", { sessionId });
  const slowAnswer = await slow;

  phase = "mode";
  const modeUpdate = new Promise((resolve) => {
    onUpdate = (u) => u.sessionUpdate === "current_mode_update" && resolve();
  });
  await ctx.request("session/set_mode", { sessionId, modeId: "plan" });
  await modeUpdate;
  onUpdate = () => {};

  phase = "load";
  const loaded = await ctx.request("session/load", { sessionId, cwd: workdir, mcpServers: [] });

  return {
    sessionId,
    refused,
    protocolVersion: init.protocolVersion,
    loadSession: init.agentCapabilities?.loadSession ?? false,
    modes: created.modes.availableModes.map((m) => m.id),
    currentMode: created.modes.currentModeId,
    write: { stopReason: write.stopReason, ...summary("write") },
    permissions,
    slow: { stopReason: slowAnswer.stopReason, ...summary("slow") },
    mode: summary("mode"),
    load: { currentMode: loaded.modes?.currentModeId ?? null, ...summary("load") },
  };
});

// The daemon dies with SIGKILL (its pid from ACP_TEST_KILL_DAEMON, the
// home's daemon.json) while no agent runs: the next agent process starts a
// new one, as the CLI does when none answers.
if (process.env.ACP_TEST_KILL_DAEMON) {
  const { pid } = JSON.parse(readFileSync(process.env.ACP_TEST_KILL_DAEMON, "utf8"));
  process.kill(pid, "SIGKILL");
  for (let alive = true; alive; ) {
    try {
      process.kill(pid, 0);
      await new Promise((r) => setTimeout(r, 20));
    } catch {
      alive = false;
    }
  }
  out.killedPid = pid;
}

// The editor restarted: a new agent process loads the session, and a
// prompt in it streams as before.
out.reload = await withAgent(async (ctx) => {
  await initialize(ctx);
  phase = "reload";
  const loaded = await ctx.request("session/load", { sessionId: out.sessionId, cwd: workdir, mcpServers: [] });
  phase = "reload-prompt";
  const again = await ctx.request("session/prompt", { sessionId: out.sessionId, prompt: [{ type: "text", text: "anything else?" }] });
  return {
    currentMode: loaded.modes?.currentModeId ?? null,
    ...summary("reload"),
    prompt: { stopReason: again.stopReason, ...summary("reload-prompt") },
  };
});

// The editor kept its view and reconnects: session/resume replays nothing,
// and a prompt streams as before.
out.resume = await withAgent(async (ctx) => {
  const init = await initialize(ctx);
  phase = "resume";
  const resumed = await ctx.request("session/resume", { sessionId: out.sessionId, cwd: workdir, mcpServers: [] });
  phase = "resume-prompt";
  const again = await ctx.request("session/prompt", { sessionId: out.sessionId, prompt: [{ type: "text", text: "and now?" }] });
  return {
    advertised: Boolean(init.agentCapabilities?.sessionCapabilities?.resume),
    currentMode: resumed.modes?.currentModeId ?? null,
    ...summary("resume"),
    prompt: { stopReason: again.stopReason, ...summary("resume-prompt") },
  };
});
process.stdout.write(JSON.stringify(out) + "\n");
