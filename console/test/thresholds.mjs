// stdin: a JSON array of {source, interval_ns}; stdout: for each, the
// thresholds the page reads ({aggregate: [op, value]}), as JSON. See
// crates/console/tests/thresholds.rs.
import { load, stdin } from "./bundle.mjs";

const { thresholds } = await load("threshold");
const cases = JSON.parse(await stdin());
console.log(JSON.stringify(cases.map((c) => Object.fromEntries([...thresholds(c.source, c.interval_ns)].map(([k, t]) => [k, [t.op, t.value]])))));
