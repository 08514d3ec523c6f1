// What the end-to-end scripts share: their environment, the stdio
// protocol with the Rust test that drives them, and headless Chromium
// (Debian's, in a throwaway profile).
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/** An environment variable the test must set. */
export const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};

export const lines = createInterface({ input: process.stdin });

/** The test's next line on standard input. */
export const nextLine = () =>
  new Promise((resolve, reject) => {
    lines.once("line", resolve);
    lines.once("close", () => reject(new Error("stdin closed")));
  });

export const check = (ok, what) => {
  if (!ok) throw new Error(what);
};

/** Headless Chromium in a new profile; `close()` ends it and removes the profile. */
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "clarion-console-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1400, height: 1000 },
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    lines.close();
  };
  return { context, close };
}

/** A host's API keeps no report history: the page's request for it is
 *  answered 404, which Chromium logs as an error; not a problem there. */
export const hostsHistory404 = (m) => /status of 404/.test(m.text()) && (m.location()?.url ?? "").includes("/v1/reports/history");
