import { TrellisClient, type ConnectOptions } from "./client.js";
export * from "./protocol.js";
export { SDK_VERSION, TrellisClient, type ApprovalContext, type ApprovalHandler, type QuestionHandler, type LendTool, type ToolCallHandler, type CallArgs, type CallOptions, type ClientEvents, type ClientState, type EventsOptions, type Endpoint, type ReconnectOptions, } from "./client.js";
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
export declare function connect(options?: NodeConnectOptions): Promise<TrellisClient>;
