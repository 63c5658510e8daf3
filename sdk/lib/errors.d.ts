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
export declare class TrellisError extends Error {
    readonly name = "TrellisError";
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
    constructor(method: string, error: JsonRpcErrorObject);
}
/**
 * TrellisConnectionError means the daemon could not be reached, or the
 * connection closed before an answer arrived. `cause` holds the underlying
 * error when there is one.
 */
export declare class TrellisConnectionError extends Error {
    readonly name = "TrellisConnectionError";
    /** The WebSocket URL of the connection. */
    readonly url: string;
    constructor(url: string, message: string, options?: {
        cause?: unknown;
    });
}
/**
 * DaemonInfoError means daemon.json could not be used: it is missing (no
 * daemon runs for that home), names a process that is gone (stale), or is
 * not valid.
 */
export declare class DaemonInfoError extends Error {
    readonly name = "DaemonInfoError";
    /** Why daemon.json could not be used. */
    readonly reason: "missing" | "stale" | "invalid";
    /** The daemon.json path that was read. */
    readonly path: string;
    constructor(reason: "missing" | "stale" | "invalid", path: string, message: string, options?: {
        cause?: unknown;
    });
}
/** isRecord reports whether v is a plain JSON object. */
export declare function isRecord(v: unknown): v is Record<string, unknown>;
