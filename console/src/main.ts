// Clarion's web console: the page the control API serves at `/`. It holds
// no data of its own: every panel reads the API (`/v1/*`) with the token
// the operator types once (kept in sessionStorage: gone when the tab
// closes, never in a URL). Installed events and hosts (with their
// health, flagged when it degrades between polls) are polled every
// 2 s; fired events stream from `/v1/reports` (server-sent events read
// with fetch, since EventSource cannot send the Authorization header),
// reconnecting with backoff. Memory is bounded: the feed keeps the newest
// FEED_MAX reports, each chart the newest CHART_MAX points. Clicking a
// fired report asks the API for the flows behind it (`/v1/flows`: its
// top talkers and their flows over time). What fired before the page was
// opened is read from the manager's store (`/v1/reports/history`), a
// page of HISTORY_PAGE at a time, newer and older pages by cursor.

import { completenessNote, type Completeness } from "./completeness";
import { chart, rfc3339Ms, type Point } from "./chart";
import { offsets, spansOf } from "./diag";
import { bytesText, endpoint, flowsPath, hostNotes, protoName, timeline, type FlowsAnswer } from "./flows";
import { dropsDetail, duration, grew, percent, rate, warnings, type HostHealth } from "./health";
import { SseParser } from "./sse";
import { exampleEvent, hostColumnTitles, kindOf, type ServerKind } from "./server";
import { historyQuery, type HistoryFilter } from "./history";
import { thresholds, type Threshold } from "./threshold";
import { exactTitle, humanTime } from "./time";

const FEED_MAX = 500;
const CHART_MAX = 300;
const POLL_MS = 2000;
const TOKEN_KEY = "clarion.api-token";
/** Talkers asked for a firing. */
const FLOWS_TOP = 10;
/** Reports in a page of the history. */
const HISTORY_PAGE = 25;

interface EventInfo {
  id: number;
  name: string;
  source: string;
  hosts: string[];
  local_predicate: string;
  interval_ns: number;
  added: string;
}

interface Report {
  event: string;
  window: { start: string; end: string };
  group: Record<string, unknown>;
  values: Record<string, number | null>;
  host: string;
  worker: number | null;
  completeness: Completeness;
}

const $ = <T extends HTMLElement>(id: string): T => {
  const e = document.getElementById(id);
  if (!e) throw new Error(`the page lacks #${id}`);
  return e as T;
};

function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: (Node | string)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

class Unauthorized extends Error {}

let token = sessionStorage.getItem(TOKEN_KEY) ?? "";
/** Who serves the API (`/v1/server`): a manager until it says otherwise. */
let serverKind: ServerKind = "manager";
let events: EventInfo[] = [];
let streamAbort: AbortController | undefined;
let pollTimer: number | undefined;

async function api(method: string, path: string, body?: string): Promise<Response> {
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "text/plain; charset=utf-8";
  const r = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
  if (r.status === 401) throw new Unauthorized(await errorText(r));
  return r;
}

/** The `error` of an error body, or the status line. */
async function errorText(r: Response): Promise<string> {
  const text = await r.text();
  try {
    const e = JSON.parse(text) as { error?: unknown };
    if (typeof e.error === "string") return e.error;
  } catch {
    // not JSON: shown as is below
  }
  return `${r.status} ${r.statusText}${text ? `: ${text}` : ""}`;
}

function setStatus(text: string, bad = false): void {
  const s = $("status");
  s.textContent = text;
  s.className = bad ? "error" : "";
}

// ---- sign in / out

function signedIn(on: boolean): void {
  $("app").hidden = !on;
  $("login").hidden = on;
  $("logout").hidden = !on;
}

async function signIn(t: string): Promise<void> {
  token = t;
  const err = $("login-error");
  try {
    const r = await api("GET", "/v1/events");
    if (!r.ok) throw new Error(await errorText(r));
    sessionStorage.setItem(TOKEN_KEY, t);
    err.hidden = true;
    signedIn(true);
    setStatus(`signed in to ${location.host}`);
    showEvents((await r.json()) as EventInfo[]);
    await learnServer();
    startPolling();
    startStream();
    void loadHistory({});
  } catch (e) {
    signOut();
    err.textContent = e instanceof Unauthorized ? `The API refused the token: ${e.message}` : `Could not reach the API: ${String(e instanceof Error ? e.message : e)}`;
    err.hidden = false;
  }
}

/** Asks who serves the API, and offers an example that server accepts. */
async function learnServer(): Promise<void> {
  const r = await api("GET", "/v1/server");
  serverKind = r.ok ? kindOf(await r.json()) : "manager";
  const area = $<HTMLTextAreaElement>("source");
  area.placeholder = exampleEvent(serverKind);
  area.dataset.server = serverKind;
}

function signOut(): void {
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  streamAbort?.abort();
  streamAbort = undefined;
  if (pollTimer !== undefined) clearInterval(pollTimer);
  pollTimer = undefined;
  signedIn(false);
  setStatus("not signed in");
}

/** Every call's failure: a refused token signs out; anything else is shown in the status line. */
function failed(e: unknown): void {
  if (e instanceof Unauthorized) {
    signOut();
    const err = $("login-error");
    err.textContent = `The API refused the token: ${e.message}`;
    err.hidden = false;
  } else {
    setStatus(`API unreachable: ${e instanceof Error ? e.message : String(e)}`, true);
  }
}

// ---- events

function everyText(ns: number): string {
  if (ns % 1e9 === 0) return `${ns / 1e9}s`;
  if (ns % 1e6 === 0) return `${ns / 1e6}ms`;
  return `${ns / 1e3}us`;
}

/** Events whose Remove button was clicked once, until confirmed or 4 s
 *  passed: kept apart from the rows, which every poll renders anew, so a
 *  poll between the two clicks does not disarm the button. */
const armed = new Map<string, number>();

function removeButton(name: string): HTMLButtonElement {
  const on = armed.has(name);
  const b = h("button", { type: "button", class: "danger", "data-remove": name }, on ? "Confirm removal" : "Remove");
  if (on) b.dataset.armed = "1";
  b.addEventListener("click", () => void removeEvent(name, b));
  return b;
}

function showEvents(list: EventInfo[]): void {
  events = list;
  const body = $("events").querySelector("tbody") as HTMLTableSectionElement;
  body.replaceChildren(
    ...list.map((e) => {
      const remove = removeButton(e.name);
      const name = h("td", {}, h("code", {}, e.name));
      name.title = e.source;
      return h(
        "tr",
        { "data-event": e.name },
        name,
        h("td", {}, e.hosts.length ? e.hosts.join(", ") : "none"),
        h("td", {}, h("code", {}, e.local_predicate)),
        h("td", {}, everyText(e.interval_ns)),
        h("td", { title: exactTitle(e.added) }, humanTime(e.added)),
        h("td", {}, remove),
      );
    }),
  );
  $("events-empty").hidden = list.length > 0;
  // The history's event filter offers the installed events (others, removed, can be typed).
  $("history-events").replaceChildren(...list.map((e) => h("option", { value: e.name })));
}

async function removeEvent(name: string, button: HTMLButtonElement): Promise<void> {
  // Two clicks: a slip of the mouse must not remove an event.
  if (!armed.has(name)) {
    button.dataset.armed = "1";
    button.textContent = "Confirm removal";
    armed.set(
      name,
      window.setTimeout(() => {
        armed.delete(name);
        // The row may have been rendered again since: disarm the one shown.
        for (const b of document.querySelectorAll<HTMLButtonElement>("#events button[data-remove]")) {
          if (b.dataset.remove === name) {
            b.dataset.armed = "";
            b.textContent = "Remove";
          }
        }
      }, 4000),
    );
    return;
  }
  clearTimeout(armed.get(name));
  armed.delete(name);
  try {
    const r = await api("DELETE", `/v1/events/${encodeURIComponent(name)}`);
    if (!r.ok) setStatus(`Could not remove ${name}: ${await errorText(r)}`, true);
    else setStatus(`Removed ${name}`);
    await refresh();
  } catch (e) {
    failed(e);
  }
}

async function addEvents(ev: SubmitEvent): Promise<void> {
  ev.preventDefault();
  const area = $<HTMLTextAreaElement>("source");
  const source = area.value;
  const error = $("add-error");
  const ok = $("add-ok");
  const view = $("source-view");
  try {
    const r = await api("POST", "/v1/events", source);
    if (r.ok) {
      const added = (await r.json()) as EventInfo[];
      error.hidden = true;
      view.hidden = true;
      ok.textContent = `Added ${added.map((e) => `${e.name} (on ${e.hosts.length} host(s): ${e.local_predicate})`).join(", ")}`;
      ok.hidden = false;
      area.value = "";
      await refresh();
      return;
    }
    const text = await errorText(r);
    ok.hidden = true;
    error.textContent = text;
    error.hidden = false;
    showSpans(source, text);
  } catch (e) {
    failed(e);
  }
}

/** The source with the spans the errors point at marked, and the first one selected in the text area. */
function showSpans(source: string, rendered: string): void {
  const view = $("source-view");
  const ranges = spansOf(rendered)
    .map((s) => offsets(source, s))
    .sort((a, b) => a[0] - b[0]);
  if (ranges.length === 0) {
    view.hidden = true;
    return;
  }
  const parts: (Node | string)[] = [];
  let at = 0;
  for (const [a, b] of ranges) {
    if (a < at) continue; // overlapping spans: the first is marked
    parts.push(source.slice(at, a), h("mark", {}, source.slice(a, b)));
    at = b;
  }
  parts.push(source.slice(at));
  view.replaceChildren(...parts);
  view.hidden = false;
  const area = $<HTMLTextAreaElement>("source");
  area.focus();
  area.setSelectionRange(ranges[0][0], ranges[0][1]);
}

// ---- hosts

/** Known columns first; any other field a host reports (one the server adds later) follows as it is. */
const HOST_COLUMNS = ["name", "state", "prefixes", "last_seen_ms", "finished", "triggers", "satisfaction_reports", "polls_answered", "polls_missed"];
/** The health columns, from each host's `health` (absent from agents that send none). */
const HEALTH_COLUMNS = ["packets/s", "packets", "drops", "completeness", "sweep", "late sweeps"];
/** Each host's health at the previous poll, and when its drops and late sweeps last grew. */
const lastHealth = new Map<string, HostHealth>();
const grewAt = new Map<string, { drops?: number; late?: number }>();
/** A growth stays flagged this long: one poll's blip is not missed. */
const GROWTH_SHOWN_MS = 30_000;

function cell(v: unknown): HTMLTableCellElement {
  if (typeof v === "number") return h("td", { class: "num" }, v.toLocaleString("en-US"));
  if (Array.isArray(v)) return h("td", {}, v.join(", "));
  if (v === null || v === undefined) return h("td", { class: "muted" }, "–");
  if (typeof v === "object") return h("td", {}, JSON.stringify(v));
  return h("td", {}, String(v));
}

/** The health cells of one host, flagged as `recent` says. */
function healthCells(x: HostHealth | undefined, recent: { drops: boolean; late: boolean }): HTMLTableCellElement[] {
  if (!x) return HEALTH_COLUMNS.map(() => h("td", { class: "muted", title: "this host sends no health (an older agent)" }, "–"));
  const num = (text: string, title: string, flag = false) => h("td", { class: flag ? "num warn" : "num", title }, text);
  return [
    num(rate(x.packets_per_second), `over the last ${x.rate_window_s.toFixed(1)} s`),
    num(x.packets_total.toLocaleString("en-US"), `since the host started, ${Math.round(x.uptime_s)} s ago`),
    num(x.drops_total.toLocaleString("en-US"), dropsDetail(x), recent.drops),
    num(percent(x.completeness), "share of packets inspected since the host started", x.completeness < 1),
    num(duration(x.sweep_seconds_last), x.sweep_seconds_max === undefined ? "not measured (a replay sweeps between packets)" : `latest sweep; longest ${duration(x.sweep_seconds_max)}`),
    num(x.late_sweeps_total.toLocaleString("en-US"), `of ${x.sweeps_total.toLocaleString("en-US")} sweeps`, recent.late),
  ];
}

/** What grew on `name` in the last GROWTH_SHOWN_MS, counting this poll. */
function recentGrowth(name: string, health: HostHealth | undefined): { drops: boolean; late: boolean } {
  const before = lastHealth.get(name);
  if (!health) {
    lastHealth.delete(name);
    return { drops: false, late: false };
  }
  lastHealth.set(name, health);
  const now = Date.now();
  const at = grewAt.get(name) ?? {};
  const g = grew(health, before);
  if (g.drops) at.drops = now;
  if (g.late) at.late = now;
  grewAt.set(name, at);
  const within = (t?: number) => t !== undefined && now - t < GROWTH_SHOWN_MS;
  return { drops: within(at.drops), late: within(at.late) };
}

function showHosts(list: Record<string, unknown>[]): void {
  const extra = [...new Set(list.flatMap((x) => Object.keys(x)))].filter((k) => !HOST_COLUMNS.includes(k) && k !== "health");
  const columns = [...HOST_COLUMNS, ...extra];
  const table = $("hosts");
  (table.querySelector("thead") as HTMLTableSectionElement).replaceChildren(
    h(
      "tr",
      {},
      ...columns.map((c) => {
        const title = hostColumnTitles(serverKind)[c];
        return h("th", title ? { title } : {}, c.replaceAll("_", " "));
      }),
      ...HEALTH_COLUMNS.map((c) => h("th", { class: "num" }, c)),
    ),
  );
  (table.querySelector("tbody") as HTMLTableSectionElement).replaceChildren(
    ...list.map((host) => {
      const name = String(host.name);
      const health = (host.health ?? undefined) as HostHealth | undefined;
      const recent = recentGrowth(name, health);
      const why = health ? warnings(health, recent) : [];
      const row = h(
        "tr",
        { "data-host": name },
        ...columns.map((c) => {
          const td = cell(host[c]);
          if (c === "state") td.className = `state-${String(host[c])}`;
          return td;
        }),
        ...healthCells(health, recent).map((td) => {
          // A host not heard from lately: its health is its last words, not now.
          if (health && host.state !== "up") {
            td.classList.add("muted");
            td.title = `as last heard (the host is ${String(host.state)}); ${td.title}`;
          }
          return td;
        }),
      );
      if (why.length) {
        row.classList.add("warn");
        row.title = why.join("; ");
      }
      return row;
    }),
  );
  $("hosts-empty").hidden = list.length > 0;
}

// ---- polling

async function refresh(): Promise<void> {
  try {
    const [e, hs] = await Promise.all([api("GET", "/v1/events"), api("GET", "/v1/hosts")]);
    if (e.ok) showEvents((await e.json()) as EventInfo[]);
    else setStatus(`events: ${await errorText(e)}`, true);
    if (hs.ok) showHosts((await hs.json()) as Record<string, unknown>[]);
    else setStatus(`hosts: ${await errorText(hs)}`, true);
    if (e.ok && hs.ok) setStatus(`signed in to ${location.host} · updated ${new Date().toLocaleTimeString()}`);
    // The newest page follows what is stored; an older one stays put.
    if (historyAt.before === undefined && historyAt.after === undefined && !$("history-nav").hidden) await loadHistory({});
  } catch (err) {
    failed(err);
  }
}

function startPolling(): void {
  if (pollTimer !== undefined) clearInterval(pollTimer);
  void refresh();
  pollTimer = window.setInterval(() => void refresh(), POLL_MS);
}

// ---- the live feed and charts

function startStream(): void {
  streamAbort?.abort();
  const abort = new AbortController();
  streamAbort = abort;
  void follow(abort.signal);
}

async function follow(signal: AbortSignal): Promise<void> {
  let backoff = 500;
  const state = $("stream");
  while (!signal.aborted) {
    try {
      const r = await fetch("/v1/reports", { headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" }, signal, cache: "no-store", credentials: "omit" });
      if (r.status === 401) throw new Unauthorized(await errorText(r));
      if (!r.ok || !r.body) throw new Error(await errorText(r));
      state.textContent = "(live)";
      state.dataset.state = "live";
      backoff = 500;
      const parser = new SseParser(
        (m) => {
          if (m.event === "report") report(m.data);
        },
        (c) => {
          if (c.startsWith("lagged")) notice(`The console fell behind: ${c}`);
        },
      );
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
      }
      notice("The report stream ended (the manager stopped?); reconnecting.");
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof Unauthorized) return failed(e);
      state.textContent = `(reconnecting: ${e instanceof Error ? e.message : String(e)})`;
    }
    state.dataset.state = "reconnecting";
    await new Promise((done) => setTimeout(done, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

function notice(text: string): void {
  prepend(h("li", { class: "notice" }, text));
}

function prepend(li: HTMLLIElement): void {
  const feed = $("feed");
  feed.prepend(li);
  while (feed.childElementCount > FEED_MAX) feed.lastElementChild?.remove();
}

function report(data: string): void {
  let r: Report;
  try {
    r = JSON.parse(data) as Report;
  } catch {
    notice(`A report that is not JSON: ${data.slice(0, 200)}`);
    return;
  }
  prepend(reportItem(r));
  plot(r);
}

/** A fired report as a line of the feed or the history; a click shows the flows behind it. */
function reportItem(r: Report): HTMLLIElement {
  const note = completenessNote(r.completeness);
  const group = Object.entries(r.group ?? {}).map(([k, v]) => `${k}=${v === null ? "–" : String(v)}`).join(" ");
  const values = Object.entries(r.values ?? {}).map(([k, v]) => `${k} = ${v === null ? "undefined" : String(v)}`).join(", ");
  // The report's identity, for tests and for copying: window start, group and values as sent.
  const li = h(
    "li",
    { "data-event": r.event, "data-start": r.window?.start ?? "", "data-group": JSON.stringify(r.group ?? {}), "data-values": JSON.stringify(r.values ?? {}) },
    h("span", { class: "when", title: exactTitle(r.window?.end ?? "") }, humanTime(r.window?.end ?? "")),
    h("span", { class: "event" }, r.event),
    h("code", {}, group),
    " ",
    values,
    h("span", { class: "muted" }, ` · ${r.host}`),
  );
  if (note.missing.length > 0) {
    li.setAttribute("data-missing", JSON.stringify(note.missing));
    li.append(h("span", { class: "lossy", title: note.title }, ` · without ${note.missing.join(", ")}`));
  } else if (!note.lossless) {
    li.append(h("span", { class: "lossy", title: note.title }, " !"));
  }
  li.classList.add("firing");
  li.tabIndex = 0;
  li.addEventListener("click", () => void showFlows(r, "bytes"));
  li.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") void showFlows(r, "bytes");
  });
  return li;
}

// ---- the history: reports the manager kept in its store

interface HistoryPage {
  reports: { seq: number; report: Report }[];
  older: number | null;
  newer: number | null;
  last: number;
  kept: number;
  dropped: number;
  max_reports: number;
  max_age_s: number | null;
}

/** The page shown: the newest (`{}`), or before/after a report's number. */
let historyAt: { before?: number; after?: number } = {};
/** Pages rendered so far (tests wait for the next). */
let historyLoads = 0;
/** Pages asked for: only the latest answer is shown (a poll's reload of
 *  the newest page must not land over an older page clicked meanwhile). */
let historyAsked = 0;

/** The filter the history's pages are read under (applied with Filter). */
let historyFilter: HistoryFilter = { event: "", from: "", to: "" };

async function loadHistory(at: { before?: number; after?: number }): Promise<void> {
  const q = historyQuery(historyFilter, at, HISTORY_PAGE);
  const bad = $("history-filter-error");
  if ("error" in q) {
    bad.textContent = q.error;
    bad.hidden = false;
    return;
  }
  bad.hidden = true;
  const note = $("history-note");
  const mine = ++historyAsked;
  try {
    const r = await api("GET", `/v1/reports/history?${q.query}`);
    if (mine !== historyAsked) return;
    if (!r.ok) {
      // A host's API, or a manager without a store (404): said, no buttons
      // and no filter; a filter the API refuses (400): said, the filter kept.
      note.textContent = await errorText(r);
      $("history-nav").hidden = true;
      $("history-filter").hidden = r.status === 404;
      $("history").replaceChildren();
      return;
    }
    const page = (await r.json()) as HistoryPage;
    if (mine !== historyAsked) return;
    historyAt = at;
    showHistory(page);
  } catch (e) {
    failed(e);
  }
}

/** An age bound for people: `7 days`, `12 h`, `90 s`. */
function ageText(s: number): string {
  if (s >= 86_400 && s % 86_400 === 0) return `${s / 86_400} day(s)`;
  if (s >= 3600 && s % 3600 === 0) return `${s / 3600} h`;
  if (s >= 60 && s % 60 === 0) return `${s / 60} min`;
  return `${s} s`;
}

function showHistory(p: HistoryPage): void {
  const list = $("history");
  list.replaceChildren(
    ...p.reports.map((x) => {
      const li = reportItem(x.report);
      li.dataset.seq = String(x.seq);
      return li;
    }),
  );
  const bound = `the newest ${p.max_reports.toLocaleString("en-US")}${p.max_age_s === null ? "" : `, none older than ${ageText(p.max_age_s)}`}`;
  const dropped = p.dropped > 0 ? `; ${p.dropped.toLocaleString("en-US")} older dropped` : "";
  const where = p.reports.length ? `${p.reports.length} report(s) (numbers ${p.reports[p.reports.length - 1].seq}–${p.reports[0].seq})` : "No report here";
  const f = historyFilter;
  const filtered = [f.event.trim() && `event ${f.event.trim()}`, f.from.trim() && `from ${f.from.trim()}`, f.to.trim() && `to ${f.to.trim()}`].filter(Boolean).join(", ");
  $("history-note").textContent = `${where}${filtered ? ` matching ${filtered}` : ""} of ${p.kept.toLocaleString("en-US")} kept in the manager's store (${bound}${dropped}).`;
  $("history-nav").hidden = false;
  $("history-filter").hidden = false;
  const older = $<HTMLButtonElement>("history-older");
  const newer = $<HTMLButtonElement>("history-newer");
  older.disabled = p.older === null;
  newer.disabled = p.newer === null;
  older.onclick = () => void (p.older !== null && loadHistory({ before: p.older }));
  newer.onclick = () => void (p.newer !== null && loadHistory({ after: p.newer }));
  list.dataset.filter = JSON.stringify(historyFilter);
  list.dataset.loads = String(++historyLoads);
  list.dataset.newest = historyAt.before === undefined && historyAt.after === undefined ? "1" : "";
}

// ---- the flows behind a firing

/** The firing whose flows are shown, so that a later answer for an earlier click is dropped. */
let flowsShown: Report | undefined;

async function showFlows(r: Report, by: "bytes" | "packets"): Promise<void> {
  flowsShown = r;
  const box = $("flows");
  const path = flowsPath(r, by, FLOWS_TOP);
  if (!path) {
    box.replaceChildren(h("p", { class: "error" }, `This report's window has no RFC 3339 times: ${JSON.stringify(r.window)}`));
    return;
  }
  box.replaceChildren(h("p", { class: "muted" }, `Asking for the flows behind ${r.event}…`));
  $("flows-panel").scrollIntoView({ block: "nearest" });
  try {
    const resp = await api("GET", path);
    if (flowsShown !== r) return;
    if (!resp.ok) {
      box.replaceChildren(h("p", { class: "error", id: "flows-error" }, await errorText(resp)));
      return;
    }
    renderFlows(r, (await resp.json()) as FlowsAnswer, by);
  } catch (e) {
    failed(e);
  }
}

function renderFlows(r: Report, a: FlowsAnswer, by: "bytes" | "packets"): void {
  const group = Object.entries(r.group ?? {}).map(([k, v]) => `${k}=${v === null ? "–" : String(v)}`).join(" ") || "(one group)";
  const when = (text: string) => h("span", { class: "time", title: exactTitle(text) }, humanTime(text));
  const head = h("h3", {}, h("code", {}, r.event), " ", h("code", {}, group), " · window ", when(a.from), " to ", when(a.to));
  const other = by === "bytes" ? "packets" : "bytes";
  const rank = h("button", { type: "button", id: "flows-by" }, `rank by ${other}`);
  rank.addEventListener("click", () => void showFlows(r, other));
  const num = (text: string, title: string) => h("td", { class: "num", title }, text);
  const rows = a.talkers.map((t, i) =>
    h(
      "tr",
      {
        "data-src-ip": t.src_ip,
        "data-dst-ip": t.dst_ip,
        "data-src-port": String(t.src_port),
        "data-dst-port": String(t.dst_port),
        "data-proto": String(t.proto),
        "data-packets": String(t.packets),
        "data-bytes": String(t.bytes),
        "data-records": String(t.records),
      },
      h("td", { class: "num" }, String(i + 1)),
      h("td", {}, h("code", {}, endpoint(t.src_ip, t.src_port))),
      h("td", {}, h("code", {}, endpoint(t.dst_ip, t.dst_port))),
      h("td", {}, protoName(t.proto) + (t.vlan === null ? "" : ` vlan ${t.vlan}`)),
      num(t.packets.toLocaleString("en-US"), `${t.records} record(s)`),
      num(bytesText(t.bytes), `${t.bytes.toLocaleString("en-US")} bytes`),
      num(a.total.bytes > 0 ? `${((100 * t.bytes) / a.total.bytes).toFixed(1)}%` : "–", "of the bytes of every flow that counted"),
      h("td", {}, when(t.first)),
      h("td", {}, when(t.last)),
    ),
  );
  const table = h(
    "table",
    { id: "flows-table" },
    h("thead", {}, h("tr", {}, ...["#", "source", "destination", "protocol", "packets", "bytes", "share", "first packet", "last packet"].map((c) => h("th", {}, c)))),
    h("tbody", {}, ...rows),
  );
  const t = a.total;
  const notes = [
    `${t.flows.toLocaleString("en-US")} flow(s), ${t.records.toLocaleString("en-US")} record(s), ${t.packets.toLocaleString("en-US")} packets, ${bytesText(t.bytes)} in all; ranked by ${by}.`,
    "A flow record that overlaps the window counts whole (records keep totals, not packet times); a flow still open has no record yet.",
  ];
  const parts: (Node | string)[] = [head, h("p", { class: "muted" }, notes.join(" ")), rank];
  const hosts = hostNotes(a);
  if (hosts.answered) parts.push(h("p", { class: "muted", id: "flows-hosts" }, hosts.answered));
  if (hosts.missing) parts.push(h("p", { class: "lossy", id: "flows-missing" }, hosts.missing));
  if (hosts.truncated) parts.push(h("p", { class: "lossy", id: "flows-truncated" }, hosts.truncated));
  if (!a.complete && a.window) {
    parts.push(h("p", { class: "lossy", id: "flows-incomplete" }, `Incomplete: the host dropped ${a.window.dropped.toLocaleString("en-US")} older record(s) from memory (it keeps ${a.window.max_records.toLocaleString("en-US")}), some of which may have overlapped this window.`));
  } else if (!a.complete && !hosts.missing) {
    parts.push(h("p", { class: "lossy", id: "flows-incomplete" }, "Incomplete: a host dropped older records from memory, some of which may have overlapped this window."));
  }
  if (a.talkers.length === 0) parts.push(h("p", { class: "muted", id: "flows-none" }, "No flow record of this group overlaps the window (yet)."));
  else parts.push(h("div", { class: "scroll" }, table), h("div", { class: "flows-time" }, h("h3", {}, "Flows over time"), timeline(a)));
  const box = $("flows");
  box.dataset.event = r.event;
  box.dataset.start = r.window.start;
  box.dataset.group = JSON.stringify(r.group ?? {});
  box.dataset.by = by;
  box.replaceChildren(...parts);
}

/** Per event, per value: its points, and its threshold from the event's source. */
const series = new Map<string, Map<string, Point[]>>();

function thresholdOf(event: string, value: string): Threshold | undefined {
  const e = events.find((x) => x.name === event);
  return e ? thresholds(e.source, e.interval_ns).get(value) : undefined;
}

function plot(r: Report): void {
  const t = rfc3339Ms(r.window?.end ?? "");
  if (!Number.isFinite(t)) return;
  let byValue = series.get(r.event);
  if (!byValue) {
    byValue = new Map();
    series.set(r.event, byValue);
  }
  for (const [name, v] of Object.entries(r.values ?? {})) {
    if (typeof v !== "number") continue;
    const points = byValue.get(name) ?? [];
    points.push({ t, v, at: r.window?.end });
    if (points.length > CHART_MAX) points.splice(0, points.length - CHART_MAX);
    byValue.set(name, points);
  }
  drawCharts();
}

let drawPending = false;

/** Redraws at most once a frame, however many reports arrive. */
function drawCharts(): void {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    const boxes: HTMLElement[] = [];
    for (const [event, byValue] of [...series].sort(([a], [b]) => a.localeCompare(b))) {
      for (const [value, points] of byValue) {
        const th = thresholdOf(event, value);
        const title = h("h3", {}, h("code", {}, event), " ", h("code", {}, value), th ? ` (threshold ${th.op} ${th.value.toLocaleString("en-US")})` : " (no threshold read from the event)");
        const box = h("div", { class: "chart", "data-event": event, "data-value": value, "data-points": String(points.length) }, title);
        box.append(chart(points, th, value));
        boxes.push(box);
      }
    }
    $("charts").replaceChildren(...boxes);
  });
}

// ---- start

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $<HTMLInputElement>("token");
    const t = input.value.trim();
    input.value = "";
    void signIn(t);
  });
  $("logout").addEventListener("click", signOut);
  $("history-newest").addEventListener("click", () => void loadHistory({}));
  // A new filter reads its newest page; Clear reads the whole history again.
  $("history-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = (id: string) => $<HTMLInputElement>(id).value;
    historyFilter = { event: value("history-event"), from: value("history-from"), to: value("history-to") };
    void loadHistory({});
  });
  $("history-clear").addEventListener("click", () => {
    for (const id of ["history-event", "history-from", "history-to"]) $<HTMLInputElement>(id).value = "";
    historyFilter = { event: "", from: "", to: "" };
    void loadHistory({});
  });
  $("add").addEventListener("submit", (ev) => void addEvents(ev as SubmitEvent));
  $("source").addEventListener("input", () => {
    $("source-view").hidden = true;
  });
  if (token) void signIn(token);
  else signedIn(false);
});
