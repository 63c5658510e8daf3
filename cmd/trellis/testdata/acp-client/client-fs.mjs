// The editor's side of TestACPDelegation: the official ACP client, which
// advertises its file system and terminal, serves them from memory (an
// unsaved buffer, writes it keeps, a terminal that prints a fixed line)
// and prints what it saw as one JSON object on stdout.
//
// node client-fs.mjs WORKDIR TRELLIS [TRELLIS ARGS...]
import { spawn } from "node:child_process";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [workdir, command, ...args] = process.argv.slice(2);
const draft = join(workdir, "draft.md");

const updates = [];
const served = [];
const app = acp
  .client({ name: "trellis-acp-fs-test" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
  })
  .onRequest("session/request_permission", ({ params }) => {
    const allow = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onRequest("fs/read_text_file", ({ params }) => {
    served.push({ method: "fs/read_text_file", path: params.path });
    if (params.path !== draft) throw new Error(`no buffer for ${params.path}`);
    return { content: "UNSAVED BUFFER: draft v2, not on disk yet\n" };
  })
  .onRequest("fs/write_text_file", ({ params }) => {
    served.push({ method: "fs/write_text_file", path: params.path, content: params.content });
    return {};
  })
  .onRequest("terminal/create", ({ params }) => {
    served.push({ method: "terminal/create", command: params.command, args: params.args, cwd: params.cwd });
    return { terminalId: "term-1" };
  })
  .onRequest("terminal/wait_for_exit", ({ params }) => {
    served.push({ method: "terminal/wait_for_exit", terminalId: params.terminalId });
    return { exitCode: 0 };
  })
  .onRequest("terminal/output", ({ params }) => {
    served.push({ method: "terminal/output", terminalId: params.terminalId });
    return { output: "printed in the editor's terminal\n", truncated: false };
  })
  .onRequest("terminal/kill", ({ params }) => {
    served.push({ method: "terminal/kill", terminalId: params.terminalId });
    return {};
  })
  .onRequest("terminal/release", ({ params }) => {
    served.push({ method: "terminal/release", terminalId: params.terminalId });
    return {};
  });

const agent = spawn(command, args, { cwd: workdir, stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
try {
  const out = await app.connectWith(stream, async (ctx) => {
    await ctx.request("initialize", {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    });
    // The editor's own MCP server (ACP_TEST_MCP: a stdio entry), for the
    // agent to start and lend to the session.
    const mcpServers = process.env.ACP_TEST_MCP ? JSON.parse(process.env.ACP_TEST_MCP) : [];
    const { sessionId } = await ctx.request("session/new", { cwd: workdir, mcpServers });
    const stops = [];
    for (const text of ["read the draft", "save the draft", "run in the terminal", "ask the editor's server"]) {
      stops.push((await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text }] })).stopReason);
    }
    const outputs = {};
    for (const u of updates) {
      if (u.sessionUpdate !== "tool_call_update") continue;
      for (const part of u.content ?? []) if (part.type === "content") outputs[u.toolCallId] = part.content.text;
    }
    return { stops, outputs, served };
  });
  process.stdout.write(JSON.stringify(out) + "\n");
} finally {
  agent.stdin.end();
  agent.kill();
}
