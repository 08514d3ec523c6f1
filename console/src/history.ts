// The history panel's filter: by event, and by when the reports' windows
// start (`/v1/reports/history`'s `event`, `from`, `to`). Times are typed
// as the page shows them (`2026-12-07 13:16:48.700 UTC`) or as the API
// writes them (RFC 3339 UTC), and sent as exact nanoseconds. Pure
// functions, no DOM.

import { nsOf } from "./time";

export interface HistoryFilter {
  event: string;
  from: string;
  to: string;
}

/** Nanoseconds of a typed UTC time: `YYYY-MM-DD HH:MM[:SS[.fraction]]`,
 *  with `T` or a space, and an optional `Z` or ` UTC`; undefined if not one. */
export function typedNs(text: string): bigint | undefined {
  const m = /^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d)(:\d\d(?:\.\d{1,9})?)?(?:Z| UTC)?$/.exec(text.trim());
  if (!m) return undefined;
  return nsOf(`${m[1]}T${m[2]}${m[3] ?? ":00"}Z`);
}

/** The query of a history page (`at`: a cursor, or the newest) under
 *  `filter`, or what is wrong with the filter. Empty fields filter nothing. */
export function historyQuery(filter: HistoryFilter, at: { before?: number; after?: number }, limit: number): { query: string } | { error: string } {
  const q = new URLSearchParams({ limit: String(limit) });
  const event = filter.event.trim();
  if (event) q.set("event", event);
  const bound = (name: "from" | "to", text: string): string | undefined => {
    if (!text.trim()) return undefined;
    const ns = typedNs(text);
    if (ns === undefined) throw new Error(`${name}: \`${text.trim()}\` is not a UTC time such as 2026-12-07 13:16:48 (or RFC 3339)`);
    q.set(name, String(ns));
    return String(ns);
  };
  try {
    const from = bound("from", filter.from);
    const to = bound("to", filter.to);
    if (from !== undefined && to !== undefined && BigInt(to) <= BigInt(from)) return { error: "to must be after from" };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
  if (at.before !== undefined) q.set("before", String(at.before));
  if (at.after !== undefined) q.set("after", String(at.after));
  return { query: q.toString() };
}
