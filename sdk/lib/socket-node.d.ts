import type { Socket, SocketHandlers } from "./socket.js";
/**
 * nodeSocket opens sockets with the `ws` package; for `wss://` it trusts
 * the PEM certificates in ca when given, else the system's roots.
 */
export declare const nodeSocket: (url: string, timeoutMs: number, handlers: SocketHandlers, ca?: string) => Promise<Socket>;
