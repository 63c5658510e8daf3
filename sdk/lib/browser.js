// @trellis/sdk for browsers (and any runtime with a global WebSocket): the
// same client as the Node entry, without daemon.json discovery and without a
// single Node import. The web console is built on it.
import { TrellisClient } from "./client.js";
import { standardSocket } from "./socket.js";
export * from "./protocol.js";
export { SDK_VERSION, TrellisClient, } from "./client.js";
export { Session, Turn } from "./session.js";
export { TrellisConnectionError, TrellisError } from "./errors.js";
export { standardSocket } from "./socket.js";
/**
 * connect opens a WebSocket to the daemon with the global WebSocket and
 * completes system.hello; see the Node entry for the details. Pass
 * `endpoint` to supply a fresh token on reconnect.
 */
export function connect(options) {
    return TrellisClient.connect({ socket: standardSocket(), ...options });
}
