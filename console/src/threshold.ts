// The thresholds an event's predicate compares its aggregates with, read
// from the event's canonical source (reports carry the values, not the
// thresholds; docs/reports.md). Only comparisons of one aggregate, exactly
// as a report names it (`sum(volume)`), with a number and optional unit
// are read (`sum(volume) > 40KB`, `1KB < sum(volume)`); anything else (a
// percentage, arithmetic on both sides) yields no threshold and the chart
// draws the value alone. Units as in docs/language.md "Numbers and units":
// rates are bytes per interval. Cost: linear in the source.

export interface Threshold {
  op: string;
  value: number;
}

const UNITS: Record<string, number> = {
  "": 1,
  B: 1,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  KiB: 2 ** 10,
  MiB: 2 ** 20,
  GiB: 2 ** 30,
  us: 1e3,
  ms: 1e6,
  s: 1e9,
};
const RATES: Record<string, number> = { bps: 1, Kbps: 1e3, Mbps: 1e6, Gbps: 1e9 };
const NUMBER = /^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$/;
const FLIP: Record<string, string> = { ">": "<", "<": ">", ">=": "<=", "<=": ">=", "=": "=", "==": "==", "!=": "!=" };

/** A number with its unit in base units, or undefined (a percentage, an unknown unit, not a number). */
export function quantity(text: string, intervalNs: number): number | undefined {
  const m = NUMBER.exec(text.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  if (m[2] in UNITS) return n * UNITS[m[2]];
  if (m[2] in RATES) return ((n * RATES[m[2]]) / 8) * (intervalNs / 1e9);
  return undefined;
}

/** The `when` clause of the first event of `source` (it may span lines, up to the next clause). */
export function predicateOf(source: string): string | undefined {
  const m = /^\s*when\s+([\s\S]*?)(?=^\s*(?:per|every|across|then|filter|event)\b|(?![\s\S]))/m.exec(source);
  return m ? m[1].replace(/\s+/g, " ").trim() : undefined;
}

/** The top-level terms of `pred` joined by `and`/`or`, and `not` removed (parentheses kept whole). */
function terms(pred: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  const words = /\s+(?:and|or)\s+|[()]/g;
  let m: RegExpExecArray | null;
  while ((m = words.exec(pred)) !== null) {
    if (m[0] === "(") depth++;
    else if (m[0] === ")") depth--;
    else if (depth === 0) {
      out.push(pred.slice(start, m.index));
      start = m.index + m[0].length;
    }
  }
  out.push(pred.slice(start));
  return out.map((t) => t.trim().replace(/^not\s+/, "")).flatMap((t) => (/^\(.*\)$/.test(t) ? terms(t.slice(1, -1)) : [t]));
}

/** The threshold of each aggregate compared with a constant in `source`'s predicate, by its name in reports. */
export function thresholds(source: string, intervalNs: number): Map<string, Threshold> {
  const out = new Map<string, Threshold>();
  const pred = predicateOf(source);
  if (pred === undefined) return out;
  for (const term of terms(pred)) {
    const m = comparison(term);
    if (!m) continue;
    const [left, op, right] = m;
    const r = quantity(right, intervalNs);
    const l = quantity(left, intervalNs);
    if (r !== undefined && l === undefined && isAggregate(left)) {
      if (!out.has(left.trim())) out.set(left.trim(), { op, value: r });
    } else if (l !== undefined && r === undefined && isAggregate(right)) {
      if (!out.has(right.trim())) out.set(right.trim(), { op: FLIP[op] ?? op, value: l });
    }
  }
  return out;
}

/** `left op right` split at the comparison outside parentheses (`count(x > 1) > 10` splits at the second `>`). */
function comparison(term: string): [string, string, string] | undefined {
  let depth = 0;
  for (let i = 0; i < term.length; i++) {
    const c = term[i];
    if (c === "(") depth++;
    else if (c === ")") depth--;
    else if (depth === 0 && "<>=!".includes(c)) {
      const op = term.startsWith("=", i + 1) ? term.slice(i, i + 2) : c;
      return [term.slice(0, i).trim(), op, term.slice(i + op.length).trim()];
    }
  }
  return undefined;
}

function isAggregate(text: string): boolean {
  return /^\s*[a-z_]+\(.*\)\s*$/.test(text);
}
