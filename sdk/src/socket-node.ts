// The socket of the Node entry: the `ws` package, which reports why a
// connection failed and can pause reading (backpressure onto the daemon).

import type { Socket, SocketHandlers } from "./socket.js";

// The daemon's largest frame is 32 MiB (hello's limits.maxFrameBytes); its
// frames to us are never larger than what it accepts.
const MAX_FRAME_BYTES = 64 << 20;

/**
 * nodeSocket opens sockets with the `ws` package; for `wss://` it trusts
 * the PEM certificates in ca when given, else the system's roots.
 */
export const nodeSocket = async (url: string, timeoutMs: number, handlers: SocketHandlers, ca?: string): Promise<Socket> => {
  const WebSocket = await loadWs();
  return openWs(WebSocket, url, timeoutMs, handlers, ca);
};

type WsModule = typeof import("ws");

// loadWs imports ws when the first connection opens, so that a missing ws
// is an error that says what to do rather than a failed import of the SDK:
// npm links a folder installed by path (`npm install ../sdk`) without
// installing its dependencies.
async function loadWs(): Promise<WsModule["WebSocket"]> {
  try {
    return (await import("ws")).WebSocket;
  } catch (err) {
    if ((err as { code?: string }).code !== "ERR_MODULE_NOT_FOUND") throw err;
    throw new Error("@trellis/sdk needs its dependency ws, which is not installed: npm links a folder installed by path without installing its dependencies; " +
      "install the SDK with `npm install --install-links PATH` (or run `npm ci` in PATH)", { cause: err });
  }
}

const openWs = (WebSocket: WsModule["WebSocket"], url: string, timeoutMs: number, handlers: SocketHandlers, ca: string | undefined): Promise<Socket> => new Promise((resolve, reject) => {
  const ws = new WebSocket(url, {
    handshakeTimeout: timeoutMs, maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false,
    ...(ca !== undefined ? { ca } : {}),
  });
  const fail = (err: Error): void => {
    ws.removeAllListeners();
    ws.on("error", () => {}); // a late error after terminate must not crash the process
    ws.terminate();
    reject(err);
  };
  ws.once("error", fail);
  ws.once("unexpected-response", (_req, res) => {
    fail(new Error(`the server answered HTTP ${String(res.statusCode)} instead of a WebSocket upgrade (is the path /ws?)`));
  });
  ws.once("open", () => {
    ws.removeAllListeners();
    let failure: Error | undefined;
    ws.on("error", (err) => {
      failure ??= err;
    });
    ws.on("message", (data) => {
      // Text and binary frames alike are UTF-8 JSON (PROTOCOL.md §2).
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
      handlers.message(buf.toString("utf8"));
    });
    ws.on("close", (code, reason) => handlers.close(code, reason.toString(), failure));
    resolve({
      send: (text) => {
        if (ws.readyState !== WebSocket.OPEN) throw new Error("the connection is closed");
        ws.send(text);
      },
      close: (code, reason) => {
        if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(code, reason);
      },
      pause: () => ws.pause(),
      resume: () => ws.resume(),
    });
  });
});
