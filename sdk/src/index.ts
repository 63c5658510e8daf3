// @trellis/sdk for Node: a TypeScript client of the Trellis daemon's
// JSON-RPC 2.0 over WebSocket protocol (PROTOCOL.md). The protocol's types
// come from the generated protocol.ts; the client, errors and daemon
// discovery are here. Browsers get ./browser.js (no Node imports).

import { TrellisClient, type ConnectOptions, type Endpoint } from "./client.js";
import { readDaemonInfo } from "./daemon-info.js";
import { nodeSocket } from "./socket-node.js";

export * from "./protocol.js";
export {
  SDK_VERSION,
  TrellisClient,
  type ApprovalContext,
  type ApprovalHandler,
  type CallArgs,
  type CallOptions,
  type ClientEvents,
  type ClientState,
  type EventsOptions,
  type Endpoint,
  type ReconnectOptions,
} from "./client.js";
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
  if (endpoint === undefined && fromFile) {
    const home = options.home;
    endpoint = async (): Promise<Endpoint> => {
      const info = await readDaemonInfo(home);
      return { url: info.url, token: info.token };
    };
  }
  let { url, token } = options;
  if ((url === undefined || token === undefined) && endpoint !== undefined) {
    const ep = await endpoint();
    url ??= ep.url;
    token ??= ep.token;
  }
  const { home: _home, ...rest } = options;
  return TrellisClient.connect({
    socket: nodeSocket,
    ...rest,
    url: url ?? "",
    token: token ?? "",
    ...(endpoint !== undefined ? { endpoint } : {}),
  });
}
