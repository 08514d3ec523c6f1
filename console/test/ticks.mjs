// stdin: a JSON array of [lo, hi, want]; stdout: the chart's ticks for
// each (console/src/chart.ts niceTicks). See crates/console/tests/time.rs.
import { load, stdin } from "./bundle.mjs";

const { niceTicks } = await load("chart");
const cases = JSON.parse(await stdin());
console.log(JSON.stringify(cases.map(([lo, hi, want]) => niceTicks(lo, hi, want))));
