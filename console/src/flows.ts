// The flows behind a firing: the query a fired report makes of
// `/v1/flows` (its event, group and window, exact to the nanosecond),
// and the answer's flows-over-time view: one bar per top talker from its
// first to its last packet, the firing's window drawn over them, both
// axes labelled. Built with DOM calls only (no markup strings), as chart.ts.

import { el, niceTicks, rfc3339Ms } from "./chart";
import { clockTime, nsOf, rfc3339OfMs } from "./time";

export interface Talker {
  src_ip: string;
  dst_ip: string;
  src_port: number | null;
  dst_port: number | null;
  proto: number;
  vlan: number | null;
  vni: number | null;
  packets: number;
  bytes: number;
  records: number;
  first: string;
  last: string;
}

export interface FlowsAnswer {
  event: string;
  group: Record<string, unknown>;
  from: string;
  to: string;
  by: "bytes" | "packets";
  talkers: Talker[];
  total: { flows: number; records: number; packets: number; bytes: number };
  complete: boolean;
  /** A host's own answer: what it keeps (a manager's merged answer has none). */
  window?: { records: number; max_records: number; dropped: number };
  /** A manager's merged answer: a host listed fewer talkers than it counted. */
  truncated?: boolean;
  /** A manager's merged answer: the hosts that answered, with their totals. */
  hosts?: { host: string; flows: number; packets: number; bytes: number; complete: boolean; truncated: boolean }[];
  /** A manager's merged answer: the hosts that did not, and why. */
  missing?: { host: string; reason: string }[];
}

/** A manager's notes on its hosts' parts: who answered, who did not, what is cut. */
export function hostNotes(a: FlowsAnswer): { answered?: string; missing?: string; truncated?: string } {
  if (!a.hosts) return {};
  const answered = a.hosts.length
    ? `From ${a.hosts.length} host(s): ${a.hosts.map((h) => `${h.host} (${h.flows.toLocaleString("en-US")} flow(s)${h.complete ? "" : ", incomplete"})`).join(", ")}; a 5-tuple's parts are summed.`
    : "No host answered.";
  const missing = a.missing?.length ? `Missing hosts: ${a.missing.map((m) => `${m.host} (${m.reason})`).join("; ")}.` : undefined;
  const truncated = a.truncated ? "Truncated: a host counted more flows than it listed, so a flow below every host's top may belong in this one (the totals are exact)." : undefined;
  return { answered, missing, truncated };
}

/** What a fired report says of itself that the query needs. */
export interface Firing {
  event: string;
  window: { start: string; end: string };
  group: Record<string, unknown>;
}

/** The `/v1/flows` path of a firing's top talkers, or undefined when its window's times are not RFC 3339. */
export function flowsPath(f: Firing, by: "bytes" | "packets", top: number): string | undefined {
  const from = nsOf(f.window.start);
  const to = nsOf(f.window.end);
  if (from === undefined || to === undefined) return undefined;
  const q = new URLSearchParams({ event: f.event, group: JSON.stringify(f.group ?? {}), from: String(from), to: String(to), top: String(top), by });
  return `/v1/flows?${q.toString()}`;
}

const PROTOS: Record<number, string> = { 1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp" };

export function protoName(p: number): string {
  return PROTOS[p] ?? String(p);
}

/** An endpoint: `10.0.0.1:80`, `[fd00::1]:443`, or the address alone for flows without ports. */
export function endpoint(ip: string, port: number | null): string {
  if (port === null) return ip;
  return ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** Bytes with a unit, as the language counts them (1 KB = 1,000 bytes): `950 B`, `4.80 MB`. */
export function bytesText(n: number): string {
  for (const [d, s] of [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "KB"]] as const) {
    if (n >= d) return `${(n / d).toFixed(2)} ${s}`;
  }
  return `${n} B`;
}

// About the panel's width in CSS pixels (it spans the page), so that
// text is drawn near its own size.
const W = 1100;
const ROW = 18;
const PAD = { left: 48, right: 16, top: 20, bottom: 36 };

/** The flows-over-time view of an answer: a bar per talker (ranked, top down) over the time its records span, the window shaded. */
export function timeline(a: FlowsAnswer): SVGSVGElement {
  const n = a.talkers.length;
  const H = PAD.top + Math.max(n, 1) * ROW + PAD.bottom;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "timeline" }) as SVGSVGElement;
  const from = rfc3339Ms(a.from);
  const to = rfc3339Ms(a.to);
  const spans = a.talkers.map((t) => [rfc3339Ms(t.first), rfc3339Ms(t.last)] as const);
  const t0 = Math.min(from, ...spans.map((s) => s[0]));
  const t1 = Math.max(to, ...spans.map((s) => s[1]));
  const x = (t: number) => PAD.left + (t1 === t0 ? 0.5 : (t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const bottom = H - PAD.bottom;
  svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: bottom, y2: bottom, class: "axis-line" }));
  for (const t of t1 > t0 ? niceTicks(t0, t1, 6) : [t0]) {
    svg.append(el("line", { x1: x(t), x2: x(t), y1: bottom, y2: bottom + 3, class: "axis-line" }));
    // A label near either end is kept inside the view.
    const anchor = x(t) < PAD.left + 40 ? "start" : x(t) > W - PAD.right - 40 ? "end" : "middle";
    svg.append(el("text", { x: x(t), y: bottom + 13, class: "axis", "text-anchor": anchor }, clockTime(rfc3339OfMs(t))));
  }
  svg.append(el("text", { x: (PAD.left + W - PAD.right) / 2, y: H - 4, class: "axis-title", "text-anchor": "middle" }, "time (UTC): each flow's first to last packet; shaded: the firing's window"));
  svg.append(el("text", { x: 4, y: PAD.top - 7, class: "axis-title" }, "flow (rank)"));
  a.talkers.forEach((t, i) => {
    const y = PAD.top + i * ROW;
    svg.append(el("text", { x: PAD.left - 4, y: y + ROW - 4, class: "axis", "text-anchor": "end" }, `#${i + 1}`));
    const [s, e] = spans[i];
    const bar = el("rect", { x: x(s), y: y + 3, width: Math.max(x(e) - x(s), 2), height: ROW - 6, class: "flow", "data-rank": i + 1 });
    bar.append(el("title", {}, `#${i + 1} ${endpoint(t.src_ip, t.src_port)} → ${endpoint(t.dst_ip, t.dst_port)}: ${t.first} to ${t.last}`));
    svg.append(bar);
  });
  // Over the bars, see-through: the window stays visible on a flow that spans it.
  const win = el("rect", { x: x(from), y: PAD.top - 2, width: Math.max(x(to) - x(from), 2), height: bottom - PAD.top + 2, class: "window" });
  win.append(el("title", {}, `the firing's window: ${a.from} to ${a.to}`));
  svg.append(win);
  return svg;
}
