// @trellis/sdk for Node: a TypeScript client of the Trellis daemon's
// JSON-RPC 2.0 over WebSocket protocol (PROTOCOL.md). The protocol's types
// come from the generated protocol.ts; the client, errors and daemon
// discovery are here. Browsers get ./browser.js (no Node imports).

import { readFile } from "node:fs/promises";
import { join } from "node:path";

import { TrellisClient, type ConnectOptions, type Endpoint } from "./client.js";
import { readDaemonInfo, type DaemonInfo } from "./daemon-info.js";
import { DaemonInfoError } from "./errors.js";
import { nodeSocket } from "./socket-node.js";

export * from "./protocol.js";
export {
  SDK_VERSION,
  TrellisClient,
  type ApprovalContext,
  type ApprovalHandler,
  type QuestionHandler,
  type LendTool,
  type ToolCallHandler,
  type CallArgs,
  type CallOptions,
  type ClientEvents,
  type ClientState,
  type EventsOptions,
  type Endpoint,
  type ReconnectOptions,
} from "./client.js";
export { Session, Turn, type PromptOptions, type TurnResult } from "./session.js";
export { DaemonInfoError, TrellisConnectionError, TrellisError, type JsonRpcErrorObject } from "./errors.js";
export { defaultHome, readDaemonInfo, type DaemonInfo } from "./daemon-info.js";
export { standardSocket, type Socket, type SocketHandlers, type SocketOpener } from "./socket.js";

/** Options of the Node `connect`: ConnectOptions where url and token may come from daemon.json. */
export interface NodeConnectOptions extends Omit<ConnectOptions, "url" | "token"> {
  /** The daemon's WebSocket URL; default: from `<home>/daemon.json`. */
  url?: string;
  /** The daemon's auth token; default: from `<home>/daemon.json`. */
  token?: string;
  /**
   * The daemon's home directory (default $TRELLIS_HOME, else ~/.trellis).
   * When given (readDaemonInfo's result carries it), or when url and token
   * are not, the client re-reads `<home>/daemon.json` before each reconnect
   * to follow a restarted daemon to its new port and token.
   */
  home?: string;
  /**
   * PEM certificates to trust for a `wss://` daemon. Default: the daemon's
   * own certificate (daemon.json's `tlsCert`, read again before each
   * reconnect so a renewed certificate is followed) when connecting through
   * a home, else the system's roots.
   */
  ca?: string;
}

export type { NodeConnectOptions as ConnectOptions };

/**
 * connect opens a WebSocket to the daemon (with the `ws` package) and
 * completes system.hello. It rejects with a TrellisConnectionError when the
 * daemon cannot be reached and with a TrellisError when hello is refused
 * (`unauthorized` for a bad token, `protocol_incompatible` for another
 * major version).
 *
 * `connect()` connects to the local daemon of $TRELLIS_HOME (else
 * ~/.trellis); `connect(await readDaemonInfo(home))` likewise, for home.
 */
export async function connect(options: NodeConnectOptions = {}): Promise<TrellisClient> {
  const fromFile = options.home !== undefined || options.url === undefined || options.token === undefined;
  let endpoint = options.endpoint;
  let ca = options.ca;
  if (endpoint === undefined && fromFile) {
    const home = options.home;
    endpoint = async (): Promise<Endpoint> => {
      const info = await readDaemonInfo(home);
      if (options.ca === undefined) ca = await readCert(info);
      return { url: info.url, token: info.token };
    };
  }
  let { url, token } = options;
  if ((url === undefined || token === undefined) && endpoint !== undefined) {
    const ep = await endpoint();
    url ??= ep.url;
    token ??= ep.token;
  }
  const { home: _home, ca: _ca, ...rest } = options;
  return TrellisClient.connect({
    socket: (u, timeoutMs, handlers) => nodeSocket(u, timeoutMs, handlers, ca),
    ...rest,
    url: url ?? "",
    token: token ?? "",
    ...(endpoint !== undefined ? { endpoint } : {}),
  });
}

// readCert reads the certificate a TLS daemon names in daemon.json.
async function readCert(info: DaemonInfo): Promise<string | undefined> {
  if (!info.tls || info.tlsCert === undefined) return undefined;
  try {
    return await readFile(info.tlsCert, "utf8");
  } catch (err) {
    throw new DaemonInfoError("invalid", join(info.home, "daemon.json"),
      `cannot read the daemon's certificate ${info.tlsCert} (daemon.json's "tlsCert"): ${(err as Error).message}`, { cause: err });
  }
}
