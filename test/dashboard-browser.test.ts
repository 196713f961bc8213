import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatIdr } from "../src/server/dashboard/pages.js";
import { quota } from "./support/api.js";
import { connectChromium, haveChromium, shoot, signedInTab } from "./support/browser.js";
import {
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * The owner's dashboard in a real browser (Debian's chromium via playwright-core), at a desktop
 * and a phone width. Set DASHBOARD_SCREENSHOTS=<dir> to keep screenshots of both.
 */

/** A name as long as real ones get, priced so its requests cost thousands of IDR. */
const longModel = "mock-gpt-4o-mini-2024-07-18-extended";

const dayMs = 86_400_000;

let gw: TestGateway;
let browser: Browser | undefined;
const today = Date.now();
// The gateway's time never goes back, so the week of traffic is made from its first day on.
let clock = today - 6 * dayMs;

beforeAll(async () => {
  gw = await testGateway({
    now: () => clock,
    config: baseConfigWith({
      providers: [
        { id: "own-upstream", wire: "mock" },
        // BYOK keys are for real provider wires; nothing is sent to it in these tests.
        { id: "openai", wire: "openai", base_url: "http://127.0.0.1:9/v1" },
      ],
      models: [{ name: longModel, provider: "mock", price_input_per_mtok: 90_000_000 }],
      accounts: (accounts) => [
        {
          ...accounts[0],
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
        accounts[1],
      ],
    }),
  });
  // A week of traffic: a few requests a day on two models, one failing upstream.
  for (let day = 6; day >= 0; day--) {
    clock = today - day * dayMs;
    for (let i = 0; i < (day % 3) + 1; i++)
      await post(gw, "/v1/chat/completions", chat(`day ${day} request ${i}`.repeat(40)));
    if (day % 2 === 0) await post(gw, "/v1/chat/completions", chat("pro", "mock-pro"));
  }
  clock = today;
  await post(gw, "/v1/chat/completions", chat("expensive ".repeat(200), longModel));
  await post(gw, "/v1/chat/completions", chat("down", "mock-down"));
  if (haveChromium) browser = await connectChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

const signedIn = (width: number) =>
  signedInTab(browser!, gw, width, { permissions: ["clipboard-read", "clipboard-write"] });

const text = async (page: Page, selector: string) =>
  ((await page.locator(selector).textContent()) ?? "").trim();

describe.skipIf(!haveChromium)("the dashboard in a real browser", () => {
  it("shows the quota the API reports, usage charts, recent requests and the BYOK key's last four", async () => {
    const api = await quota(gw);
    const { context, page } = await signedIn(1280);
    try {
      const idr = (n: number) =>
        `Rp ${new Intl.NumberFormat("en-US", { maximumFractionDigits: Math.abs(n) < 10 && n !== 0 ? 6 : 2 }).format(n)}`;
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
      // The failing request by its model, not as the first row: another test of this file, run
      // before this one in a shuffled order, adds a newer request at the same clock time.
      const down = recent.filter({ hasText: "mock-down" });
      await expect.poll(() => down.count()).toBe(1);
      expect(await down.locator(".pill.bad").textContent()).toContain("503");
      expect(await text(page, "#byok tbody")).toContain("...7f3a");
      expect(await page.content()).not.toContain("sk-owner-secret");
      await shoot(page, "dashboard-desktop", { screens: true });
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
      await shoot(page, "dashboard-new-key", { screens: true });
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
      await shoot(page, "dashboard-revoke-confirm", { screens: true });
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
      await shoot(page, "dashboard-phone", { screens: true });
      // Approving a login happens on the phone: the approval page with its big code fits too.
      const res = await post(gw, "/api/auth/device/code", { client_name: "phone test" }, {});
      const { verification_uri_complete } = (await res.json()) as {
        verification_uri_complete: string;
      };
      await page.goto(verification_uri_complete);
      await page.locator("#user-code").waitFor();
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
      await shoot(page, "approval-phone", { screens: true });
    } finally {
      await context.close();
    }
  }, 30_000);
  it("adds a provider key with the form and removes it after a confirmation", async () => {
    const secret = "sk-browser-added-secret-a1b2";
    const { context, page } = await signedIn(1280);
    try {
      const form = page.locator("#byok-add");
      await form.locator("select[name=provider]").selectOption("openai");
      await form.getByLabel("Label").fill("team openai");
      await form.getByLabel("Provider key").fill(secret);
      await shoot(page, "byok-form", { screens: true });
      await form.getByRole("button", { name: "Add provider key" }).click();
      await page.getByText('Provider key "team openai" (...a1b2) added for openai.').waitFor();
      const linked = gw.services.store.listByok("acct").find((b) => b.label === "team openai");
      expect(linked).toMatchObject({ provider_id: "openai" });
      const row = page.locator(`#byok-${linked!.id}`);
      expect(await row.textContent()).toContain("...a1b2");
      expect(await page.content()).not.toContain(secret);

      const confirm = row.getByRole("button", { name: "Remove team openai" });
      expect(await confirm.isVisible()).toBe(false);
      await row.getByText("Remove", { exact: true }).click();
      await confirm.click();
      await page.getByText('Provider key "team openai" removed.').waitFor();
      expect(gw.services.store.listByok("acct").some((b) => b.id === linked!.id)).toBe(false);
      expect(await page.locator(`#byok-${linked!.id}`).count()).toBe(0);
    } finally {
      await context.close();
    }
  }, 30_000);

  it("an unknown provider or an empty key is refused on the page, nothing added", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const before = gw.services.store.listByok("acct").length;
      // A tampered form: the select offers only real providers.
      await page.evaluate(`{
        const select = document.querySelector("#byok-add select");
        select.add(new Option("nope", "nope"));
        select.value = "nope";
      }`);
      await page.locator("#byok-add").getByLabel("Provider key").fill("sk-whatever-1234");
      const answer = page.waitForResponse((r) => r.url().endsWith("/dashboard/byok"));
      await page.getByRole("button", { name: "Add provider key" }).click();
      expect((await answer).status()).toBe(400);
      await page.getByText('Unknown provider "nope" for BYOK.').waitFor();
      expect(gw.services.store.listByok("acct").length).toBe(before);
    } finally {
      await context.close();
    }
  }, 30_000);

  it("turns pay as you go off and on and sets its limit, as the quota API then reports", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const form = page.locator("#payg-form");
      await form.getByLabel("Pay as you go on").uncheck();
      await form.getByRole("button", { name: "Save" }).click();
      await page.getByText("Pay as you go is off.").waitFor();
      expect((await quota(gw)).payg).toBeNull();
      expect(await text(page, "#payg-state")).toBe("off");

      await form.getByLabel("Pay as you go on").check();
      await form.getByLabel("Limit (IDR)").fill("75000.5");
      await form.getByRole("button", { name: "Save" }).click();
      await page.getByText("Pay as you go is on, limit Rp 75,000.5.").waitFor();
      expect((await quota(gw)).payg).toMatchObject({ enabled: true, limit_idr: 75_000.5 });
      expect(await page.locator(".card", { hasText: "Pay as you go" }).textContent()).toContain(
        "of Rp 75,000.5",
      );
      expect(await form.getByLabel("Limit (IDR)").inputValue()).toBe("75000.5");
      await shoot(page, "payg-saved", { screens: true });

      await form.getByLabel("Limit (IDR)").fill("-5");
      // The browser's own check stops a negative number; the server refuses it too (below).
      await page.evaluate(`document.querySelector("#payg-form").setAttribute("novalidate", "")`);
      await form.getByRole("button", { name: "Save" }).click();
      await page.getByText("The PAYG limit must be a number of IDR").waitFor();
      expect((await quota(gw)).payg).toMatchObject({ limit_idr: 75_000.5 });
    } finally {
      await context.close();
    }
  }, 30_000);

  it("opens a recent request: status, code, tokens, cost and request id", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const failed = gw.services.store
        .requestLog("acct", 100)
        .find((r) => r.model === "mock-down")!;
      expect(failed).toMatchObject({ status: 503 });
      await page.locator(`#request-${failed.id} a.name`).click();
      await page.getByRole("heading", { name: "Request" }).waitFor();
      expect(new URL(page.url()).pathname).toBe(`/dashboard/requests/${failed.id}`);
      expect(await text(page, "#request-id")).toBe(failed.id);
      expect(await text(page, "#request-status")).toContain("503");
      expect(await text(page, "#request-code")).toBe("upstream_error");
      await shoot(page, "request-failed", { screens: true });

      const res = await fetch(`${gw.url}/v1/usage/requests?limit=5`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      const listed = (
        (await res.json()) as {
          data: {
            id: string;
            model: string;
            input_tokens: number;
            output_tokens: number;
            cost_idr: number;
          }[];
        }
      ).data;
      const paid = listed.find((r) => r.model === longModel)!;
      await page.goto(`${gw.url}/dashboard`);
      await page.locator(`#request-${paid.id} a.name`).click();
      expect(await text(page, "#request-tokens")).toBe(
        `${paid.input_tokens.toLocaleString("en-US")} in, ${paid.output_tokens.toLocaleString("en-US")} out`,
      );
      expect(await text(page, "#request-cost")).toBe(formatIdr(paid.cost_idr));
      expect(await text(page, "#request-code")).toBe("-");

      // Another account's request, or no such id: a 404 page, nothing shown.
      const other = await page.goto(`${gw.url}/dashboard/requests/req_nope`);
      expect(other!.status()).toBe(404);
    } finally {
      await context.close();
    }
  }, 30_000);

  it("shows the charts' values: the scale, the hovered bar, and a table per day", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const daily = gw.services.store.usageDaily("acct", clock - 29 * dayMs);
      const today = daily[daily.length - 1];
      const bars = page.locator("#chart-requests svg rect");
      await bars.last().hover();
      expect(await text(page, "#chart-requests .readout")).toBe(
        `${today.date}: ${today.requests} request${today.requests === 1 ? "" : "s"}`,
      );
      await page.locator("#chart-spend svg rect").last().hover();
      expect(await text(page, "#chart-spend .readout")).toBe(
        `${today.date}: ${formatIdr(today.cost_idr)}`,
      );
      const peak = Math.max(...daily.map((d) => d.requests));
      expect(await text(page, "#chart-requests .scale span:first-child")).toBe(
        `${peak} request${peak === 1 ? "" : "s"}`,
      );
      await shoot(page, "chart-hover-top", { screens: true });
      await page.locator("#daily-values summary").click();
      const rows = await page.locator("#daily-values tbody tr").allTextContents();
      expect(rows).toHaveLength(daily.length);
      expect(rows[0]).toContain(today.date);
      expect(rows[0]).toContain(formatIdr(today.cost_idr));
    } finally {
      await context.close();
    }
  }, 30_000);

  it("at 390 px the recent requests' cost column is whole and names do not break", async () => {
    const { context, page } = await signedIn(390);
    try {
      const recent = page.locator("#recent");
      await recent.scrollIntoViewIfNeeded();
      const layout = (await page.evaluate(`(() => {
        const table = document.querySelector("#recent");
        const cells = [...table.querySelectorAll("tbody td.num")].filter(
          (td) => getComputedStyle(td).display !== "none",
        );
        const names = [...document.querySelectorAll("code, .nw, .when")];
        return {
          tableRight: table.getBoundingClientRect().right,
          scroller: table.parentElement.scrollWidth - table.parentElement.clientWidth,
          costs: cells.map((td) => ({
            right: td.getBoundingClientRect().right,
            clipped: td.scrollWidth > td.clientWidth,
            text: td.textContent,
          })),
          // Broken: its boxes sit on more than one line (an ellipsis is not a break).
          brokenNames: names
            .filter((n) => new Set([...n.getClientRects()].map((r) => Math.round(r.top))).size > 1)
            .map((n) => n.textContent),
        };
      })()`)) as {
        tableRight: number;
        scroller: number;
        costs: { right: number; clipped: boolean; text: string }[];
        brokenNames: string[];
      };
      expect(layout.scroller).toBe(0);
      expect(layout.tableRight).toBeLessThanOrEqual(390);
      expect(layout.costs.length).toBeGreaterThan(5);
      expect(layout.costs.some((c) => c.text!.includes(","))).toBe(true);
      for (const cost of layout.costs) {
        expect(cost.clipped, String(cost.text)).toBe(false);
        expect(cost.right, String(cost.text)).toBeLessThanOrEqual(390);
      }
      expect(layout.brokenNames).toEqual([]);
      await shoot(page, "recent-phone", { selector: "#recent" });
      await page.locator(`#recent a.name`).first().click();
      await page.locator("#request-id").waitFor();
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
      await shoot(page, "request-phone", { screens: true });
      await page.goBack();
      await shoot(page, "dashboard-phone-actions", { screens: true });
    } finally {
      await context.close();
    }
  }, 30_000);

  it("signs out: the cookie and the session are gone, and the dashboard asks for a sign-in", async () => {
    const { context, page } = await signedIn(1280);
    try {
      const before = (await context.cookies()).find((c) => c.name === "gateway_session")!;
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByRole("heading", { name: "Signed out" }).waitFor();
      expect((await context.cookies()).some((c) => c.name === "gateway_session")).toBe(false);
      await page.goto(`${gw.url}/dashboard`);
      await page.getByRole("heading", { name: "Sign in to the gateway dashboard" }).waitFor();
      // The old cookie, replayed, opens nothing: the session was ended on the server.
      const replay = await fetch(`${gw.url}/dashboard`, {
        headers: { cookie: `gateway_session=${before.value}` },
      });
      expect(replay.status).toBe(401);
    } finally {
      await context.close();
    }
  }, 30_000);
});
