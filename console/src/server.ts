// What differs between the two servers of the console: a manager
// (network-wide events, `across hosts`; its agents as hosts) and a live
// host's own API (its own events; it refuses `across hosts`; `/v1/hosts`
// is the host alone). The page asks `/v1/server` once signed in.

export type ServerKind = "manager" | "host";

/** The kind in a `/v1/server` answer; a manager for anything else (an
 *  older server without the route was a manager, or a host that the
 *  page then treats as one, as before). */
export function kindOf(answer: unknown): ServerKind {
  return typeof answer === "object" && answer !== null && (answer as { kind?: unknown }).kind === "host" ? "host" : "manager";
}

const EXAMPLE = "event heavy_flows\n  when sum(volume) > 125KB\n  per 5tuple\n  every 10ms";

/** The example in the "Add events" text area: one `kind` accepts. */
export function exampleEvent(kind: ServerKind): string {
  return kind === "host" ? EXAMPLE : `${EXAMPLE}\n  across hosts`;
}

/** What the hosts table's counters count on `kind` (their headers' hover). */
export function hostColumnTitles(kind: ServerKind): Record<string, string> {
  if (kind === "host") {
    return {
      triggers: "network-wide triggers this host's manager installed on it (the host's own events are listed under Installed events)",
      satisfaction_reports: "satisfaction reports this host's agent sent its manager (0 without a manager)",
      polls_answered: "polls of its manager this host's agent answered (0 without a manager)",
      polls_missed: "judged by the manager (see its console); 0 here",
    };
  }
  return {
    triggers: "network-wide triggers installed on the host (one per event placed there)",
    satisfaction_reports: "satisfaction reports received from the host",
    polls_answered: "polls the host answered",
    polls_missed: "polls the host did not answer in time, or answered for a window it no longer kept",
  };
}
