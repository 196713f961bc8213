import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectChromium, haveChromium, shoot, signedInTab } from "./support/browser.js";
import { baseConfig, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A key's label as long as the form takes (100 characters), one unbroken word, on the dashboard
 * in Chromium at a phone's and a desktop's width: the keys table, its Revoke and the new key's box
 * stay on screen, and the page logs no error. Set DASHBOARD_SCREENSHOTS=<dir> to keep screenshots.
 */

let gw: TestGateway;
let browser: Browser | undefined;

beforeAll(async () => {
  gw = await testGateway({ config: baseConfig() });
  await post(gw, "/v1/chat/completions", chat("hello"));
  if (haveChromium) browser = await connectChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await gw?.close();
});

const keysOf = () => gw.services.store.listKeys("acct");

describe.skipIf(!haveChromium)("a key with a long unbroken label on the dashboard", () => {
  it.each([390, 1280])(
    "at %i px a key with a long unbroken label keeps the keys table and its Revoke on screen",
    async (width) => {
      const label = `build-server-${width}-${"x".repeat(90)}`.slice(0, 100);
      const { context, page, errors } = await signedInTab(browser!, gw, width);
      try {
        await page.getByLabel("New key label").fill(label);
        await page.getByRole("button", { name: "Create key" }).click();
        await page.locator("#new-key-value").waitFor();
        await shoot(page, `long-label-new-key-${width}`);
        const created = keysOf().find((k) => k.label === label)!;
        const row = page.locator(`#keys #key-${created.id}`);
        await row.getByText("Revoke", { exact: true }).click();
        await row.scrollIntoViewIfNeeded();
        await shoot(page, `long-label-keys-${width}`);
        const layout = (await page.evaluate(`(() => {
          const scroller = document.querySelector("#keys").parentElement;
          const box = document.querySelector(".new-key");
          const right = (el) => el.getBoundingClientRect().right;
          return {
            sideways: scroller.scrollWidth - scroller.clientWidth,
            summaryRight: right(document.querySelector("#key-${created.id} summary")),
            buttonRight: right(document.querySelector("#key-${created.id} button.danger")),
            newKeyOverflow: box.scrollWidth - box.clientWidth,
            viewport: document.documentElement.clientWidth,
          };
        })()`)) as Record<string, number>;
        expect(layout.sideways, "the keys table scrolls sideways").toBe(0);
        expect(layout.summaryRight).toBeLessThanOrEqual(layout.viewport);
        expect(layout.buttonRight).toBeLessThanOrEqual(layout.viewport);
        expect(layout.newKeyOverflow, "the label overflows the new key's box").toBe(0);
        await page.getByRole("button", { name: `Revoke ${label}` }).click();
        await page.getByText(`Key "${label}" revoked.`).waitFor();
        await shoot(page, `long-label-revoked-${width}`);
        expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
          width,
        );
        const notice = (await page.evaluate(
          `(() => { const n = document.querySelector(".notice"); return n.scrollWidth - n.clientWidth; })()`,
        )) as number;
        expect(notice, "the revoked notice overflows").toBe(0);
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    },
    30_000,
  );
});
