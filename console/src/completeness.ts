// What the feed says of a report's completeness (docs/reports.md,
// Completeness): whether the window was seen in full, and, for a
// network-wide report decided without some hosts' answers, which hosts.
// Kept apart from the page so that the Rust tests run it in Node on
// reports serialized by clarion-report itself (crates/console/tests/completeness.rs).

export interface Completeness {
  malformed: number;
  dropped: number;
  untracked: number;
  complete: boolean;
  missing_hosts?: string[];
}

export interface Note {
  /** Nothing lost, nothing unseen, every host answered. */
  lossless: boolean;
  /** The hosts that did not answer, in the report's order (empty when none). */
  missing: string[];
  /** The mark's tooltip: what was lost, in words. */
  title: string;
}

export function completenessNote(c: Completeness | undefined): Note {
  if (!c) return { lossless: true, missing: [], title: "" };
  const missing = Array.isArray(c.missing_hosts) ? c.missing_hosts.map(String) : [];
  const parts: string[] = [];
  if (missing.length > 0) parts.push(`decided without ${missing.join(", ")} (no answer in time, window no longer kept, or gone)`);
  if (c.dropped > 0) parts.push(`${c.dropped} packets dropped before the monitor`);
  if (c.malformed > 0) parts.push(`${c.malformed} malformed packets`);
  if (c.untracked > 0) parts.push(`${c.untracked} packets of untracked flows`);
  if (!c.complete && parts.length === 0) parts.push("the monitor did not see this window in full");
  const lossless = parts.length === 0;
  return { lossless, missing, title: lossless ? "" : `${parts.join("; ")} (docs/reports.md, Completeness)` };
}
