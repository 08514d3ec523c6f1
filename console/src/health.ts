// A host's health (the `health` object of `/v1/hosts`, schema HostHealth
// in docs/api/openapi.yaml) as the hosts panel shows it: numbers with
// their units, completeness as a percentage that never rounds a loss up
// to 100%, and why a row deserves a look: completeness below 1, or drops
// or late sweeps that grew between polls (the page keeps such a flag up
// for 30 s, so a one-poll blip is not missed). Pure functions, no DOM.

export interface HostHealth {
  packets_per_second: number;
  rate_window_s: number;
  packets_total: number;
  drops_total: number;
  drops_kernel_total: number;
  malformed_total: number;
  untracked_total: number;
  completeness: number;
  sweeps_total: number;
  late_sweeps_total: number;
  sweep_seconds_last?: number;
  sweep_seconds_max?: number;
  uptime_s: number;
}

/** Packets per second with a unit: `850 pkt/s`, `12.4 k pkt/s`, `1.25 M pkt/s`. */
export function rate(pps: number): string {
  if (pps < 10) return `${pps.toFixed(1)} pkt/s`;
  if (pps < 1e3) return `${Math.round(pps)} pkt/s`;
  if (pps < 1e6) return `${(pps / 1e3).toFixed(1)} k pkt/s`;
  return `${(pps / 1e6).toFixed(2)} M pkt/s`;
}

/** A share in [0, 1] as a percentage, two decimals rounded down: only the whole reads `100%`. */
export function percent(share: number): string {
  if (share >= 1) return "100%";
  return `${(Math.floor(Math.max(share, 0) * 10_000) / 100).toFixed(2)}%`;
}

/** A duration in seconds: `0.42 ms`, `35.1 ms`, `1.20 s`; `–` when not measured. */
export function duration(s: number | undefined): string {
  if (s === undefined || s === null) return "–";
  const ms = s * 1e3;
  if (ms < 10) return `${ms.toFixed(2)} ms`;
  if (ms < 1e3) return `${ms.toFixed(1)} ms`;
  return `${s.toFixed(2)} s`;
}

/** What grew between two polls of one host (none before: nothing grew). */
export function grew(now: HostHealth, before: HostHealth | undefined): { drops: boolean; late: boolean } {
  return {
    drops: before !== undefined && now.drops_total > before.drops_total,
    late: before !== undefined && now.late_sweeps_total > before.late_sweeps_total,
  };
}

/** Why the host deserves a look: completeness below 1, and what grew lately (`recent`). */
export function warnings(now: HostHealth, recent: { drops: boolean; late: boolean }): string[] {
  const why: string[] = [];
  if (now.completeness < 1) why.push(`completeness ${percent(now.completeness)}: packets were lost or not inspected`);
  if (recent.drops) why.push("packets lost in the last 30 s");
  if (recent.late) why.push("late sweeps in the last 30 s");
  return why;
}

/** The breakdown of a host's losses, for a tooltip. */
export function dropsDetail(x: HostHealth): string {
  return `kernel ${x.drops_kernel_total.toLocaleString("en-US")}, malformed ${x.malformed_total.toLocaleString("en-US")}, untracked ${x.untracked_total.toLocaleString("en-US")}`;
}
