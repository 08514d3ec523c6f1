// stdin: a JSON array of {text, cuts}: an event stream and where to cut
// it into chunks (character indices); stdout: for each, what the parser
// saw, in order: ["message", event, data] or ["comment", text], as JSON.
// See crates/console/tests/sse.rs.
import { load, stdin } from "./bundle.mjs";

const { SseParser } = await load("sse");
const cases = JSON.parse(await stdin());
console.log(
  JSON.stringify(
    cases.map(({ text, cuts }) => {
      const seen = [];
      const p = new SseParser(
        (m) => seen.push(["message", m.event, m.data]),
        (c) => seen.push(["comment", c]),
      );
      const chars = Array.from(text);
      let at = 0;
      for (const cut of [...cuts, chars.length]) {
        p.push(chars.slice(at, cut).join(""));
        at = cut;
      }
      return seen;
    }),
  ),
);
