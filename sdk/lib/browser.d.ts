import { TrellisClient, type ConnectOptions } from "./client.js";
export * from "./protocol.js";
export { SDK_VERSION, TrellisClient, type ApprovalContext, type ApprovalHandler, type QuestionHandler, type LendTool, type ToolCallHandler, type CallArgs, type CallOptions, type ClientEvents, type ClientState, type ConnectOptions, type EventsOptions, type Endpoint, type ReconnectOptions, } from "./client.js";
export { Session, Turn, type PromptOptions, type TurnResult } from "./session.js";
export { TrellisConnectionError, TrellisError, type JsonRpcErrorObject } from "./errors.js";
export { standardSocket, type Socket, type SocketHandlers, type SocketOpener } from "./socket.js";
/**
 * connect opens a WebSocket to the daemon with the global WebSocket and
 * completes system.hello; see the Node entry for the details. Pass
 * `endpoint` to supply a fresh token on reconnect.
 */
export declare function connect(options: ConnectOptions): Promise<TrellisClient>;
