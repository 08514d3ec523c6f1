// End-to-end check of the flows behind a firing, in headless Chromium,
// driven by crates/cli/tests/console.rs (which starts a live host on
// loopback and replays a capture onto it). Protocol on stdio, one line each:
//   stdout "ready"            signed in, the report stream connected
//   stdin  "click N"          N reports of the event have fired and their
//                             flows have ended: click each in turn
//   stdout "flows JSON"       per firing clicked: its window, group and
//                             the top talkers table's rows; then exit 0
// Any failure: a message on stderr and exit 1. Environment: CONSOLE_URL,
// CONSOLE_TOKEN, CONSOLE_EVENT_NAME, CONSOLE_SHOTS (where the screenshot
// goes), CONSOLE_SHOT (its name, flows.png by default: a manager's page
// is shot as manager-flows.png).
import { join } from "node:path";
import { check, env, hostsHistory404, launch, nextLine } from "./common.mjs";

const name = env("CONSOLE_EVENT_NAME");
const LIMIT = 60_000;
const shot = process.env.CONSOLE_SHOT ?? "flows.png";
/** A note's text, or null when the page shows none. */
const note = async (page, id) => ((await page.locator(id).count()) ? await page.textContent(id) : null);

const { context, close } = await launch();
const problems = [];
let code = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(LIMIT);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // The live host's 404 for the report history (it keeps none) is expected.
    if (m.type() === "error" && !hostsHistory404(m)) problems.push(`console: ${m.text()}`);
  });
  await page.goto(env("CONSOLE_URL"));
  await page.fill("#token", env("CONSOLE_TOKEN"));
  await page.click("#login button[type=submit]");
  await page.locator("#app").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.getElementById("stream")?.dataset.state === "live", undefined, { timeout: LIMIT });
  console.log("ready");

  const click = /^click (\d+)$/.exec(await nextLine());
  check(click, "the test says how many firings to click");
  const n = Number(click[1]);
  await page.waitForFunction(([name, n]) => document.querySelectorAll(`#feed li[data-event="${name}"]`).length >= n, [name, n], { timeout: LIMIT });
  const items = page.locator(`#feed li[data-event="${name}"]`);
  check((await items.count()) === n, `${await items.count()} firings in the feed, ${n} written`);
  // The feed's times: to the millisecond, the exact nanoseconds on hover.
  const when = await items.first().locator(".when").evaluate((e) => ({ text: e.textContent, title: e.title }));
  check(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$/.test(when.text), `the feed's time ${JSON.stringify(when.text)}`);
  check(/^\S+\.\d{9}Z \(\d+ ns since 1970\)$/.test(when.title), `its hover ${JSON.stringify(when.title)}`);
  // The chart's axes are labelled.
  const titles = await page.locator(`.chart[data-event="${name}"] .axis-title`).allTextContents();
  check(titles.includes("window end (UTC)") && titles.length === 2, `the chart's axis titles ${JSON.stringify(titles)}`);

  const shown = [];
  let most = -1;
  for (let i = 0; i < n; i++) {
    const li = items.nth(i);
    const start = await li.getAttribute("data-start");
    const group = await li.getAttribute("data-group");
    await li.click();
    await page.waitForFunction(
      ([start, group]) => {
        const box = document.getElementById("flows");
        return box?.dataset.start === start && box?.dataset.group === group && box.querySelector("#flows-table, #flows-none, #flows-error") !== null;
      },
      [start, group],
      { timeout: LIMIT },
    );
    const error = await page.locator("#flows-error").count();
    check(error === 0, `the API refused the flows: ${error ? await page.textContent("#flows-error") : ""}`);
    const rows = await page.$$eval("#flows-table tbody tr", (trs) =>
      trs.map((tr) => ({
        src_ip: tr.dataset.srcIp,
        dst_ip: tr.dataset.dstIp,
        src_port: tr.dataset.srcPort === "null" ? null : Number(tr.dataset.srcPort),
        dst_port: tr.dataset.dstPort === "null" ? null : Number(tr.dataset.dstPort),
        proto: Number(tr.dataset.proto),
        packets: Number(tr.dataset.packets),
        bytes: Number(tr.dataset.bytes),
        records: Number(tr.dataset.records),
      })),
    );
    // One bar per talker over time; the times' hovers exact.
    const bars = await page.locator("#flows .flows-time rect.flow").count();
    check(bars === rows.length, `${bars} bars for ${rows.length} talkers`);
    const axes = await page.locator("#flows .flows-time .axis-title").count();
    check(rows.length === 0 || axes === 2, `the flows-over-time view's axis titles: ${axes}`);
    const firstHover = await page.locator("#flows-table tbody tr td .time").first().getAttribute("title").catch(() => null);
    check(rows.length === 0 || /ns since 1970/.test(firstHover ?? ""), `a first packet's hover: ${firstHover}`);
    const complete = (await page.locator("#flows-incomplete").count()) === 0;
    // A manager's answer names the hosts that answered and those that did not.
    const hosts = await note(page, "#flows-hosts");
    const missing = await note(page, "#flows-missing");
    shown.push({ start, group: JSON.parse(group), rows, complete, hosts, missing });
    if (most < 0 || rows.length > shown[most].rows.length) most = i;
  }
  // The screenshot shows the firing with the most talkers.
  await items.nth(most).click();
  await page.waitForFunction((start) => document.getElementById("flows")?.dataset.start === start, shown[most].start, { timeout: LIMIT });
  await page.locator("#flows-table, #flows-none").first().waitFor();
  await page.screenshot({ path: join(env("CONSOLE_SHOTS"), shot), fullPage: true });
  check(problems.length === 0, problems.join("\n"));
  console.log(`flows ${JSON.stringify(shown)}`);
} catch (e) {
  console.error(`flows e2e: ${e instanceof Error ? e.message : e}${problems.length ? `\n${problems.join("\n")}` : ""}`);
  code = 1;
} finally {
  await close();
}
process.exit(code);
