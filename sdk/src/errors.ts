// Errors raised by the SDK. A TrellisError is the daemon's answer to a call
// (PROTOCOL.md §2 "Errors"); a TrellisConnectionError means the call never
// got an answer because the connection could not be opened or went away.

import type { ErrorCode } from "./protocol.js";

/** The JSON-RPC error object as the daemon sends it. */
export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/**
 * TrellisError is a JSON-RPC error answered by the daemon: `code` is the
 * protocol's string code (`error.data.code`, e.g. "invalid_params"),
 * `numeric` the JSON-RPC code (e.g. -32602), `data` the whole `error.data`.
 */
export class TrellisError extends Error {
  override readonly name = "TrellisError";
  /** The protocol's string code, from `error.data.code` (e.g. "not_found"). */
  readonly code: ErrorCode | (string & {});
  /** The numeric JSON-RPC error code (e.g. -32004). */
  readonly numeric: number;
  /** `error.data` as sent: `{code, ...}` (e.g. `errorId`, `retryAfterMs`). */
  readonly data: Record<string, unknown>;
  /** The method whose call failed. */
  readonly method: string;
  /** The daemon's own message, without the method prefix. */
  readonly serverMessage: string;

  constructor(method: string, error: JsonRpcErrorObject) {
    const data = isRecord(error.data) ? error.data : {};
    const code = typeof data["code"] === "string" ? data["code"] : codeForNumeric(error.code);
    super(`${method}: ${error.message} (${code}, ${error.code})`);
    this.code = code;
    this.numeric = error.code;
    this.data = data;
    this.method = method;
    this.serverMessage = error.message;
  }
}

/**
 * TrellisConnectionError means the daemon could not be reached, or the
 * connection closed before an answer arrived. `cause` holds the underlying
 * error when there is one.
 */
export class TrellisConnectionError extends Error {
  override readonly name = "TrellisConnectionError";
  /** The WebSocket URL of the connection. */
  readonly url: string;

  constructor(url: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.url = url;
  }
}

/**
 * DaemonInfoError means daemon.json could not be used: it is missing (no
 * daemon runs for that home), names a process that is gone (stale), or is
 * not valid.
 */
export class DaemonInfoError extends Error {
  override readonly name = "DaemonInfoError";
  /** Why daemon.json could not be used. */
  readonly reason: "missing" | "stale" | "invalid";
  /** The daemon.json path that was read. */
  readonly path: string;

  constructor(reason: "missing" | "stale" | "invalid", path: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.reason = reason;
    this.path = path;
  }
}

// Errors without data.code (a JSON-RPC peer that is not a Trellis daemon)
// get the standard name of their numeric code.
function codeForNumeric(numeric: number): string {
  switch (numeric) {
    case -32700:
    case -32600:
    case -32602:
      return "invalid_params";
    case -32601:
      return "method_not_found";
    case -32603:
      return "internal";
    default:
      return "unknown";
  }
}

/** isRecord reports whether v is a plain JSON object. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
