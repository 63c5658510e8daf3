// Daemon status: version, protocol, counters, providers and limits.

import type { TrellisClient } from "@trellis/sdk";

import { ago, ErrorNote, useLoad } from "./util.js";

export function StatusView(props: { client: TrellisClient; state: string }) {
  const { client } = props;
  const info = useLoad(() => client.call("system.info", {}), [props.state], 5_000);
  const providers = useLoad(() => client.call("provider.list", {}), [props.state]);
  const hello = client.state === "open" ? client.hello : undefined;
  return (
    <section aria-labelledby="status-title">
      <header class="view-head"><h2 id="status-title">Daemon</h2>
        <button type="button" onClick={() => { info.reload(); providers.reload(); }}>Refresh</button></header>
      <ErrorNote error={info.error} />
      {info.data !== undefined && (
        <dl class="facts wide">
          <dt>Version</dt><dd>{info.data.version}</dd>
          <dt>Protocol</dt><dd>{info.data.protocolVersion}</dd>
          <dt>Connection</dt><dd>{props.state} · {client.url}</dd>
          <dt>Started</dt><dd>{ago(info.data.startedAt)} (pid {info.data.pid})</dd>
          <dt>Home</dt><dd class="path">{info.data.home}</dd>
          <dt>Store</dt><dd>{info.data.store}</dd>
          <dt>Ports</dt><dd>HTTP {info.data.port} · gRPC {info.data.grpcPort}</dd>
          <dt>Now</dt><dd>{info.data.counters.sessions} sessions · {info.data.counters.runningTurns} running turns · {info.data.counters.jobs} jobs · {info.data.counters.connections} connections · {info.data.counters.gatewayBindings} gateway bindings</dd>
        </dl>
      )}
      {hello !== undefined && (
        <>
          <h3>Limits</h3>
          <dl class="facts wide">
            <dt>Largest frame</dt><dd>{(hello.limits.maxFrameBytes / (1 << 20)).toFixed(0)} MiB</dd>
            <dt>Requests in flight</dt><dd>{hello.limits.maxInFlight}</dd>
            <dt>Batch</dt><dd>{hello.limits.maxBatch}</dd>
          </dl>
          <h3>Capabilities</h3>
          <ul class="chips">{hello.capabilities.map((c) => <li key={c}>{c}</li>)}</ul>
        </>
      )}
      <h3>Providers</h3>
      <ErrorNote error={providers.error} />
      {providers.data !== undefined && (
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Vendor</th><th scope="col">Default model</th><th scope="col">Configured</th><th scope="col">Base URL</th></tr></thead>
          <tbody>{providers.data.providers.map((p) => (
            <tr key={p.vendor}><td>{p.label}{p.default && <span class="chip">default</span>}</td><td>{p.defaultModel}</td>
              <td>{p.configured ? "yes" : "no"}</td><td class="path">{p.baseUrl || "—"}</td></tr>
          ))}</tbody>
        </table></div>
      )}
    </section>
  );
}
