// Test helper: a scripted JSON-RPC peer on a real WebSocket, standing in for
// the daemon where a test needs wire behaviour the daemon does not show on
// demand (events out of order, a dropped connection, odd replies).

import { once } from "node:events";
import type { AddressInfo } from "node:net";

import { WebSocketServer, type WebSocket } from "ws";

/** A JSON-RPC message as the fake server sees it. */
export type Message = Record<string, unknown>;

/** A fake server and its one accepted connection. */
export interface FakeServer {
  url: string;
  /** Resolves with the server side of the first connection. */
  connection: Promise<FakePeer>;
  close(): Promise<void>;
}

/** The server side of one connection. */
export interface FakePeer {
  socket: WebSocket;
  /** Sends one message (or a batch). */
  send(msg: Message | Message[]): void;
  /** Resolves with the next message the client sends that matches. */
  next(match?: (m: Message) => boolean): Promise<Message>;
}

/**
 * startFakeServer listens on 127.0.0.1 and answers system.hello by itself
 * (unless `hello` says otherwise); every other message waits for the test.
 */
export async function startFakeServer(hello: (m: Message) => Message = okHello): Promise<FakeServer> {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await once(wss, "listening");
  const { port } = wss.address() as AddressInfo;
  const connection = new Promise<FakePeer>((resolve) => {
    wss.once("connection", (socket) => {
      const inbox: Message[] = [];
      const waiters: { match: (m: Message) => boolean; resolve: (m: Message) => void }[] = [];
      socket.on("message", (data) => {
        const msg = JSON.parse(String(data)) as Message;
        if (msg["method"] === "system.hello") {
          socket.send(JSON.stringify(hello(msg)));
          return;
        }
        const i = waiters.findIndex((w) => w.match(msg));
        if (i >= 0) waiters.splice(i, 1)[0]!.resolve(msg);
        else inbox.push(msg);
      });
      resolve({
        socket,
        send: (msg) => socket.send(JSON.stringify(msg)),
        next: (match = () => true) => {
          const i = inbox.findIndex(match);
          if (i >= 0) return Promise.resolve(inbox.splice(i, 1)[0]!);
          return new Promise((r) => waiters.push({ match, resolve: r }));
        },
      });
    });
  });
  return {
    url: `ws://127.0.0.1:${String(port)}/ws`,
    connection,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
    },
  };
}

/** okHello is a successful system.hello result. */
export function okHello(m: Message): Message {
  return {
    jsonrpc: "2.0",
    id: m["id"],
    result: {
      protocolVersion: "1.0.0",
      serverVersion: "fake",
      capabilities: ["sessions"],
      limits: { maxFrameBytes: 33554432, maxInFlight: 1024, maxBatch: 100 },
      connectionId: "c-fake",
    },
  };
}

/** event builds a session.event notification. */
export function event(sessionId: string, seq: number, kind = "message.delta", payload: unknown = { text: `#${String(seq)}` }): Message {
  return { jsonrpc: "2.0", method: "session.event", params: { sessionId, seq, kind, payload, ts: "2026-01-01T00:00:00.000Z" } };
}
