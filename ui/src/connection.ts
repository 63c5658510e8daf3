// The console's one connection to the daemon, through the project's SDK: it
// reconnects by itself and resumes every session the page watches.

import { connect, type TrellisClient } from "@trellis/sdk";

import { fetchToken } from "./auth.js";

/** openClient connects to the daemon that served this page. */
export function openClient(token: string): Promise<TrellisClient> {
  const url = new URL("/ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  let current = token;
  return connect({
    url: url.href,
    token,
    clientKind: "console",
    clientId: tabClientId(),
    // A restarted daemon keeps its token; ask again in case it changed.
    endpoint: async () => {
      current = (await fetchToken().catch(() => undefined)) ?? current;
      return { url: url.href, token: current };
    },
    reconnect: { initialDelayMs: 100, maxDelayMs: 2_000 },
    offlineCallTimeoutMs: 120_000,
    onError: (err) => console.warn("trellis:", err),
  });
}

// tabClientId is stable for this tab (across reloads), so that the sessions
// it created are re-bound to it and their approvals reach it.
function tabClientId(): string {
  const key = "trellis-console-client-id";
  let id = sessionStorage.getItem(key);
  if (id === null) {
    const b = new Uint8Array(8);
    crypto.getRandomValues(b);
    id = "console-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    sessionStorage.setItem(key, id);
  }
  return id;
}
