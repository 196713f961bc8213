import { existsSync } from "node:fs";
import { type BrowserServer, chromium } from "playwright-core";
import type { TestProject } from "vitest/node";

/**
 * vitest's globalSetup: one headless Chromium for the run's browser tests, started before any
 * test file runs. Started inside a test file, beside dozens of busy forks on CI's two cores, a
 * Chromium has taken over 25 s to answer its first command; started here, on a quiet machine,
 * it takes about one. Each test file connects to it and gets browser contexts of its own, as
 * isolated as a browser of its own.
 */
export const chromiumPath = "/usr/bin/chromium";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: BrowserServer | undefined;
  // Only the project that holds the browser tests; the other project would start a second one.
  if (project.name === "gateway" && existsSync(chromiumPath)) {
    try {
      server = await chromium.launchServer({
        executablePath: chromiumPath,
        timeout: 120_000,
        args: [
          "--no-sandbox",
          "--disable-gpu",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--no-first-run",
        ],
      });
      project.provide("chromium", { wsEndpoint: server.wsEndpoint() });
    } catch (err) {
      project.provide("chromium", { error: (err as Error).message });
    }
  } else {
    project.provide("chromium", { error: "no Chromium started for this project" });
  }
  return async () => {
    await server?.close();
  };
}
