// A small time series as inline SVG (no chart library): one dot per
// report (window end, value), the threshold as a dashed line when known.
// Built with DOM calls only (no markup strings, so no injection and no
// inline styles under the page's Content-Security-Policy). Cost: linear
// in the points drawn (the caller bounds them).

import type { Threshold } from "./threshold";

export interface Point {
  t: number; // window end, milliseconds since the epoch
  v: number;
}

const NS = "http://www.w3.org/2000/svg";
const W = 600;
const H = 120;
const PAD = { left: 56, right: 8, top: 8, bottom: 18 };

function el(name: string, attrs: Record<string, string | number>, text?: string): SVGElement {
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

export function chart(points: Point[], threshold: Threshold | undefined): SVGSVGElement {
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
  svg.append(el("text", { x: 4, y: PAD.top + 8, class: "axis" }, compact(hi)));
  svg.append(el("text", { x: 4, y: H - PAD.bottom, class: "axis" }, compact(lo)));
  svg.append(el("text", { x: PAD.left, y: H - 4, class: "axis" }, new Date(t0).toISOString().slice(11, 23)));
  svg.append(el("text", { x: W - PAD.right, y: H - 4, class: "axis", "text-anchor": "end" }, new Date(t1).toISOString().slice(11, 23)));
  if (threshold) {
    const ty = y(threshold.value);
    svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: ty, y2: ty, class: "threshold" }));
    svg.append(el("text", { x: W - PAD.right, y: ty - 3, class: "axis", "text-anchor": "end" }, `${threshold.op} ${compact(threshold.value)}`));
  }
  for (const p of points) {
    const c = el("circle", { cx: x(p.t), cy: y(p.v), r: 2.5, class: "point" });
    c.append(el("title", {}, `${new Date(p.t).toISOString()}: ${p.v}`));
    svg.append(c);
  }
  return svg;
}

/** Milliseconds since the epoch of an RFC 3339 UTC time with any number of fractional digits. */
export function rfc3339Ms(text: string): number {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(text);
  if (!m) return Date.parse(text);
  const whole = Date.parse(`${m[1]}Z`);
  const frac = m[2] ? Number(`0.${m[2]}`) * 1000 : 0;
  return whole + frac;
}
