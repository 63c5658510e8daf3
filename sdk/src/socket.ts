// The WebSocket under a TrellisClient, behind a small interface so that the
// client runs on Node (the `ws` package, which can pause reading) and in
// browsers (the global WebSocket) alike. This file imports nothing of Node.

/** Callbacks of an open socket. */
export interface SocketHandlers {
  /** One text frame (binary frames are decoded as UTF-8, PROTOCOL.md §2). */
  message(text: string): void;
  /** The socket closed; error says why when it failed. */
  close(code: number, reason: string, error?: Error): void;
}

/** An open WebSocket. */
export interface Socket {
  /** Sends one text frame; throws when the socket is not open. */
  send(text: string): void;
  /** Starts the closing handshake (the close callback follows). */
  close(code: number, reason: string): void;
  /**
   * Stops reading from the network until `resume` (Node's `ws` only): the
   * daemon then holds back its own stream to this connection, which is how
   * a slow consumer slows its own connection instead of growing a buffer.
   */
  pause?(): void;
  resume?(): void;
}

/** Opens a socket to url within timeoutMs, or rejects with an Error that says why. */
export type SocketOpener = (url: string, timeoutMs: number, handlers: SocketHandlers) => Promise<Socket>;

/** The subset of the standard WebSocket this file uses. */
interface StandardWebSocket {
  readonly readyState: number;
  binaryType: string;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (ev: never) => void): void;
  removeEventListener(type: string, listener: (ev: never) => void): void;
}
type StandardWebSocketConstructor = new (url: string) => StandardWebSocket;

const decoder = new TextDecoder();

/**
 * standardSocket opens a socket with the standard WebSocket API (browsers,
 * Deno, Node ≥ 22); ctor defaults to globalThis.WebSocket.
 */
export function standardSocket(ctor?: StandardWebSocketConstructor): SocketOpener {
  return (url, timeoutMs, handlers) => new Promise((resolve, reject) => {
    const WS = ctor ?? (globalThis as { WebSocket?: StandardWebSocketConstructor }).WebSocket;
    if (WS === undefined) {
      reject(new Error("this runtime has no global WebSocket (on Node, import @trellis/sdk, which uses the ws package)"));
      return;
    }
    let ws: StandardWebSocket;
    try {
      ws = new WS(url);
    } catch (err) {
      reject(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    ws.binaryType = "arraybuffer";
    let opened = false;
    const timer = setTimeout(() => {
      fail(new Error(`no WebSocket handshake within ${String(timeoutMs)} ms`));
      ws.close();
    }, timeoutMs);
    const fail = (err: Error): void => {
      clearTimeout(timer);
      if (!opened) reject(err);
    };
    ws.addEventListener("error", () => {
      // Browsers say nothing about why (on purpose); the close event follows.
      fail(new Error("the WebSocket connection failed"));
    });
    ws.addEventListener("open", () => {
      opened = true;
      clearTimeout(timer);
      resolve({
        send: (text) => ws.send(text),
        close: (code, reason) => ws.close(code, reason),
      });
    });
    ws.addEventListener("message", (ev: { data: unknown }) => {
      const d = ev.data;
      handlers.message(typeof d === "string" ? d : decoder.decode(d instanceof ArrayBuffer ? new Uint8Array(d) : (d as Uint8Array)));
    });
    ws.addEventListener("close", (ev: { code: number; reason: string }) => {
      clearTimeout(timer);
      if (!opened) {
        reject(new Error(`the WebSocket closed during the handshake (code ${String(ev.code)})`));
        return;
      }
      handlers.close(ev.code, ev.reason);
    });
  });
}
