// The WebSocket under a TrellisClient, behind a small interface so that the
// client runs on Node (the `ws` package, which can pause reading) and in
// browsers (the global WebSocket) alike. This file imports nothing of Node.
const decoder = new TextDecoder();
/**
 * standardSocket opens a socket with the standard WebSocket API (browsers,
 * Deno, Node ≥ 22); ctor defaults to globalThis.WebSocket.
 */
export function standardSocket(ctor) {
    return (url, timeoutMs, handlers) => new Promise((resolve, reject) => {
        const WS = ctor ?? globalThis.WebSocket;
        if (WS === undefined) {
            reject(new Error("this runtime has no global WebSocket (on Node, import @trellis/sdk, which uses the ws package)"));
            return;
        }
        let ws;
        try {
            ws = new WS(url);
        }
        catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
        }
        ws.binaryType = "arraybuffer";
        let opened = false;
        const timer = setTimeout(() => {
            fail(new Error(`no WebSocket handshake within ${String(timeoutMs)} ms`));
            ws.close();
        }, timeoutMs);
        const fail = (err) => {
            clearTimeout(timer);
            if (!opened)
                reject(err);
        };
        ws.addEventListener("error", () => {
            // Browsers say nothing about why (on purpose); the close event follows.
            fail(new Error("the WebSocket connection failed"));
        });
        ws.addEventListener("open", () => {
            opened = true;
            clearTimeout(timer);
            resolve({
                send: (text) => ws.send(text),
                close: (code, reason) => ws.close(code, reason),
            });
        });
        ws.addEventListener("message", (ev) => {
            const d = ev.data;
            handlers.message(typeof d === "string" ? d : decoder.decode(d instanceof ArrayBuffer ? new Uint8Array(d) : d));
        });
        ws.addEventListener("close", (ev) => {
            clearTimeout(timer);
            if (!opened) {
                reject(new Error(`the WebSocket closed during the handshake (code ${String(ev.code)})`));
                return;
            }
            handlers.close(ev.code, ev.reason);
        });
    });
}
