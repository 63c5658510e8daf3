// The console's entry: log in (fragment code → cookie → token in memory),
// connect with the SDK, then render the app.

import { render } from "preact";

import { App } from "./app.js";
import { fetchToken, loginFromFragment } from "./auth.js";
import { openClient } from "./connection.js";
import "./style.css";

const root = document.getElementById("root")!;
root.textContent = ""; // the "Loading…" placeholder is not Preact's to replace

function LoginNeeded(props: { error?: string }) {
  return (
    <main class="login" aria-labelledby="login-title">
      <h1 id="login-title">Trellis console</h1>
      {props.error !== undefined && <p class="error" role="alert">{props.error}</p>}
      <p>This page needs a login link. In a terminal, run:</p>
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
