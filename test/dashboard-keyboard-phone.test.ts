import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectChromium, haveChromium, shoot, signedInTab } from "./support/browser.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

const longModel = "mock-very-long-model-name-for-a-phone-screen-2024-07-18-preview-extended";

let gw: TestGateway;
let browser: Browser | undefined;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfigWith({
      providers: [{ id: "own-upstream", wire: "mock" }],
      models: [{ name: longModel, provider: "mock", price_input_per_mtok: 70_000_000_000 }],
      accounts: (accounts) => [
        {
          ...accounts[0],
          balance_idr: 999_999_999,
          payg: { limit_idr: 987_654_321.55 },
          byok: [{ provider: "own-upstream", key: "sk-owner-secret-value-7f3a" }],
        },
        accounts[1],
      ],
    }),
  });
  await post(gw, "/v1/chat/completions", chat("hello"));
  // One request costs millions of IDR, leaving a balance with ten digits and its decimals.
  expect(
    (await post(gw, "/v1/chat/completions", chat("expensive ".repeat(20), longModel))).status,
  ).toBe(200);
  if (haveChromium) browser = await connectChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

const signedIn = (width: number) => signedInTab(browser!, gw, width);

const focused = `(() => {
  const el = document.activeElement;
  const cs = getComputedStyle(el);
  return { name: (el.getAttribute("aria-label") || el.textContent || "").trim(), outline: cs.outlineStyle };
})()`;

/**
 * The owner's dashboard with the keyboard only and on a 390 px phone, for an account of a
 * balance near a billion IDR, a model with a long name and a request costing millions. Set
 * DASHBOARD_SCREENSHOTS=<dir> to keep screenshots.
 */
describe.skipIf(!haveChromium)(
  "the dashboard by keyboard and on a phone, with large amounts",
  () => {
    it("by keyboard: a Revoke confirmation opens with Enter and closes with Space, its button is the next Tab with an outline; Enter submits the key, PAYG and login code forms", async () => {
      const { context, page } = await signedIn(390);
      try {
        const details = page.locator("#keys tbody tr").first().locator("details");
        await details.locator("summary").focus();
        await page.keyboard.press("Enter");
        expect(await details.evaluate((d) => (d as unknown as { open: boolean }).open)).toBe(true);
        await page.keyboard.press("Tab");
        expect(await page.evaluate(focused)).toEqual({ name: "Revoke main", outline: "auto" });
        await shoot(page, "kbd-revoke-focused");
        await details.locator("summary").focus();
        await page.keyboard.press("Space");
        expect(await details.evaluate((d) => (d as unknown as { open: boolean }).open)).toBe(false);

        await page.getByLabel("New key label").focus();
        await page.keyboard.type("typed-key");
        await page.keyboard.press("Enter");
        await page.locator("#new-key-value").waitFor();
        expect(gw.services.store.listKeys("acct").some((k) => k.label === "typed-key")).toBe(true);

        await page.getByLabel("Limit (IDR)").focus();
        await page.keyboard.press("Control+A");
        await page.keyboard.type("999999999.99");
        await page.keyboard.press("Enter");
        await page.getByText("Pay as you go is on, limit Rp 999,999,999.99.").waitFor();

        const res = await post(gw, "/api/auth/device/code", { client_name: "keyboard" }, {});
        const { user_code } = (await res.json()) as { user_code: string };
        // Both pages start with the dashboard's navigation: Dashboard, Approve a login, Sign out.
        const pastNavigation = async () => {
          for (let i = 0; i < 4; i++) await page.keyboard.press("Tab");
        };
        await page.goto(`${gw.url}/dashboard/device`);
        await pastNavigation();
        await page.keyboard.type(user_code);
        await page.keyboard.press("Enter");
        await page.locator("#user-code").waitFor();
        await pastNavigation();
        expect(await page.evaluate(focused)).toEqual({ name: "Approve", outline: "auto" });
        await page.keyboard.press("Enter");
        await page.getByText("Login approved").waitFor();
      } finally {
        await context.close();
      }
    }, 30_000);

    it("at 390 px the balance, held and PAYG amounts of the cards break only at a space, never inside their digits", async () => {
      const { context, page } = await signedIn(390);
      try {
        await shoot(page, "phone-cards", { selector: ".cards" });
        const breaks = (await page.evaluate(`(() => {
        const out = {};
        for (const id of ["balance", "held", "payg-spent"]) {
          const text = document.getElementById(id).firstChild;
          const tops = [];
          for (let i = 0; i < text.length; i++) {
            const range = document.createRange();
            range.setStart(text, i);
            range.setEnd(text, i + 1);
            tops.push(Math.round(range.getBoundingClientRect().top));
          }
          // A character that starts a new line, after one that is not a space: a break inside a word.
          out[id] = [];
          for (let i = 1; i < text.length; i++)
            if (tops[i] > tops[i - 1] && text.data[i - 1] !== " ")
              out[id].push(text.data.slice(0, i) + " / " + text.data.slice(i));
        }
        return out;
      })()`)) as Record<string, string[]>;
        expect(breaks).toEqual({ balance: [], held: [], "payg-spent": [] });
        const right = (await page.evaluate(`(() => {
        const card = document.getElementById("balance").closest(".card").getBoundingClientRect().right;
        return document.getElementById("balance").getBoundingClientRect().right - card;
      })()`)) as number;
        expect(right, "the balance sticks out of its card").toBeLessThanOrEqual(0);
      } finally {
        await context.close();
      }
    }, 30_000);

    it("at 390 px the per-model table shows a short model name whole beside a spend of millions, and still says how many requests", async () => {
      const { context, page } = await signedIn(390);
      try {
        await shoot(page, "phone-per-model", { selector: "#per-model" });
        const names =
          (await page.evaluate(`[...document.querySelectorAll("#per-model td.req .name")].map(
        (n) => ({ text: n.textContent, clipped: n.scrollWidth > n.clientWidth, width: n.clientWidth }))`)) as {
            text: string;
            clipped: boolean;
            width: number;
          }[];
        expect(names.find((n) => n.text === "mock-gpt")).toMatchObject({ clipped: false });
        expect(
          await page.evaluate("document.querySelector('#per-model').parentElement.scrollWidth"),
        ).toBeLessThanOrEqual(
          (await page.evaluate(
            "document.querySelector('#per-model').parentElement.clientWidth",
          )) as number,
        );
        const row = page.locator("#per-model tbody tr", { hasText: "mock-gpt" }).first();
        expect(await row.innerText()).toMatch(/\b1\b/);
      } finally {
        await context.close();
      }
    }, 30_000);
  },
);
