// The live session view: the streamed transcript (text, reasoning, tool
// calls with arguments, progress and results, diffs, checkpoints of the
// workdir with their diffs), usage and context, the prompt queue, interrupt
// and mode switch, forking or rewinding the session at a checkpoint or a
// turn's end, and restoring or deleting a checkpoint. The SDK resumes the stream after a reconnect from the last
// event shown, so nothing is repeated or missed.

import { TrellisError, type SessionSummary, type TrellisClient } from "@trellis/sdk";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";

import { idOf, sessionOf, useApprovals, WaitingCard, type ApprovalStore } from "./approvals.js";
import { renderMarkdown } from "./markdown.js";
import { Transcript, type Block, type CheckpointBlock, type Turn } from "./transcript.js";
import { bytes, count, duration, ErrorNote, message, money, useAction, useLoad, useNow } from "./util.js";

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

  useEffect(() => {
    // checkpoint.delete leaves the checkpoint's event in the log: the rows
    // of checkpoints deleted before this view opened are taken off by the
    // list. Checkpoints are stored one at a time in seq order, so one
    // missing below the newest listed is deleted; one recorded after the
    // list was read is not judged. A list that fails leaves every row.
    let live = true;
    client.call("checkpoint.list", { sessionId }).then((r) => {
      if (!live) return;
      const newest = Math.max(0, ...r.checkpoints.map((c) => c.seq));
      const kept = new Set(r.checkpoints.map((c) => c.checkpointId));
      transcript.forgetMissing(kept, newest);
      setVersion((v) => v + 1);
    }, () => undefined);
    return () => {
      live = false;
    };
  }, [client, sessionId, transcript]);

  const approvals = useApprovals(props.approvals).filter((a) => sessionOf(a) === sessionId);
  const mode = transcript.mode ?? summary?.mode ?? "accept";
  const closed = summary?.status === "closed";
  const forget = (checkpointId: string): void => {
    transcript.forget(checkpointId);
    setVersion((v) => v + 1);
  };
  const at: Timeline = { client, sessionId, running: transcript.running, closed, forget };
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
        {transcript.before.length > 0 && (
          <div class="before-turns">{transcript.before.map((b, i) => <BlockView key={i} block={b} at={at} />)}</div>
        )}
        {transcript.turns.map((t) => <TurnView key={t.turnId} turn={t} at={at} />)}
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

function TurnView(props: { turn: Turn; at: Timeline }) {
  const t = props.turn;
  return (
    <article class={`turn${t.rewound ? " rewound" : ""}`} data-turn-id={t.turnId} aria-label={`Turn ${t.turnId}`}>
      <div class="user"><span class="who">{t.by ?? "Prompt"}</span><p>{t.user ?? t.prompt}</p>
        {t.rewound && <span class="chip rewound-chip" title="A rewind went back to before this turn: it stays in the log, the model no longer reads it">rewound</span>}</div>
      <div class="assistant">
        {t.blocks.map((b, i) => <BlockView key={i} block={b} at={props.at} />)}
      </div>
      <footer class="turn-foot">
        {t.done === undefined
          ? <span class="chip running">streaming…</span>
          : t.done.reason === "cut"
            ? <span class="chip done-cut" title="The log has no end for this turn: a fork copied the events up to a point inside it">ends here</span>
            : <span class={`chip done-${t.done.reason}`}>{t.done.reason}{t.done.synthetic ? " (daemon restarted)" : ""}</span>}
        <TurnTiming turn={t} />
        {t.calls > 0 && (
          <span class="usage" title={`tokens of this turn's ${String(t.calls)} model call${t.calls === 1 ? "" : "s"}`}>
            {count(t.inputTokens)} in · {count(t.outputTokens)} out{t.reasoningTokens > 0 ? ` (${count(t.reasoningTokens)} reasoning)` : ""}
            {t.cost !== undefined && <> · <span class="cost">{money(t.cost)}</span></>}
          </span>
        )}
        {t.doneSeq !== undefined && <SeqActions at={props.at} seq={t.doneSeq} what="after this turn" />}
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

function BlockView(props: { block: Block; at: Timeline }) {
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
          {b.checkpoint !== undefined && <CheckpointRow block={b.checkpoint} at={props.at} />}
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
          <DiffText patch={b.patch} label={`diff of ${b.path}`} />
        </figure>
      );
    case "checkpoint":
      return <CheckpointRow block={b} at={props.at} />;
    case "rewound":
      return (
        <p class="note rewound-note">
          Rewound to event {b.toSeq}{b.checkpointId !== null ? ", files included" : " (no checkpoint held the files: they were left as they were)"}:
          events {b.toSeq + 1}–{b.fromSeq} stay in the log, and the model no longer reads them.
        </p>
      );
    case "error":
      return <p class="error-event" role="alert"><strong>{b.code}</strong>: {b.message}</p>;
    case "note":
      return <p class="note">{b.text}</p>;
  }
}

/** DiffText shows a unified diff, its added and removed lines coloured. */
function DiffText(props: { patch: string; label: string }) {
  const lines = props.patch.endsWith("\n") ? props.patch.slice(0, -1).split("\n") : props.patch.split("\n");
  return (
    <pre class="diff-text" aria-label={props.label}>{lines.map((line, i) => (
      <span key={i} class={diffClass(line)}>{line}{"\n"}</span>
    ))}</pre>
  );
}

function diffClass(line: string): string {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) return "d-file";
  if (line.startsWith("Binary files ")) return "d-binary";
  if (line.startsWith("+")) return "d-add";
  if (line.startsWith("-")) return "d-del";
  if (line.startsWith("@@")) return "d-hunk";
  return "";
}

/** Timeline is what the rows of the transcript need to act on the session. */
interface Timeline {
  client: TrellisClient;
  sessionId: string;
  running: boolean;
  closed: boolean;
  /** forget takes a deleted checkpoint's row off the timeline. */
  forget: (checkpointId: string) => void;
}

const REASONS: Record<CheckpointBlock["reason"], string> = {
  tool: "before a tool",
  turn: "end of turn",
  restore: "restored",
  materialise: "materialised",
};

const SKIP_REASONS: Record<CheckpointBlock["skipped"][number]["reason"], string> = {
  ignored: "ignored",
  too_large: "too large",
  special: "not a file",
  unreadable: "unreadable",
};

/** Skipped paths shown before a "show all" button. */
const SHOWN_SKIPS = 5;

/**
 * CheckpointRow is a checkpoint on the timeline: why it was recorded, what
 * it holds, every path it skipped (a long list collapsed behind a button,
 * never dropped), its diff on demand, the fork and rewind actions at its
 * seq, and restoring or deleting the checkpoint.
 */
function CheckpointRow(props: { block: CheckpointBlock; at: Timeline }) {
  const b = props.block;
  const [open, setOpen] = useState(false);
  const [allSkips, setAllSkips] = useState(false);
  const skips = allSkips ? b.skipped : b.skipped.slice(0, SHOWN_SKIPS);
  const panel = `cp-diff-${String(b.seq)}`;
  return (
    <section class="checkpoint" aria-label={`Checkpoint at event ${String(b.seq)}`} data-checkpoint-id={b.checkpointId}>
      <div class="cp-head">
        <span class="cp-title">Checkpoint</span>
        <span class={`chip cp-${b.reason}`}>{REASONS[b.reason]}</span>
        {b.tool !== null && <span class="tool">{b.tool}</span>}
        <span class="cp-size">{count(b.files)} {b.files === 1 ? "file" : "files"} · {bytes(b.bytes)}</span>
        {b.restoredFrom !== null && <span class="sub">from {b.restoredFrom}</span>}
        <span class="sub" title="the checkpoint's event">#{b.seq}</span>
      </div>
      {b.skipped.length > 0 && (
        <div class="cp-skipped">
          <span class="sub">Not recorded ({b.skipped.length}):</span>
          <ul aria-label="Skipped paths">
            {skips.map((k) => (
              <li key={k.path}><code>{k.path}</code> <span class="skip-reason">{SKIP_REASONS[k.reason]}{k.reason === "too_large" ? `, ${bytes(k.size)}` : ""}</span></li>
            ))}
          </ul>
          {b.skipped.length > SHOWN_SKIPS && (
            <button type="button" class="more" aria-expanded={allSkips} onClick={() => setAllSkips(!allSkips)}>
              {allSkips ? "Show fewer skipped paths" : `Show all ${String(b.skipped.length)} skipped paths`}
            </button>
          )}
        </div>
      )}
      <div class="cp-actions">
        <button type="button" aria-expanded={open} aria-controls={open ? panel : undefined} onClick={() => setOpen(!open)}>
          {open ? "Hide diff" : "Diff"}
        </button>
        <SeqActions at={props.at} seq={b.seq} what="at this checkpoint" />
        <CheckpointActions at={props.at} block={b} />
      </div>
      {open && <CheckpointDiff id={panel} at={props.at} block={b} />}
    </section>
  );
}

/**
 * CheckpointDiff loads checkpoint.diff for a checkpoint: from the one before
 * it (when there is one), or from it to the session's current files.
 */
function CheckpointDiff(props: { id: string; at: Timeline; block: CheckpointBlock }) {
  const { client, sessionId } = props.at;
  const b = props.block;
  const [against, setAgainst] = useState<"previous" | "current">(b.previous !== undefined ? "previous" : "current");
  const params = against === "previous" && b.previous !== undefined
    ? { sessionId, from: b.previous, to: b.checkpointId }
    : { sessionId, from: b.checkpointId };
  const diff = useLoad(() => client.call("checkpoint.diff", params), [client, sessionId, b.checkpointId, against]);
  return (
    <div class="cp-diff" id={props.id}>
      <div class="cp-against">
        <label for={`${props.id}-against`}>Diff</label>{" "}
        <select id={`${props.id}-against`} value={against} onChange={(e) => setAgainst((e.currentTarget as HTMLSelectElement).value as "previous" | "current")}>
          {b.previous !== undefined && <option value="previous">from the previous checkpoint to this one</option>}
          <option value="current">from this checkpoint to the current files</option>
        </select>
      </div>
      {diff.loading && <p class="sub" role="status">Loading the diff…</p>}
      <ErrorNote error={diff.error === undefined ? undefined : `The diff could not be loaded: ${diff.error}`} />
      {!diff.loading && diff.error === undefined && diff.data !== undefined && (
        diff.data.files.length === 0
          ? <p class="sub" role="status">No changes.</p>
          : (
            <>
              <ul class="cp-files" aria-label="Changed paths">
                {diff.data.files.map((f) => (
                  <li key={f.path}><span class={`chip ch-${f.status}`}>{f.status}</span> <code>{f.path}</code>{f.kind !== "file" ? <span class="sub"> ({f.kind})</span> : null}</li>
                ))}
              </ul>
              {diff.data.diff !== "" && <DiffText patch={diff.data.diff} label="unified diff" />}
              {diff.data.truncated && <p class="note">The diff was cut at 8 MiB; the list above names every changed path.</p>}
            </>
          )
      )}
    </div>
  );
}

/** The daemon's workspace_changed refusal: its message and the diff of the files changed since the latest checkpoint. */
interface Changed {
  message: string;
  diff: string;
}

/**
 * putBack makes a call that puts a workdir's files back (checkpoint.restore,
 * session.rewind): true when it did; false when the daemon refused it with
 * workspace_changed, which refused is given. Other errors are thrown.
 */
async function putBack(call: () => Promise<unknown>, refused: (c: Changed) => void): Promise<boolean> {
  try {
    await call();
    return true;
  } catch (err) {
    if (err instanceof TrellisError && err.code === "workspace_changed") {
      refused({ message: err.serverMessage, diff: typeof err.data["diff"] === "string" ? err.data["diff"] : "" });
      return false;
    }
    throw err;
  }
}

/**
 * CheckpointActions restores the checkpoint's files into the workdir
 * (checkpoint.restore; the conversation is kept, and the daemon records a
 * checkpoint of the result) and deletes the checkpoint (checkpoint.delete),
 * each after a confirmation. When files changed since the latest checkpoint
 * other than by the session's tools the daemon refuses a restore with
 * workspace_changed, and says which: the restore can then be forced.
 */
function CheckpointActions(props: { at: Timeline; block: CheckpointBlock }) {
  const { client, sessionId, running, closed, forget } = props.at;
  const { checkpointId } = props.block;
  const { busy, error, act } = useAction();
  const [confirming, setConfirming] = useState<"restore" | "delete" | undefined>(undefined);
  const [changed, setChanged] = useState<Changed | undefined>(undefined);
  const cancel = (): void => {
    setConfirming(undefined);
    setChanged(undefined);
  };
  const restore = (force: boolean): void => {
    setChanged(undefined);
    act(async () => {
      if (await putBack(() => client.call("checkpoint.restore", { sessionId, checkpointId, force }), setChanged)) {
        setConfirming(undefined);
      }
    }, () => undefined);
  };
  const remove = (): void => {
    act(() => client.call("checkpoint.delete", { sessionId, checkpointId }), () => forget(checkpointId));
  };
  return (
    <div class="seq-actions" role="group" aria-label="Restore or delete this checkpoint">
      {!closed && confirming === undefined && (
        <button type="button" disabled={busy || running} onClick={() => setConfirming("restore")}
          title={running ? "A turn is running: restore when the session is idle" : "Put the workdir's files back as they were at this checkpoint; the conversation is kept"}>
          Restore files…
        </button>
      )}
      {confirming === undefined && (
        <button type="button" class="deny" disabled={busy} onClick={() => setConfirming("delete")}
          title="Delete this checkpoint and the contents no other checkpoint of the session holds">
          Delete checkpoint…
        </button>
      )}
      {confirming === "restore" && (
        <span class="confirm" role="group" aria-label="Confirm restore">
          {changed === undefined
            ? <>Put the workdir's files back as they were at this checkpoint? The conversation is kept; the restored files are recorded as a new checkpoint.{" "}</>
            : (
              <span class="refused">
                <span class="error" role="alert">{changed.message}</span>
                {changed.diff !== "" && <DiffText patch={changed.diff} label="files changed since the latest checkpoint" />}
              </span>
            )}
          <button type="button" class="deny" disabled={busy || running} onClick={() => restore(changed !== undefined)}>
            {changed === undefined ? "Restore" : "Restore anyway (lose those changes)"}
          </button>
          <button type="button" onClick={cancel}>Keep the files</button>
        </span>
      )}
      {confirming === "delete" && (
        <span class="confirm" role="group" aria-label="Confirm checkpoint delete">
          Delete this checkpoint? Its files can no longer be restored or diffed; the session's log keeps its event.{" "}
          <button type="button" class="deny" disabled={busy} onClick={remove}>Delete checkpoint</button>
          <button type="button" onClick={cancel}>Keep it</button>
        </span>
      )}
      <ErrorNote error={error} />
    </div>
  );
}

/**
 * SeqActions forks the session at seq (session.fork, then the new session
 * is shown) and, while the session is idle and open, rewinds it there after
 * a confirmation (session.rewind; when files changed outside the session's
 * tools the daemon refuses and says which, and the rewind can be forced).
 */
function SeqActions(props: { at: Timeline; seq: number; what: string }) {
  const { client, sessionId, running, closed } = props.at;
  const { busy, error, act } = useAction();
  const [confirming, setConfirming] = useState(false);
  const [changed, setChanged] = useState<Changed | undefined>(undefined);
  const fork = (): void => {
    act(() => client.call("session.fork", { sessionId, atSeq: props.seq }), (r) => {
      location.hash = `#/session/${r.sessionId}`;
    });
  };
  const rewind = (force: boolean): void => {
    setChanged(undefined);
    act(async () => {
      if (await putBack(() => client.call("session.rewind", { sessionId, atSeq: props.seq, force }), setChanged)) {
        setConfirming(false);
      }
    }, () => undefined);
  };
  return (
    <div class="seq-actions" role="group" aria-label={`Fork or rewind ${props.what}`}>
      <button type="button" disabled={busy} title={`A new session with this one's conversation and files as they were ${props.what}`} onClick={fork}>
        Fork from here
      </button>
      {!closed && !confirming && (
        <button type="button" disabled={busy || running} onClick={() => setConfirming(true)}
          title={running ? "A turn is running: rewind when the session is idle" : `Put the files and the conversation back as they were ${props.what}`}>
          Rewind to here…
        </button>
      )}
      {!closed && confirming && (
        <span class="confirm" role="group" aria-label="Confirm rewind">
          {changed === undefined
            ? <>Put the files and the conversation back as they were {props.what}? Later events stay in the log, marked rewound.{" "}</>
            : (
              <span class="refused">
                <span class="error" role="alert">{changed.message}</span>
                {changed.diff !== "" && <DiffText patch={changed.diff} label="files changed since the latest checkpoint" />}
              </span>
            )}
          <button type="button" class="deny" disabled={busy || running} onClick={() => rewind(changed !== undefined)}>
            {changed === undefined ? "Rewind" : "Rewind anyway (lose those changes)"}
          </button>
          <button type="button" onClick={() => { setConfirming(false); setChanged(undefined); }}>Keep it</button>
        </span>
      )}
      <ErrorNote error={error} />
    </div>
  );
}
