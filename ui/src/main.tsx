// The console's entry: log in (fragment code or API key → cookie →
// credential in memory), connect with the SDK, then render the app.

import { render } from "preact";
import { useState } from "preact/hooks";

import { App } from "./app.js";
import { fetchToken, loginFromFragment, loginWithKey } from "./auth.js";
import { openClient } from "./connection.js";
import "./style.css";

const root = document.getElementById("root")!;
root.textContent = ""; // the "Loading…" placeholder is not Preact's to replace

function LoginNeeded(props: { error?: string }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(props.error);
  const [busy, setBusy] = useState(false);
  const submit = (e: Event) => {
    e.preventDefault();
    setBusy(true);
    loginWithKey(key.trim()).then(
      () => location.reload(),
      (err: unknown) => {
        setError(err instanceof Error ? err.message : String(err));
        setBusy(false);
      },
    );
  };
  return (
    <main class="login" aria-labelledby="login-title">
      <h1 id="login-title">Trellis console</h1>
      {error !== undefined && <p class="error" role="alert">{error}</p>}
      <form class="key-login" onSubmit={submit}>
        <label for="api-key">API key</label>
        <input id="api-key" type="password" autocomplete="off" value={key} onInput={(e) => setKey(e.currentTarget.value)} />
        <button type="submit" disabled={busy || key.trim() === ""}>Log in</button>
      </form>
      <p>Or, on the daemon's machine, run:</p>
      <pre><code>trellis ui</code></pre>
      <p>and open the link it prints (it works once, for two minutes).</p>
    </main>
  );
}

async function start(): Promise<void> {
  let loginError: string | undefined;
  try {
    await loginFromFragment();
  } catch (err) {
    loginError = err instanceof Error ? err.message : String(err);
  }
  const token = await fetchToken();
  if (token === undefined) {
    render(<LoginNeeded {...(loginError !== undefined ? { error: loginError } : {})} />, root);
    return;
  }
  const client = await openClient(token);
  render(<App client={client} />, root);
}

start().catch((err: unknown) => {
  render(<LoginNeeded error={`Could not reach the daemon: ${err instanceof Error ? err.message : String(err)}`} />, root);
});
