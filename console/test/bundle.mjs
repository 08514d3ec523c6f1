// Bundles one TypeScript module of console/src into a temporary ES module
// and imports it, so the Rust tests can run the page's own code in Node
// (no browser) against references computed in Rust.
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export async function load(module) {
  const dir = mkdtempSync(join(tmpdir(), "clarion-console-test-"));
  try {
    const out = join(dir, "module.mjs");
    await build({
      entryPoints: [new URL(`../src/${module}.ts`, import.meta.url).pathname],
      outfile: out,
      bundle: true,
      format: "esm",
      platform: "neutral",
      logLevel: "warning",
    });
    return await import(pathToFileURL(out).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Standard input as text. */
export async function stdin() {
  let text = "";
  for await (const chunk of process.stdin) text += chunk;
  return text;
}
