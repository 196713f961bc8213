import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createOwnerLink } from "../src/server/auth/owner-session.js";
import { quota } from "./support/api.js";
import { baseConfig, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The owner's dashboard in a real browser (Debian's chromium via playwright-core), at a desktop
 * and a phone width. Set DASHBOARD_SCREENSHOTS=<dir> to keep screenshots of both.
 */

const chromiumPath = "/usr/bin/chromium";
const haveChromium = existsSync(chromiumPath);
const screenshots = process.env.DASHBOARD_SCREENSHOTS;
const dayMs = 86_400_000;

let gw: TestGateway;
let browser: Browser | undefined;
const today = Date.now();
// The gateway's time never goes back, so the week of traffic is made from its first day on.
let clock = today - 6 * dayMs;

beforeAll(async () => {
  const base = baseConfig();
  gw = await testGateway({
    now: () => clock,
    config: {
      ...base,
      providers: [...base.providers!, { id: "own-upstream", wire: "mock" }],
      accounts: [
        {
          ...base.accounts![0],
          payg: { limit_idr: 50_000 },
          subscription: {
            plan: "pro",
            models: ["mock-pro"],
            windows: [
              { name: "5h", seconds: 18_000, quota: 20 },
              { name: "week", seconds: 604_800, quota: 100 },
            ],
            payg_fallback: true,
          },
          byok: [{ provider: "own-upstream", key: "sk-owner-secret-value-7f3a" }],
        },
        base.accounts![1],
      ],
    },
  });
  // A week of traffic: a few requests a day on two models, one failing upstream.
  for (let day = 6; day >= 0; day--) {
    clock = today - day * dayMs;
    for (let i = 0; i < (day % 3) + 1; i++)
      await post(gw, "/v1/chat/completions", chat(`day ${day} request ${i}`.repeat(40)));
    if (day % 2 === 0) await post(gw, "/v1/chat/completions", chat("pro", "mock-pro"));
  }
  clock = today;
  await post(gw, "/v1/chat/completions", chat("down", "mock-down"));
  if (haveChromium) {
    browser = await chromium.launch({
      executablePath: chromiumPath,
      timeout: 15_000,
      args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
    });
  }
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

async function signedIn(width: number): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser!.newContext({
    viewport: { width, height: width < 500 ? 844 : 900 },
    permissions: ["clipboard-read", "clipboard-write"],
  });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(await createOwnerLink(gw.services.repos.sessions, "acct", gw.url));
  expect(new URL(page.url()).pathname).toBe("/dashboard");
  return { context, page };
}

async function shoot(page: Page, name: string): Promise<void> {
  if (!screenshots) return;
  mkdirSync(screenshots, { recursive: true });
  await page.screenshot({ path: join(screenshots, `${name}.png`), fullPage: true });
  await page.screenshot({ path: join(screenshots, `${name}-top.png`) });
}

const text = async (page: Page, selector: string) =>
  ((await page.locator(selector).textContent()) ?? "").trim();

describe.skipIf(!haveChromium)("the dashboard in a real browser", () => {
  it("shows the quota the API reports, usage charts, recent requests and the BYOK key's last four", async () => {
    const api = await quota(gw);
    const { context, page } = await signedIn(1280);
    try {
      const idr = (n: number) =>
        `Rp ${new Intl.NumberFormat("en-US", { maximumFractionDigits: Math.abs(n) < 10 && n !== 0 ? 4 : 2 }).format(n)}`;
      expect(await text(page, "#balance")).toBe(idr(api.balance_idr));
      expect(api.payg).not.toBeNull();
      expect(await text(page, "#payg-spent")).toBe(idr(api.payg!.spent_idr));
      expect(await text(page, "#free-left")).toBe(String(api.free.daily_remaining));
      for (const w of api.subscription!.windows) await page.getByText(`pro: ${w.name}`).waitFor();
      expect(await page.locator("#chart-spend svg rect").count()).toBe(30);
      expect(await page.locator("#chart-spend svg rect.v").count()).toBe(7);
      expect(await page.locator("#chart-requests svg rect.v").count()).toBe(7);
      const models = await page.locator("#per-model tbody tr td:first-child").allTextContents();
      expect(models).toEqual(expect.arrayContaining(["mock-gpt", "mock-pro", "mock-down"]));
      const recent = page.locator("#recent tbody tr");
      expect(await recent.count()).toBeGreaterThan(5);
      await expect.poll(() => recent.first().textContent()).toContain("mock-down");
      expect(await recent.first().locator(".pill.bad").textContent()).toContain("503");
      expect(await text(page, "#byok tbody")).toContain("...7f3a");
      expect(await page.content()).not.toContain("sk-owner-secret");
      await shoot(page, "dashboard-desktop");
    } finally {
      await context.close();
    }
  }, 30_000);

  it("creates a key shown once with a copy button; a reload neither re-creates nor re-shows it", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const before = gw.services.store.listKeys("acct").length;
      await page.getByLabel("New key label").fill("ci runner");
      await page.getByRole("button", { name: "Create key" }).click();
      const value = await text(page, "#new-key-value");
      expect(value).toMatch(/^kn-/);
      expect(new URL(page.url()).pathname).toBe("/dashboard");
      const copy = page.locator("button[data-copy=new-key-value]");
      expect(await copy.textContent()).toBe("Copy key");
      await copy.click();
      await expect.poll(() => copy.textContent()).toBe("Copied");
      expect(await page.evaluate("navigator.clipboard.readText()")).toBe(value);
      await shoot(page, "dashboard-new-key");
      const works = await post(gw, "/v1/chat/completions", chat(), {
        authorization: `Bearer ${value}`,
      });
      expect(works.status).toBe(200);
      await page.reload();
      expect(await page.locator("#new-key-value").count()).toBe(0);
      expect(await page.content()).not.toContain(value);
      expect(gw.services.store.listKeys("acct").length).toBe(before + 1);
    } finally {
      await context.close();
    }
  }, 30_000);

  it("asks before revoking, then folds the revoked key away", async () => {
    const { key } = gw.services.store.createKey({
      accountId: "acct",
      label: "old laptop",
      kind: "standard",
    });
    const { context, page } = await signedIn(1280);
    try {
      const row = page.locator(`#keys #key-${key.id}`);
      const confirm = row.getByRole("button", { name: "Revoke old laptop" });
      expect(await confirm.isVisible()).toBe(false);
      await row.getByText("Revoke", { exact: true }).click();
      expect(await confirm.isVisible()).toBe(true);
      await shoot(page, "dashboard-revoke-confirm");
      await confirm.click();
      await page.getByText('Key "old laptop" revoked.').waitFor();
      expect(await page.locator(`#keys #key-${key.id}`).count()).toBe(0);
      const folded = page.locator(`#revoked-keys #key-${key.id}`);
      expect(await folded.count()).toBe(1);
      expect(await folded.isVisible()).toBe(false);
      await page.locator("#revoked-keys summary").click();
      expect(await folded.isVisible()).toBe(true);
      expect(gw.services.store.getKey(key.id)!.revoked_at).not.toBeNull();
    } finally {
      await context.close();
    }
  }, 30_000);

  it("fits a 390 px phone screen without sideways scrolling", async () => {
    const { context, page } = await signedIn(390);
    try {
      await page.locator("#balance").waitFor();
      const width = await page.evaluate("document.documentElement.scrollWidth");
      expect(width).toBeLessThanOrEqual(390);
      await shoot(page, "dashboard-phone");
      // Approving a login happens on the phone: the approval page with its big code fits too.
      const res = await post(gw, "/api/auth/device/code", { client_name: "phone test" }, {});
      const { verification_uri_complete } = (await res.json()) as {
        verification_uri_complete: string;
      };
      await page.goto(verification_uri_complete);
      await page.locator("#user-code").waitFor();
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
      await shoot(page, "approval-phone");
    } finally {
      await context.close();
    }
  }, 30_000);
});
