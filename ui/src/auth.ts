// The console's login exchange with the daemon (facade/ui.go): a one-time
// code from `trellis ui` arrives in the URL fragment, is traded at once for
// an HttpOnly session cookie and removed from the URL — or a person types
// an API key, traded the same way; the credential the page needs for
// system.hello (the token or the key) is then fetched with that cookie and
// kept in memory only.

/** loginFromFragment trades a `#login=CODE` fragment for the session cookie; it returns whether there was one. */
export async function loginFromFragment(): Promise<boolean> {
  const m = /(?:^#|&)login=([A-Za-z0-9_-]+)/.exec(location.hash);
  if (m === null) return false;
  // The code must not stay in the URL (history, screenshots, shoulder surfing).
  history.replaceState(null, "", location.pathname + location.search);
  const r = await fetch("/ui/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: m[1] }),
    credentials: "same-origin",
  });
  if (!r.ok) throw new Error(await errorText(r));
  return true;
}

/** loginWithKey trades an API key for the session cookie; it rejects with the daemon's reason when the key is refused. */
export async function loginWithKey(key: string): Promise<void> {
  const r = await fetch("/ui/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key }),
    credentials: "same-origin",
  });
  if (!r.ok) throw new Error(await errorText(r));
}

/** fetchToken returns the daemon's token for a logged-in page, undefined when not logged in. */
export async function fetchToken(): Promise<string | undefined> {
  const r = await fetch("/ui/token", { credentials: "same-origin", cache: "no-store" });
  if (r.status === 401) return undefined;
  if (!r.ok) throw new Error(await errorText(r));
  const body = (await r.json()) as { token?: unknown };
  return typeof body.token === "string" ? body.token : undefined;
}

/** logout clears the session cookie. */
export async function logout(): Promise<void> {
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin" });
}

async function errorText(r: Response): Promise<string> {
  try {
    const body = (await r.json()) as { error?: { message?: string } };
    if (typeof body.error?.message === "string") return body.error.message;
  } catch {
    // not JSON
  }
  return `HTTP ${String(r.status)}`;
}
