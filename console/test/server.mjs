// stdout: what the page shows per server kind ({kind: {example, titles}})
// and how it reads `/v1/server` answers (stdin: a JSON array of answers).
// See crates/console/tests/server.rs.
import { load, stdin } from "./bundle.mjs";

const { exampleEvent, hostColumnTitles, kindOf } = await load("server");
const answers = JSON.parse(await stdin());
console.log(
  JSON.stringify({
    kinds: Object.fromEntries(["manager", "host"].map((k) => [k, { example: exampleEvent(k), titles: hostColumnTitles(k) }])),
    read: answers.map(kindOf),
  }),
);
