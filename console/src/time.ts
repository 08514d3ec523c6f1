// Times as the API writes them, shown to people. The API gives each time
// twice: as integer nanoseconds since 1970 (`start_ns`), which a JS
// number cannot hold exactly past 2^53 (about 104 days after 1970), and
// as RFC 3339 UTC with nine fractional digits (`start`). The page reads
// the text: exactly, as a BigInt, when it sends a time back to the API
// (`/v1/flows?from=…`), and to the millisecond when it shows one, the
// exact text kept for the hover. Pure functions, no DOM.

const RFC3339 = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/;

/** Nanoseconds since 1970 of an RFC 3339 UTC time (up to nine fractional digits), exactly; undefined if it is not one. */
export function nsOf(text: string): bigint | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  const seconds = Date.parse(`${m[1]}T${m[2]}Z`);
  if (!Number.isFinite(seconds)) return undefined;
  const frac = BigInt((m[3] ?? "").padEnd(9, "0"));
  return (BigInt(seconds) / 1000n) * 1_000_000_000n + frac;
}

/** `2026-12-07 13:16:48.700 UTC`: to the millisecond, cut (not rounded), so the hover's exact time starts the same. */
export function humanTime(text: string): string {
  const m = RFC3339.exec(text);
  if (!m) return text;
  return `${m[1]} ${m[2]}.${(m[3] ?? "").padEnd(3, "0").slice(0, 3)} UTC`;
}

/** `13:16:48.700`: the time of day only, for a chart's axis. */
export function clockTime(text: string): string {
  const m = RFC3339.exec(text);
  if (!m) return text;
  return `${m[2]}.${(m[3] ?? "").padEnd(3, "0").slice(0, 3)}`;
}

/** The hover of a time: the exact text and its nanoseconds. */
export function exactTitle(text: string): string {
  const ns = nsOf(text);
  return ns === undefined ? text : `${text} (${ns} ns since 1970)`;
}

/** An RFC 3339 UTC time of milliseconds since 1970 (a chart's tick). */
export function rfc3339OfMs(ms: number): string {
  return new Date(ms).toISOString();
}
