// The live session view: the streamed transcript (text, reasoning, tool
// calls with arguments, progress and results, diffs), usage and context,
// the prompt queue, interrupt and mode switch. The SDK resumes the stream
// after a reconnect from the last event shown, so nothing is repeated or
// missed.

import type { SessionSummary, TrellisClient } from "@trellis/sdk";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";

import { idOf, sessionOf, useApprovals, WaitingCard, type ApprovalStore } from "./approvals.js";
import { renderMarkdown } from "./markdown.js";
import { Transcript, type Block, type Turn } from "./transcript.js";
import { count, duration, ErrorNote, message, money, useAction, useNow } from "./util.js";

export function SessionView(props: { client: TrellisClient; sessionId: string; approvals: ApprovalStore }) {
  const { client, sessionId } = props;
  const transcript = useMemo(() => new Transcript(), [sessionId]);
  const [, setVersion] = useState(0);
  const [summary, setSummary] = useState<SessionSummary | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const bottom = useRef<HTMLDivElement>(null);

  const [summaryTick, setSummaryTick] = useState(0);
  useEffect(() => {
    client.call("session.list", { includeClosed: true }).then(
      (r) => setSummary(r.sessions.find((s) => s.sessionId === sessionId)),
      (err: unknown) => setError(message(err)),
    );
  }, [client, sessionId, summaryTick]);

  useEffect(() => {
    // Every stored event, then the live ones; across reconnects the SDK
    // resumes from the last one delivered.
    const it = client.events(sessionId, { afterSeq: 0 });
    let frame = 0;
    const render = (): void => {
      if (frame !== 0) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
        setVersion((v) => v + 1);
        if (atBottom) requestAnimationFrame(() => bottom.current?.scrollIntoView({ block: "end" }));
      });
    };
    void (async () => {
      try {
        for await (const ev of it) {
          transcript.apply(ev);
          render();
        }
      } catch (err) {
        setError(message(err));
      }
    })();
    return () => {
      void it.return?.();
      if (frame !== 0) cancelAnimationFrame(frame);
    };
  }, [client, sessionId, transcript]);

  const approvals = useApprovals(props.approvals).filter((a) => sessionOf(a) === sessionId);
  const mode = transcript.mode ?? summary?.mode ?? "accept";
  const closed = summary?.status === "closed";
  return (
    <section class="session" aria-labelledby="session-title">
      <header class="view-head">
        <h2 id="session-title">{summary?.title ?? summary?.lastPrompt ?? "Session"} <span class="sub">{sessionId}</span></h2>
        {summary !== undefined && <span class="path">{summary.workdir}</span>}
      </header>
      <SessionActions client={client} sessionId={sessionId} summary={summary} running={transcript.running}
        onChanged={() => setSummaryTick((t) => t + 1)} onDeleted={() => { location.hash = "#/sessions"; }} />
      <SessionBar client={client} sessionId={sessionId} mode={mode} running={transcript.running} transcript={transcript} closed={closed} onError={setError} />
      <ErrorNote error={error} />
      <div class="transcript" aria-label="Transcript">
        {transcript.turns.map((t) => <TurnView key={t.turnId} turn={t} />)}
        {transcript.turns.length === 0 && <p class="empty">No turns yet: send a prompt below.</p>}
      </div>
      {approvals.length > 0 && (
        <div class="inline-approvals" aria-label="Approvals for this session">
          {approvals.map((item) => <WaitingCard key={idOf(item)} item={item} store={props.approvals} />)}
        </div>
      )}
      {transcript.queue.size > 0 && (
        <p class="queue" role="status">Queued: {[...transcript.queue.entries()].map(([id, pos]) => `#${String(pos)} ${id}`).join(", ")}</p>
      )}
      {!closed && <PromptForm client={client} sessionId={sessionId} running={transcript.running} onError={setError} />}
      <div ref={bottom} />
    </section>
  );
}

/**
 * SessionActions renames the session (session.rename: empty clears the
 * title), closes it (session.close: it leaves the open list and stays
 * readable) and deletes it with its history (session.close, then
 * session.deleteSaved), after a confirmation.
 */
function SessionActions(props: { client: TrellisClient; sessionId: string; summary: SessionSummary | undefined; running: boolean; onChanged: () => void; onDeleted: () => void }) {
  const { client, sessionId, summary } = props;
  const [editing, setEditing] = useState(false);
  const [title, setTitle] = useState("");
  const [confirming, setConfirming] = useState(false);
  const { busy, error, act } = useAction();
  const closed = summary?.status === "closed";
  const rename = (e: Event): void => {
    e.preventDefault();
    act(() => client.call("session.rename", { sessionId, title: title.trim() }), () => {
      setEditing(false);
      props.onChanged();
    });
  };
  const remove = (): void => {
    act(async () => {
      if (!closed) await client.call("session.close", { sessionId });
      const r = await client.call("session.deleteSaved", { sessionId });
      if (r.deleted === 0) throw new Error("The daemon kept the session: it is still live (on this daemon or another). Try again in a moment.");
    }, props.onDeleted);
  };
  return (
    <div class="session-actions">
      {editing
        ? (
          <form class="rename" onSubmit={rename}>
            <label>Title <input name="title" value={title} maxLength={200} placeholder="empty: named by the next prompt"
              onInput={(e) => setTitle((e.currentTarget as HTMLInputElement).value)} /></label>
            <button type="submit" disabled={busy}>Save title</button>
            <button type="button" onClick={() => setEditing(false)}>Cancel</button>
          </form>
        )
        : <button type="button" disabled={summary === undefined} onClick={() => { setTitle(summary?.title ?? ""); setEditing(true); }}>Rename</button>}
      {!closed && <button type="button" disabled={busy || summary === undefined}
        title="Interrupts a running turn; the session leaves the open list and stays readable"
        onClick={() => act(() => client.call("session.close", { sessionId }), props.onChanged)}>Close</button>}
      {confirming
        ? (
          <span class="confirm" role="group" aria-label="Confirm delete">
            Delete this session and its whole history{props.running ? " (its running turn is interrupted)" : ""}?{" "}
            <button type="button" class="deny" disabled={busy} onClick={remove}>Delete for good</button>
            <button type="button" onClick={() => setConfirming(false)}>Keep it</button>
          </span>
        )
        : <button type="button" class="deny" disabled={busy || summary === undefined} onClick={() => setConfirming(true)}>Delete…</button>}
      <ErrorNote error={error} />
    </div>
  );
}

function SessionBar(props: { client: TrellisClient; sessionId: string; mode: string; running: boolean; transcript: Transcript; closed: boolean; onError: (e: string) => void }) {
  const ctx = props.transcript.context;
  const last = props.transcript.turns.at(-1);
  const usage = props.transcript.turns.reduce((acc, t) => ({
    i: acc.i + t.inputTokens, o: acc.o + t.outputTokens,
    cost: t.cost === undefined ? acc.cost : (acc.cost ?? 0) + t.cost,
  }), { i: 0, o: 0, cost: undefined as number | undefined });
  const setMode = (mode: string): void => {
    props.client.call("session.setMode", { sessionId: props.sessionId, mode: mode as "plan" | "accept" | "auto" })
      .catch((err: unknown) => props.onError(message(err)));
  };
  return (
    <div class="session-bar">
      <label>Mode <select value={props.mode} disabled={props.closed} onChange={(e) => setMode((e.currentTarget as HTMLSelectElement).value)}>
        <option value="plan">plan</option><option value="accept">accept</option><option value="auto">auto</option>
      </select></label>
      <span class={`status ${props.running ? "status-running" : "status-idle"}`} role="status" aria-live="polite">
        {props.running ? "running" : last?.done !== undefined ? `last turn: ${last.done.reason}` : "idle"}
      </span>
      <span class="usage" title="tokens in / out, all turns">{count(usage.i)} in · {count(usage.o)} out{usage.cost !== undefined && <> · <span class="cost">{money(usage.cost)}</span></>}</span>
      {ctx !== undefined && (
        <span class="context">
          <label for="ctx-meter">Context</label>{" "}
          <meter id="ctx-meter" min={0} max={100} value={ctx.percent ?? 0}>{ctx.percent ?? 0}%</meter>{" "}
          {ctx.percent !== null ? `${ctx.percent.toFixed(0)}%` : `${String(ctx.used)} tokens`}
        </span>
      )}
      <button type="button" class="interrupt" disabled={!props.running}
        onClick={() => props.client.call("session.interrupt", { sessionId: props.sessionId }).catch((err: unknown) => props.onError(message(err)))}>
        Interrupt
      </button>
    </div>
  );
}

function PromptForm(props: { client: TrellisClient; sessionId: string; running: boolean; onError: (e: string) => void }) {
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const send = (e?: Event): void => {
    e?.preventDefault();
    if (text.trim() === "") return;
    setBusy(true);
    props.client.call("session.prompt", { sessionId: props.sessionId, text }).then(
      () => {
        setText("");
        setBusy(false);
      },
      (err: unknown) => {
        props.onError(message(err));
        setBusy(false);
      },
    );
  };
  return (
    <form class="prompt" onSubmit={send}>
      <label for="prompt-text" class="sr-only">Prompt</label>
      <textarea id="prompt-text" rows={3} value={text} placeholder={props.running ? "Queue a prompt (runs after this turn)…" : "Ask the agent… (Ctrl+Enter sends)"}
        onInput={(e) => setText((e.currentTarget as HTMLTextAreaElement).value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send();
        }} />
      <button type="submit" disabled={busy || text.trim() === ""}>{props.running ? "Queue" : "Send"}</button>
    </form>
  );
}

function TurnView(props: { turn: Turn }) {
  const t = props.turn;
  return (
    <article class="turn" data-turn-id={t.turnId} aria-label={`Turn ${t.turnId}`}>
      <div class="user"><span class="who">{t.by ?? "Prompt"}</span><p>{t.user ?? t.prompt}</p></div>
      <div class="assistant">
        {t.blocks.map((b, i) => <BlockView key={i} block={b} />)}
      </div>
      <footer class="turn-foot">
        {t.done === undefined
          ? <span class="chip running">streaming…</span>
          : <span class={`chip done-${t.done.reason}`}>{t.done.reason}{t.done.synthetic ? " (daemon restarted)" : ""}</span>}
        <TurnTiming turn={t} />
        {t.calls > 0 && (
          <span class="usage" title={`tokens of this turn's ${String(t.calls)} model call${t.calls === 1 ? "" : "s"}`}>
            {count(t.inputTokens)} in · {count(t.outputTokens)} out{t.reasoningTokens > 0 ? ` (${count(t.reasoningTokens)} reasoning)` : ""}
            {t.cost !== undefined && <> · <span class="cost">{money(t.cost)}</span></>}
          </span>
        )}
      </footer>
    </article>
  );
}

/** MarkdownText shows the model's answer as sanitised markdown (src/markdown.ts). */
function MarkdownText(props: { text: string }) {
  const html = useMemo(() => renderMarkdown(props.text), [props.text]);
  return <div class="text md" dangerouslySetInnerHTML={{ __html: html }} />;
}

/** TurnTiming shows how long the turn took (turn.started to turn.done), or has run so far. */
function TurnTiming(props: { turn: Turn }) {
  const t = props.turn;
  const running = t.done === undefined && t.startedAt !== undefined;
  const now = useNow(1000, running);
  if (t.startedAt === undefined) return null;
  if (t.done === undefined) return <span class="timing" title="running for">{duration(now - t.startedAt)}</span>;
  if (t.endedAt === undefined) return null;
  return <span class="timing" title="from the turn's start to its end">{duration(t.endedAt - t.startedAt)}</span>;
}

/** Outputs longer than this many lines (or characters) are collapsed. */
const LONG_LINES = 20;
const LONG_CHARS = 4000;
/** What a collapsed output shows: its first (or, while it streams, its last) lines. */
const SHOWN_LINES = 10;

/**
 * Output shows a tool's arguments, output or result as plain text; a long
 * one is collapsed to its first lines (keep "head") or, while it streams,
 * its last ones (keep "tail"), with a button to show all of it.
 */
function Output(props: { cls: string; label: string; text: string; keep: "head" | "tail" }) {
  const [open, setOpen] = useState(false);
  const lines = props.text.split("\n");
  const long = lines.length > LONG_LINES || props.text.length > LONG_CHARS;
  if (!long) return <pre class={props.cls} aria-label={props.label}>{props.text}</pre>;
  let shown = props.text;
  if (!open) {
    shown = (props.keep === "head" ? lines.slice(0, SHOWN_LINES) : lines.slice(-SHOWN_LINES)).join("\n");
    if (shown.length > LONG_CHARS / 2) shown = props.keep === "head" ? shown.slice(0, LONG_CHARS / 2) : shown.slice(-LONG_CHARS / 2);
    shown = props.keep === "head" ? `${shown}\n…` : `…\n${shown}`;
  }
  const size = props.text.length < 1024 ? `${String(props.text.length)} B` : `${(props.text.length / 1024).toFixed(1)} kB`;
  return (
    <div class="long-output">
      <pre class={`${props.cls}${open ? "" : " collapsed"}`} aria-label={props.label}>{shown}</pre>
      <button type="button" class="more" aria-expanded={open} onClick={() => setOpen(!open)}>
        {open ? `Show less of the ${props.label}` : `Show all ${String(lines.length)} lines of the ${props.label} (${size})`}
      </button>
    </div>
  );
}

function BlockView(props: { block: Block }) {
  const b = props.block;
  switch (b.type) {
    case "text":
      return <MarkdownText text={b.text} />;
    case "reasoning":
      return <details class="reasoning" open><summary>Reasoning</summary><div class="text-r">{b.text}</div></details>;
    case "tool":
      return (
        <div class={`tool-call ${b.result === undefined ? "pending" : b.result.ok ? "ok" : "failed"}`}>
          <div class="tool-head"><span class="tool">{b.name}</span>
            {b.result === undefined ? <span class="chip running">running</span> : <span class="chip">{b.result.ok ? "ok" : "failed"}</span>}
            {b.startedAt !== undefined && b.endedAt !== undefined && <span class="timing" title="how long the tool ran">{duration(b.endedAt - b.startedAt)}</span>}</div>
          {b.args !== undefined && <Output cls="args" label="arguments" text={JSON.stringify(b.args, null, 2)} keep="head" />}
          {b.progress !== "" && b.result === undefined && <Output cls="progress" label="output so far" text={b.progress + (b.truncated ? "\n…(truncated)" : "")} keep="tail" />}
          {b.result !== undefined && (
            <Output cls="result" label="result" text={b.result.ok ? b.result.output : (b.result.error ?? b.result.output)} keep="head" />
          )}
        </div>
      );
    case "diff":
      return (
        <figure class="diff">
          <figcaption>{b.path}</figcaption>
          <pre>{b.patch.split("\n").map((line, i) => (
            <span key={i} class={line.startsWith("+++") || line.startsWith("---") ? "d-file" : line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : line.startsWith("@@") ? "d-hunk" : ""}>{line}{"\n"}</span>
          ))}</pre>
        </figure>
      );
    case "error":
      return <p class="error-event" role="alert"><strong>{b.code}</strong>: {b.message}</p>;
    case "note":
      return <p class="note">{b.text}</p>;
  }
}
