// A small time series as inline SVG (no chart library): one dot per
// report (window end, value), the threshold as a dashed line when known;
// both axes labelled (the value's name; the windows' end, UTC) with
// round ticks between their ends.
// Built with DOM calls only (no markup strings, so no injection and no
// inline styles under the page's Content-Security-Policy). Cost: linear
// in the points drawn (the caller bounds them).

import type { Threshold } from "./threshold";
import { clockTime, rfc3339OfMs } from "./time";

export interface Point {
  t: number; // window end, milliseconds since the epoch
  v: number;
  at?: string; // the window end as the report wrote it (nanoseconds), for the hover
}

const NS = "http://www.w3.org/2000/svg";
const W = 600;
const H = 140;
const PAD = { left: 60, right: 8, top: 8, bottom: 32 };

export function el(name: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A compact number: 12.3k, 4.5M. */
export function compact(v: number): string {
  const a = Math.abs(v);
  for (const [d, s] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]] as const) {
    if (a >= d) return `${+(v / d).toPrecision(3)}${s}`;
  }
  return `${+v.toPrecision(3)}`;
}

export function chart(points: Point[], threshold: Threshold | undefined, yTitle: string): SVGSVGElement {
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" }) as SVGSVGElement;
  const values = points.map((p) => p.v);
  if (threshold) values.push(threshold.value);
  let lo = Math.min(0, ...values);
  let hi = Math.max(...values, 1);
  if (hi === lo) hi = lo + 1;
  hi += (hi - lo) * 0.05;
  const t0 = Math.min(...points.map((p) => p.t));
  const t1 = Math.max(...points.map((p) => p.t));
  const x = (t: number) => PAD.left + (t1 === t0 ? 0.5 : (t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v: number) => H - PAD.bottom - ((v - lo) / (hi - lo)) * (H - PAD.top - PAD.bottom);
  const bottom = H - PAD.bottom;
  // y: round values between lo and hi, and the value's name.
  for (const v of niceTicks(lo, hi, 4)) {
    svg.append(el("line", { x1: PAD.left - 3, x2: PAD.left, y1: y(v), y2: y(v), class: "axis-line" }));
    svg.append(el("text", { x: PAD.left - 5, y: y(v) + 3, class: "axis", "text-anchor": "end" }, compact(v)));
  }
  svg.append(el("text", { x: 10, y: (PAD.top + bottom) / 2, class: "axis-title", "text-anchor": "middle", transform: `rotate(-90 10 ${(PAD.top + bottom) / 2})` }, yTitle));
  svg.append(el("line", { x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: bottom, class: "axis-line" }));
  svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: bottom, y2: bottom, class: "axis-line" }));
  // x: the first and last window ends, round times between.
  const xs = t1 > t0 ? niceTicks(t0, t1, 6) : [t0];
  for (const t of xs) {
    svg.append(el("line", { x1: x(t), x2: x(t), y1: bottom, y2: bottom + 3, class: "axis-line" }));
    svg.append(el("text", { x: x(t), y: bottom + 13, class: "axis", "text-anchor": "middle" }, clockTime(rfc3339OfMs(t))));
  }
  svg.append(el("text", { x: (PAD.left + W - PAD.right) / 2, y: H - 4, class: "axis-title", "text-anchor": "middle" }, "window end (UTC)"));
  if (threshold) {
    const ty = y(threshold.value);
    svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: ty, y2: ty, class: "threshold" }));
    svg.append(el("text", { x: W - PAD.right, y: ty - 3, class: "axis", "text-anchor": "end" }, `${threshold.op} ${compact(threshold.value)}`));
  }
  for (const p of points) {
    const c = el("circle", { cx: x(p.t), cy: y(p.v), r: 2.5, class: "point" });
    c.append(el("title", {}, `${p.at ?? new Date(p.t).toISOString()}: ${p.v}`));
    svg.append(c);
  }
  return svg;
}

/** Round values (1, 2 or 5 times a power of ten apart) within [lo, hi]:
 *  the step is the smallest such at least (hi - lo) / want, or a smaller
 *  one while it would leave fewer than two ticks. */
export function niceTicks(lo: number, hi: number, want: number): number[] {
  const span = hi - lo;
  if (!(span > 0) || !Number.isFinite(span)) return [lo];
  const raw = span / want;
  let pow = 10 ** Math.floor(Math.log10(raw));
  let m = [1, 2, 5, 10].find((x) => x * pow >= raw) ?? 10;
  // Whole multiples of the step, each computed afresh (no sum drifting;
  // no rounding to significant digits, which a time in ms since 1970,
  // 13 digits, would not survive).
  const multiples = (step: number) => {
    const out: number[] = [];
    for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) out.push(k * step);
    return out;
  };
  let out = multiples(m * pow);
  while (out.length < 2) {
    // The next smaller round step: 10 → 5 → 2 → 1 → 0.5 …
    if (m === 1) {
      m = 5;
      pow /= 10;
    } else m = m === 10 ? 5 : m === 5 ? 2 : 1;
    out = multiples(m * pow);
  }
  return out;
}

/** Milliseconds since the epoch of an RFC 3339 UTC time with any number of fractional digits. */
export function rfc3339Ms(text: string): number {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(text);
  if (!m) return Date.parse(text);
  const whole = Date.parse(`${m[1]}Z`);
  const frac = m[2] ? Number(`0.${m[2]}`) * 1000 : 0;
  return whole + frac;
}
