// @trellis/sdk: a TypeScript client of the Trellis daemon's JSON-RPC 2.0
// over WebSocket protocol (PROTOCOL.md). The protocol's types come from the
// generated protocol.ts; the client, errors and daemon discovery are here.

export * from "./protocol.js";
export {
  connect,
  SDK_VERSION,
  TrellisClient,
  type ApprovalContext,
  type ApprovalHandler,
  type CallArgs,
  type CallOptions,
  type ConnectOptions,
  type EventsOptions,
} from "./client.js";
export { DaemonInfoError, TrellisConnectionError, TrellisError, type JsonRpcErrorObject } from "./errors.js";
export { defaultHome, readDaemonInfo, type DaemonInfo } from "./daemon-info.js";
