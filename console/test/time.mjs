// stdin: a JSON array of RFC 3339 times as clarion writes them; stdout:
// for each, what the page makes of it ({ns, human, clock, title}), and
// the /v1/flows path of a firing ending then. See
// crates/console/tests/time.rs.
import { load, stdin } from "./bundle.mjs";

const { nsOf, humanTime, clockTime, exactTitle } = await load("time");
const { flowsPath } = await load("flows");
const times = JSON.parse(await stdin());
console.log(
  JSON.stringify(
    times.map((t, i) => ({
      ns: String(nsOf(t)),
      human: humanTime(t),
      clock: clockTime(t),
      title: exactTitle(t),
      path: flowsPath({ event: "e", window: { start: times[Math.max(i - 1, 0)], end: t }, group: { dst_port: 80 } }, "packets", 7),
    })),
  ),
);
