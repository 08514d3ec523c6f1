// stdin: a JSON array of {source, rendered}; stdout: for each, the spans
// the page marks ([start, end) in UTF-16 units of source, in the order
// of the rendered diagnostics), as JSON. See crates/console/tests/diag_spans.rs.
import { load, stdin } from "./bundle.mjs";

const { spansOf, offsets } = await load("diag");
const cases = JSON.parse(await stdin());
console.log(JSON.stringify(cases.map((c) => spansOf(c.rendered).map((s) => offsets(c.source, s)))));
