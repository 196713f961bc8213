import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { inject } from "vitest";
import { createOwnerLink } from "../../src/server/auth/owner-session.js";
import type { RunningGateway } from "../../src/server/gateway.js";
import { chromiumPath } from "./chromium-global.js";

/**
 * The pages in a real browser: Debian's chromium, headless, driven by playwright-core. A suite
 * skips where it is missing (`describe.skipIf(!haveChromium)`). Set DASHBOARD_SCREENSHOTS=<dir>
 * to keep the screenshots the tests take.
 */

export const haveChromium = existsSync(chromiumPath);
const screenshots = process.env.DASHBOARD_SCREENSHOTS;

declare module "vitest" {
  export interface ProvidedContext {
    /** The run's Chromium (test/support/chromium-global.ts), or why there is none. */
    chromium: { wsEndpoint: string } | { error: string };
  }
}

/**
 * The run's Chromium, for this test file: `close()` on what this returns disconnects the file and
 * closes its contexts; the browser itself stops when the run ends.
 */
export function connectChromium(): Promise<Browser> {
  const shared = inject("chromium");
  if ("error" in shared) throw new Error(`no Chromium for the tests: ${shared.error}`);
  return chromium.connect(shared.wsEndpoint, { timeout: 25_000 });
}

export interface BrowserTab {
  context: BrowserContext;
  page: Page;
  /** What the page logged as an error, and the errors it threw. */
  errors: string[];
}

/** A fresh browser profile at a phone's (under 500 px) or a desktop's screen size. */
export async function newTab(
  browser: Browser,
  width: number,
  permissions: string[] = [],
): Promise<BrowserTab> {
  const context = await browser.newContext({
    viewport: { width, height: width < 500 ? 844 : 900 },
    permissions,
  });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.setDefaultNavigationTimeout(10_000);
  const errors: string[] = [];
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => errors.push(`${page.url()}: ${e.message}`));
  return { context, page, errors };
}

/** Opens a fresh owner link in `page`: the browser is signed in to `accountId`'s dashboard. */
export async function signIn(
  page: Page,
  gw: RunningGateway,
  options: { accountId?: string; next?: string } = {},
): Promise<void> {
  const next = options.next ?? "/dashboard";
  await page.goto(
    await createOwnerLink(gw.services.repos.sessions, options.accountId ?? "acct", gw.url, next),
  );
  const landed = new URL(page.url());
  if (landed.pathname + landed.search !== next) {
    throw new Error(`the owner link led to ${page.url()}, not to ${next}`);
  }
}

/** A new profile of `width`, signed in to the owner's dashboard (`next`, else /dashboard). */
export async function signedInTab(
  browser: Browser,
  gw: RunningGateway,
  width: number,
  options: { accountId?: string; next?: string; permissions?: string[] } = {},
): Promise<BrowserTab> {
  const tab = await newTab(browser, width, options.permissions);
  await signIn(tab.page, gw, options);
  return tab;
}

/**
 * Keeps a screenshot as `<name>.png` when DASHBOARD_SCREENSHOTS is set: of `selector`'s element,
 * else of the whole page. `screens`: also the screen as it is (`-top`) and, on a phone, the page
 * in screen-sized parts (`-partN`), to be looked at without shrinking.
 */
export async function shoot(
  page: Page,
  name: string,
  options: { selector?: string; screens?: boolean } = {},
): Promise<void> {
  if (!screenshots) return;
  mkdirSync(screenshots, { recursive: true });
  const path = join(screenshots, `${name}.png`);
  if (options.selector) {
    await page.locator(options.selector).screenshot({ path });
    return;
  }
  // The screen first: a whole-page screenshot may leave the page scrolled elsewhere.
  if (options.screens) await page.screenshot({ path: join(screenshots, `${name}-top.png`) });
  await page.screenshot({ path, fullPage: true });
  if (!options.screens) return;
  const { width, height } = page.viewportSize()!;
  if (width >= 500) return;
  const total = (await page.evaluate("document.documentElement.scrollHeight")) as number;
  for (let y = 0, part = 1; y < total; y += height, part++) {
    await page.screenshot({
      path: join(screenshots, `${name}-part${part}.png`),
      fullPage: true,
      clip: { x: 0, y, width, height: Math.min(height, total - y) },
    });
  }
}
