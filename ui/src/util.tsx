// Small helpers shared by the views.

import { useCallback, useEffect, useState } from "preact/hooks";

/** The result of an async load: data, error, loading, and a reload function. */
export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
}

/** An action a view runs on a click or a submit: busy while it runs, its error. */
export interface Action {
  busy: boolean;
  error: string | undefined;
  /** act runs work, then (on success) then; the error of a failure is shown. */
  act: <T>(work: () => Promise<T>, then: (result: T) => void) => void;
}

/** useAction holds the state of one Action. */
export function useAction(): Action {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);
  const act = <T,>(work: () => Promise<T>, then: (result: T) => void): void => {
    setBusy(true);
    setError(undefined);
    work().then(
      (result) => {
        setBusy(false);
        then(result);
      },
      (err: unknown) => {
        setError(message(err));
        setBusy(false);
      },
    );
  };
  return { busy, error, act };
}

/** useLoad runs load on mount, when deps change, and every refreshMs when given. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], refreshMs?: number): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    let live = true;
    setLoading(true);
    load().then(
      (d) => {
        if (!live) return;
        setData(d);
        setError(undefined);
        setLoading(false);
      },
      (err: unknown) => {
        if (!live) return;
        setError(message(err));
        setLoading(false);
      },
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  useEffect(() => {
    if (refreshMs === undefined) return undefined;
    const t = setInterval(reload, refreshMs);
    return () => clearInterval(t);
  }, [refreshMs, reload]);
  return { data, error, loading, reload };
}

/** message is an error's text. */
export function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** ago says how long ago an RFC3339 time was, e.g. "3 min ago". */
export function ago(ts: string | null | undefined): string {
  if (ts === null || ts === undefined || ts === "") return "—";
  const ms = Date.now() - Date.parse(ts);
  if (!Number.isFinite(ms)) return ts;
  const s = Math.round(ms / 1000);
  if (s < 0) return `in ${until(-s)}`;
  if (s < 60) return `${String(s)} s ago`;
  if (s < 3600) return `${String(Math.round(s / 60))} min ago`;
  if (s < 86400) return `${String(Math.round(s / 3600))} h ago`;
  return new Date(ts).toLocaleDateString();
}

function until(s: number): string {
  if (s < 60) return `${String(s)} s`;
  if (s < 3600) return `${String(Math.round(s / 60))} min`;
  return `${String(Math.round(s / 3600))} h`;
}

/** when says when an RFC3339 time is, relative to now. */
export function when(ts: string | null | undefined): string {
  if (ts === null || ts === undefined || ts === "") return "—";
  const ms = Date.parse(ts) - Date.now();
  if (!Number.isFinite(ms)) return ts;
  return ms > 0 ? `in ${until(Math.round(ms / 1000))}` : ago(ts);
}

/** ErrorNote shows an error, announced to screen readers. */
export function ErrorNote(props: { error: string | undefined }) {
  if (props.error === undefined) return null;
  return <p class="error" role="alert">{props.error}</p>;
}

/** shortId shortens a prefixed random id for display. */
export function shortId(id: string): string {
  return id.length > 12 ? id.slice(0, 10) + "…" : id;
}

/** duration says how long ms milliseconds are, e.g. "0.4 s", "12.3 s", "2 min 5 s". */
export function duration(ms: number): string {
  if (ms < 60_000) return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${String(Math.floor(s / 60))} min ${String(s % 60)} s`;
  return `${String(Math.floor(s / 3600))} h ${String(Math.round((s % 3600) / 60))} min`;
}

const counts = new Intl.NumberFormat("en-US");

/** count writes a token count with thousands separators, e.g. "13,706". */
export function count(n: number): string {
  return counts.format(n);
}

/** money writes a cost in dollars: four decimals under a dollar, else two. */
export function money(usd: number): string {
  return `$${usd.toFixed(usd < 1 ? 4 : 2)}`;
}

/** useNow is the time, updated every ms milliseconds while on is true. */
export function useNow(ms: number, on = true): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!on) return undefined;
    setNow(Date.now());
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms, on]);
  return now;
}

/** bytes writes a size in bytes in human units, e.g. "812 B", "4.2 KiB", "1.5 MiB". */
export function bytes(n: number): string {
  if (n < 1024) return `${String(n)} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]!}`;
}
