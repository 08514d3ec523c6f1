// End-to-end check of the console in headless Chromium, driven by
// crates/cli/tests/console.rs (which starts nats-server, the manager and
// the agents). Protocol on stdio, one line each:
//   stdout "added"            the event is installed through the form
//   stdin  "expect N"         the manager wrote N reports of the event
//   stdout "feed JSON"        the feed's reports of the event, then exit 0
// Any failure: a message on stderr and exit 1. Environment: CONSOLE_URL,
// CONSOLE_TOKEN, CONSOLE_EVENT (source), CONSOLE_EVENT_NAME,
// CONSOLE_BROKEN (a source with an error), CONSOLE_BROKEN_SPAN (the text
// its error points at), CONSOLE_VALUE (a value the reports carry),
// CONSOLE_SHOTS (where screenshots go), CONSOLE_HOSTS (how many hosts),
// CONSOLE_EXACT (1: exactly N reports come, a replay; 0: at least, live),
// CONSOLE_HISTORY (1: the page is then reloaded and every page of the
// manager's report history read, oldest last: stdout "history JSON"
// after the feed; else the API is a host's, whose history answers 404).
import { join } from "node:path";
import { check, env, hostsHistory404, launch, nextLine } from "./common.mjs";

const url = env("CONSOLE_URL");
const name = env("CONSOLE_EVENT_NAME");
const shots = env("CONSOLE_SHOTS");
const value = env("CONSOLE_VALUE");
const LIMIT = 120_000;
const history = process.env.CONSOLE_HISTORY === "1";

const { context, close } = await launch();
const problems = [];
let code = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(LIMIT);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // The wrong token's 401 and the refused event's 400 are expected, and
    // a host's 404 for the history (it keeps none); anything else (a CSP
    // violation, a script error) is not.
    const hostsHistory = !history && hostsHistory404(m);
    if (m.type() === "error" && !/status of 40[01]/.test(m.text()) && !hostsHistory) problems.push(`console: ${m.text()}`);
  });
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));

  const resp = await page.goto(url);
  check(resp?.status() === 200, `GET / answered ${resp?.status()}`);
  const csp = resp.headers()["content-security-policy"] ?? "";
  check(csp.includes("default-src 'none'"), `the page's CSP: ${csp}`);
  await page.locator("#login").waitFor();
  check(await page.locator("#app").isHidden(), "the panels are hidden before the token");

  // A wrong token is refused and said so.
  await page.fill("#token", "not-the-token");
  await page.click("#login button[type=submit]");
  await page.locator("#login-error").waitFor({ state: "visible" });
  check((await page.textContent("#login-error")).includes("refused the token"), "a wrong token is refused");

  await page.fill("#token", env("CONSOLE_TOKEN"));
  await page.click("#login button[type=submit]");
  await page.locator("#app").waitFor({ state: "visible" });
  check(await page.evaluate(() => sessionStorage.getItem("clarion.api-token")) === env("CONSOLE_TOKEN"), "the token is kept in sessionStorage");
  await page.locator(`#hosts tbody tr`).nth(Number(env("CONSOLE_HOSTS")) - 1).waitFor();

  // A broken event: the language's error inline, its span marked and selected.
  const before = await page.locator("#events tbody tr").count();
  await page.fill("#source", env("CONSOLE_BROKEN"));
  await page.click("#add button[type=submit]");
  await page.locator("#add-error").waitFor({ state: "visible" });
  const error = await page.textContent("#add-error");
  const span = env("CONSOLE_BROKEN_SPAN");
  check(error.includes(span), `the error names ${span}: ${error}`);
  const marked = await page.locator("#source-view mark").allTextContents();
  check(marked.length >= 1 && marked[0] === span, `the marked span: ${JSON.stringify(marked)}`);
  const selected = await page.$eval("#source", (t) => t.value.slice(t.selectionStart, t.selectionEnd));
  check(selected === span, `the selected span: ${JSON.stringify(selected)}`);
  await page.screenshot({ path: join(shots, "error.png"), fullPage: true });
  check((await page.locator("#events tbody tr").count()) === before, "nothing installed by a broken event");

  // The event, through the form.
  await page.fill("#source", env("CONSOLE_EVENT"));
  await page.click("#add button[type=submit]");
  await page.locator(`#events tr[data-event="${name}"]`).waitFor();
  check(await page.locator("#add-error").isHidden(), "no error left shown");
  // Every count of points the chart shows, as it redraws: the chart must grow live, not at a reload.
  await page.evaluate(() => {
    window.__counts = [];
    new MutationObserver(() => {
      for (const c of document.querySelectorAll(".chart[data-points]")) window.__counts.push(Number(c.getAttribute("data-points")));
    }).observe(document.getElementById("charts"), { childList: true, subtree: true });
  });
  console.log("added");

  const expect = /^expect (\d+)$/.exec(await nextLine());
  check(expect, "the test says how many reports to expect");
  // The page keeps the newest 500 reports in the feed and 300 points per chart.
  const all = Number(expect[1]);
  const n = Math.min(all, 300);
  await page.waitForFunction(([name, m]) => document.querySelectorAll(`#feed li[data-event="${name}"]`).length >= m, [name, Math.min(all, 500)], { timeout: LIMIT });
  await page.waitForFunction(
    ([name, value, n]) => Number(document.querySelector(`.chart[data-event="${name}"][data-value="${value}"]`)?.getAttribute("data-points")) >= n,
    [name, value, n],
    { timeout: LIMIT },
  );
  const circles = await page.locator(`.chart[data-event="${name}"][data-value="${value}"] circle`).count();
  // CONSOLE_EXACT=1: no report comes after those counted (a replay); else (live) more may.
  const exact = process.env.CONSOLE_EXACT === "1";
  check(exact ? circles === n : circles >= n, `${circles} points drawn for ${all} reports`);
  const threshold = await page.locator(`.chart[data-event="${name}"][data-value="${value}"] line.threshold`).count();
  check(threshold === 1, "the threshold is drawn");
  // The hosts' health: every agent up (they linger, answering polls).
  await page.waitForFunction((n) => document.querySelectorAll("#hosts td.state-up").length >= n, Number(env("CONSOLE_HOSTS")), { timeout: LIMIT });
  // ...and each one's health read out with units: packets/s, packets
  // counted, completeness as a percentage (a replay loses nothing: 100%).
  // A host's first heartbeat may come before its first packet (a loaded
  // machine): wait until every host has counted some.
  await page.waitForFunction(
    () => {
      const heads = [...document.querySelectorAll("#hosts thead th")].map((th) => th.textContent);
      const packets = heads.indexOf("packets");
      return [...document.querySelectorAll("#hosts tbody tr")].every((tr) => /pkt\/s/.test(tr.textContent ?? "") && (tr.children[packets]?.textContent ?? "0") !== "0");
    },
    undefined,
    { timeout: LIMIT },
  );
  const health = await page.evaluate(() => {
    const heads = [...document.querySelectorAll("#hosts thead th")].map((th) => th.textContent);
    const at = (tr, name) => tr.children[heads.indexOf(name)]?.textContent ?? "";
    return [...document.querySelectorAll("#hosts tbody tr")].map((tr) => ({
      host: tr.dataset.host,
      rate: at(tr, "packets/s"),
      packets: at(tr, "packets"),
      completeness: at(tr, "completeness"),
      sweep: at(tr, "sweep"),
      text: tr.textContent,
    }));
  });
  console.error(`hosts' health: ${JSON.stringify(health.map(({ text, ...h }) => h))}`);
  check(health.length === Number(env("CONSOLE_HOSTS")), `${health.length} host rows`);
  for (const x of health) {
    check(/^\d[\d.]* (k |M )?pkt\/s$/.test(x.rate), `${x.host}: packets/s ${JSON.stringify(x.rate)}`);
    check(/^\d{1,3}(,\d{3})*$/.test(x.packets) && x.packets !== "0", `${x.host}: packets ${JSON.stringify(x.packets)}`);
    check(process.env.CONSOLE_EXACT === "1" ? x.completeness === "100%" : /^\d+(\.\d\d)?%$/.test(x.completeness), `${x.host}: completeness ${JSON.stringify(x.completeness)}`);
    check(!/object Object|\{"/.test(x.text), `${x.host}: raw objects in the row: ${x.text}`);
  }
  await page.screenshot({ path: join(shots, "console.png"), fullPage: true });
  const counts = await page.evaluate(() => window.__counts);
  check(counts.length >= 1 && (exact ? Math.max(...counts) === n : Math.max(...counts) >= n), `chart counts ${JSON.stringify(counts)}`);
  console.error(`the chart grew through ${new Set(counts).size} sizes: ${[...new Set(counts)].join(" ")}`);

  const feed = await page.$$eval(`#feed li[data-event="${name}"]`, (lis) =>
    lis.map((li) => ({ event: li.dataset.event, start: li.dataset.start, group: JSON.parse(li.dataset.group), values: JSON.parse(li.dataset.values) })),
  );

  // Remove it: two clicks (the first only arms the button), with a poll
  // of the events (every 2 s), which renders the rows anew, between them.
  const remove = page.locator(`#events tr[data-event="${name}"] button[data-remove]`);
  await remove.click();
  check((await page.locator(`#events tr[data-event="${name}"]`).count()) === 1, "one click removes nothing");
  await page.waitForTimeout(2500);
  check((await remove.textContent()) === "Confirm removal", `after a poll the button reads ${JSON.stringify(await remove.textContent())}`);
  await remove.click();
  await page.locator(`#events tr[data-event="${name}"]`).waitFor({ state: "detached" });

  // Reloaded (signed in again from sessionStorage), the page shows what
  // fired before it was opened: every page of the history, Older after Older.
  const kept = history ? await readHistory(page) : null;

  // No token in any URL the page asked for.
  check(!requests.some((u) => u.includes(env("CONSOLE_TOKEN"))), "the token never goes in a URL");
  check(problems.length === 0, problems.join("\n"));
  console.log(`feed ${JSON.stringify(feed)}`);
  if (kept) console.log(`history ${JSON.stringify(kept)}`);
} catch (e) {
  console.error(`console e2e: ${e instanceof Error ? e.message : e}${problems.length ? `\n${problems.join("\n")}` : ""}`);
  code = 1;
} finally {
  await close();
}
process.exit(code);

/** Every report of the history's pages (newest first), from the newest
 *  page through each older one; then Newer back up to the newest. */
async function readHistory(page) {
  await page.reload();
  await page.locator("#app").waitFor({ state: "visible" });
  await page.locator("#history-nav").waitFor({ state: "visible" });
  await page.locator("#history li").first().waitFor();
  await page.screenshot({ path: join(shots, "history.png"), fullPage: true });
  const rows = () =>
    page.$$eval("#history li", (lis) =>
      lis.map((li) => ({ seq: Number(li.dataset.seq), event: li.dataset.event, start: li.dataset.start, group: JSON.parse(li.dataset.group), values: JSON.parse(li.dataset.values) })),
    );
  // Clicks a page button and waits for its page (not a poll's reload of the newest).
  const turn = async (button) => {
    const loads = await page.getAttribute("#history", "data-loads");
    await page.click(button);
    await page.waitForFunction((n) => {
      const list = document.getElementById("history");
      return list.dataset.loads !== n && list.dataset.newest === "";
    }, loads);
  };
  const all = [];
  let pages = 1;
  for (;;) {
    all.push(...(await rows()));
    if (await page.locator("#history-older").isDisabled()) break;
    await turn("#history-older");
    pages += 1;
  }
  check(await page.locator("#history-newer").isEnabled() === pages > 1, "Newer is offered on an older page");
  let back = 1;
  while (await page.locator("#history-newer").isEnabled()) {
    await turn("#history-newer");
    back += 1;
    check(back <= pages, `Newer went past the ${pages} pages`);
  }
  check(back === pages, `Newer came back through ${back} of ${pages} pages`);
  console.error(`history: ${all.length} reports in ${pages} page(s)`);
  return all;
}
