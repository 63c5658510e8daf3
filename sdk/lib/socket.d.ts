/** Callbacks of an open socket. */
export interface SocketHandlers {
    /** One text frame (binary frames are decoded as UTF-8, PROTOCOL.md §2). */
    message(text: string): void;
    /** The socket closed; error says why when it failed. */
    close(code: number, reason: string, error?: Error): void;
}
/** An open WebSocket. */
export interface Socket {
    /** Sends one text frame; throws when the socket is not open. */
    send(text: string): void;
    /** Starts the closing handshake (the close callback follows). */
    close(code: number, reason: string): void;
    /**
     * Stops reading from the network until `resume` (Node's `ws` only): the
     * daemon then holds back its own stream to this connection, which is how
     * a slow consumer slows its own connection instead of growing a buffer.
     */
    pause?(): void;
    resume?(): void;
}
/** Opens a socket to url within timeoutMs, or rejects with an Error that says why. */
export type SocketOpener = (url: string, timeoutMs: number, handlers: SocketHandlers) => Promise<Socket>;
/** The subset of the standard WebSocket this file uses. */
interface StandardWebSocket {
    readonly readyState: number;
    binaryType: string;
    send(data: string): void;
    close(code?: number, reason?: string): void;
    addEventListener(type: string, listener: (ev: never) => void): void;
    removeEventListener(type: string, listener: (ev: never) => void): void;
}
type StandardWebSocketConstructor = new (url: string) => StandardWebSocket;
/**
 * standardSocket opens a socket with the standard WebSocket API (browsers,
 * Deno, Node ≥ 22); ctor defaults to globalThis.WebSocket.
 */
export declare function standardSocket(ctor?: StandardWebSocketConstructor): SocketOpener;
export {};
