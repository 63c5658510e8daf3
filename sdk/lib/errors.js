// Errors raised by the SDK. A TrellisError is the daemon's answer to a call
// (PROTOCOL.md §2 "Errors"); a TrellisConnectionError means the call never
// got an answer because the connection could not be opened or went away.
/**
 * TrellisError is a JSON-RPC error answered by the daemon: `code` is the
 * protocol's string code (`error.data.code`, e.g. "invalid_params"),
 * `numeric` the JSON-RPC code (e.g. -32602), `data` the whole `error.data`.
 */
export class TrellisError extends Error {
    name = "TrellisError";
    /** The protocol's string code, from `error.data.code` (e.g. "not_found"). */
    code;
    /** The numeric JSON-RPC error code (e.g. -32004). */
    numeric;
    /** `error.data` as sent: `{code, ...}` (e.g. `errorId`, `retryAfterMs`). */
    data;
    /** The method whose call failed. */
    method;
    /** The daemon's own message, without the method prefix. */
    serverMessage;
    constructor(method, error) {
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
    name = "TrellisConnectionError";
    /** The WebSocket URL of the connection. */
    url;
    constructor(url, message, options) {
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
    name = "DaemonInfoError";
    /** Why daemon.json could not be used. */
    reason;
    /** The daemon.json path that was read. */
    path;
    constructor(reason, path, message, options) {
        super(message, options);
        this.reason = reason;
        this.path = path;
    }
}
// Errors without data.code (a JSON-RPC peer that is not a Trellis daemon)
// get the standard name of their numeric code.
function codeForNumeric(numeric) {
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
export function isRecord(v) {
    return typeof v === "object" && v !== null && !Array.isArray(v);
}
