// stdin: a JSON array of {filter, at, limit}; stdout: for each, the
// history page's query the page sends ({query}) or why not ({error}).
// See crates/console/tests/history.rs.
import { load, stdin } from "./bundle.mjs";

const { historyQuery } = await load("history");
const cases = JSON.parse(await stdin());
console.log(JSON.stringify(cases.map((c) => historyQuery(c.filter, c.at, c.limit))));
