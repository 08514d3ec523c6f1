// Where the language's errors point in the text the page sent. The API
// returns its diagnostics rendered (ariadne, no colour), e.g.
//
//   [E0310] Error: unknown variable `volum`
//      ╭─[ request:2:12 ]
//    2 │   when sum(volum) > 1
//      │            ──┬──
//
// so spans are read back from it: the header gives line and column
// (1-based, in characters); the underline under that source line gives
// the length (its run of '─'/'┬' starting at that column). Without an
// underline the span is the word at the column (at least one character).
// Cost: linear in the rendered text.

export interface Span {
  line: number;
  col: number;
  len: number;
}

const UNDERLINE = /[─┬┴]/u;

export function spansOf(rendered: string, file = "request"): Span[] {
  const lines = rendered.split("\n");
  const header = new RegExp(`\\[ ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:(\\d+):(\\d+) \\]`);
  const spans: Span[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = header.exec(lines[i]);
    if (!m) continue;
    const line = Number(m[1]);
    const col = Number(m[2]);
    spans.push({ line, col, len: underlineAt(lines, i + 1, line, col) });
  }
  return spans;
}

/** The length of the underline at `col` under source line `line`, searched from row `from` to the next header. */
function underlineAt(lines: string[], from: number, line: number, col: number): number {
  const source = new RegExp(`^\\s*${line} │ `);
  for (let i = from; i < lines.length && !lines[i].includes("╭─["); i++) {
    const s = source.exec(lines[i]);
    if (!s) continue;
    const under = lines[i + 1];
    if (under === undefined) break;
    // The underline row's text starts at the same character offset as the source's.
    const chars = Array.from(under);
    const start = Array.from(s[0]).length + col - 1;
    let len = 0;
    while (start + len < chars.length && UNDERLINE.test(chars[start + len])) len++;
    if (len > 0) return len;
    const text = Array.from(lines[i].slice(s[0].length));
    let word = 0;
    while (col - 1 + word < text.length && /[\w.%]/u.test(text[col - 1 + word])) word++;
    return Math.max(word, 1);
  }
  return 1;
}

/** The span as UTF-16 offsets [start, end) in `source` (what a textarea's selection takes), clamped to the text. */
export function offsets(source: string, span: Span): [number, number] {
  const lines = source.split("\n");
  let start = 0;
  for (let i = 0; i < span.line - 1 && i < lines.length; i++) start += lines[i].length + 1;
  const row = Array.from(lines[span.line - 1] ?? "");
  const before = row.slice(0, span.col - 1).join("").length;
  const inside = row.slice(span.col - 1, span.col - 1 + span.len).join("").length;
  const a = Math.min(start + before, source.length);
  return [a, Math.min(a + Math.max(inside, span.len > 0 && a < source.length ? 1 : 0), source.length)];
}
