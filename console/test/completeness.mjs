// stdin: a JSON array of reports as clarion writes them; stdout: for each,
// the feed's note ({lossless, missing, title}), as JSON. See
// crates/console/tests/completeness.rs.
import { load, stdin } from "./bundle.mjs";

const { completenessNote } = await load("completeness");
const reports = JSON.parse(await stdin());
console.log(JSON.stringify(reports.map((r) => completenessNote(r.completeness))));
