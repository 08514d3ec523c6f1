// Builds console/dist from console/src: one minified ES module bundle, one
// minified stylesheet, and the page. Deterministic (same sources, same
// bytes): scripts/test.sh rebuilds and checks that the committed dist is
// this build, since the Rust crate clarion-console embeds it.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

const out = new URL("./dist/", import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { console: "src/main.ts" },
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
await build({
  entryPoints: { console: "src/console.css" },
  outdir: out,
  bundle: true,
  minify: true,
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
copyFileSync("src/index.html", out + "index.html");
copyFileSync("src/favicon.svg", out + "favicon.svg");
