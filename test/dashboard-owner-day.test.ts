import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { connectChromium, haveChromium, shoot, signedInTab } from "./support/browser.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { eventually, killByPid } from "./support/gateways-on-postgres.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * The owner's dashboard after a day of real use, in Chromium at a desktop's and a phone's width:
 * two streams cut when `gateway serve` was SIGKILLed (one paid, one free), requests served with
 * the account's own provider key, a request that cost a few micro-IDR, one its client left, one
 * that failed, and jobs. Every status and payment reads as what happened and is explained, each
 * cost is the one /v1/usage reports, and a refused form comes back as it was typed with its field
 * named. Set DASHBOARD_SCREENSHOTS=<dir> to keep screenshots.
 */

const OWN_KEY = "sk-owner-own-key-secret-4242";
const POOL_KEY = "sk-gateway-pool-key-6464";

let upstream: FakeUpstream;
let gw: TestGateway;
let serve: ServeProcess | undefined;
let browser: Browser | undefined;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "paced", wire: "mock", mock: { chunk_interval_ms: 20 } },
      // Answers after a minute: its client leaves first.
      { id: "slow", wire: "mock", mock: { latency_ms: 60_000 } },
      { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
      { id: "own-prov", wire: "openai", base_url: upstream.baseUrl, api_keys: [POOL_KEY] },
    ],
    models: [
      {
        name: "paced-gpt",
        provider: "paced",
        upstream_model: "mock-gpt",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      { name: "paced:free", provider: "paced", upstream_model: "mock-gpt" },
      { name: "slow-gpt", provider: "slow", price_input_per_mtok: 10_000 },
      { name: "own-model", provider: "own-prov", price_input_per_mtok: 1_000_000 },
      // Three micro-IDR a token: a short request costs less than 0.0001 IDR.
      { name: "cheap-gpt", provider: "mock", price_input_per_mtok: 3 },
      { name: "mock-music", provider: "mock-fast", modality: "music", price_per_unit: 150 },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 50, burst_spacing_ms: 0 } },
    accounts: (accounts) => [
      {
        ...accounts[0],
        payg: { limit_idr: 50_000.5 },
        byok: [{ provider: "own-prov", key: OWN_KEY }],
      },
      accounts[1],
    ],
  });
}

/** Reads a long stream on `url` until it delivered `words` pieces; the reading ends when the gateway dies. */
async function streamUntil(url: string, model: string, words: number) {
  const res = await post(
    { url },
    "/v1/chat/completions",
    chat("count [[mock:words=3000]]", model, { stream: true }),
  );
  expect(res.status).toBe(200);
  let pieces = 0;
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        pieces += decoder.decode(value, { stream: true }).match(/"content":"[^"]+"/g)?.length ?? 0;
      }
    } catch {
      // The gateway died under the stream.
    }
  })();
  await eventually(
    async () => pieces,
    (n) => n >= words,
    20_000,
    `${model} streaming`,
  );
  // Wrapped: a promise returned from an async function would be waited for.
  return { ended };
}

const dir = mkdtempSync(join(tmpdir(), "gateway-owner-day-"));

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  const db = join(dir, "gateway.db");
  const configFile = join(dir, "config.json");
  writeFileSync(configFile, JSON.stringify(config()));
  // Two streams, a paid and a free one, cut when the process is killed halfway through.
  serve = await serveProcess(["--config", configFile, "--db", db]);
  const cut = await Promise.all([
    streamUntil(serve.url, "paced-gpt", 40),
    streamUntil(serve.url, "paced:free", 40),
  ]);
  await killByPid(serve);
  await Promise.all(cut.map((stream) => stream.ended));
  // The next start on the same file settles them from their delivery marks.
  gw = await testGateway({ config: config(), db });
  const sent = async (body: unknown) =>
    expect((await post(gw, "/v1/chat/completions", body)).status).toBe(200);
  await sent(chat("hello there"));
  await sent(chat("hello free", "mock-gpt:free"));
  await sent(chat("cheap", "cheap-gpt"));
  for (let i = 0; i < 2; i++) await sent(chat("own key", "own-model"));
  expect((await post(gw, "/v1/chat/completions", chat("down", "mock-down"))).status).toBe(503);
  const music = await post(gw, "/v1/music/generations", {
    model: "mock-music",
    prompt: "lofi rain",
    duration: 2,
  });
  const job = (await music.json()) as { id: string };
  await eventually(
    async () => {
      const res = await fetch(`${gw.url}/v1/music/generations/${job.id}`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return ((await res.json()) as { status: string }).status;
    },
    (status) => status === "completed",
    10_000,
    "the music job",
  );
  // A client that leaves while its request is held: 499 client_closed.
  const leaving = new AbortController();
  const left = post(
    gw,
    "/v1/chat/completions",
    chat("slow", "slow-gpt"),
    undefined,
    leaving.signal,
  );
  left.catch(() => undefined);
  await eventually(
    async () => gw.services.ledger.heldMicro("acct"),
    (held) => held > 0,
    10_000,
    "the slow request held",
  );
  leaving.abort();
  await left.catch(() => undefined);
  await eventually(
    async () => gw.services.store.requestLog("acct", 1)[0]?.error_code ?? null,
    (code) => code === "client_closed",
    10_000,
    "the request its client left, logged",
  );
  if (haveChromium) browser = await connectChromium();
}, 90_000);
afterAll(async () => {
  await browser?.close();
  if (serve) await killByPid(serve);
  await gw?.close();
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Listed {
  id: string;
  model: string;
  state: string;
  status: number;
  error_code: string | null;
  payment: string;
  cost_idr: number;
}

async function listed(): Promise<Listed[]> {
  const res = await fetch(`${gw.url}/v1/usage/requests?limit=50`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  return ((await res.json()) as { data: Listed[] }).data;
}

/** The name of the form field that has the keyboard focus. */
const focusedField = `document.activeElement.getAttribute("name")`;

const text = async (page: Page, selector: string) =>
  ((await page.locator(selector).first().textContent()) ?? "").replace(/\s+/g, " ").trim();

describe.skipIf(!haveChromium)("the owner's dashboard after a day of use", () => {
  it.each([1280, 390])(
    "at %i px each request's cost is the one /v1/usage reports, a few micro-IDR included",
    async (width) => {
      const rows = await listed();
      const cheap = rows.find((r) => r.model === "cheap-gpt")!;
      expect(cheap.cost_idr).toBeGreaterThan(0);
      expect(cheap.cost_idr).toBeLessThan(0.0001);
      const { context, page, errors } = await signedInTab(browser!, gw, width);
      try {
        for (const r of rows) {
          const cost = await text(page, `#request-${r.id} td.num:not(.wide-only)`);
          const shown = Number(/Rp ([\d,.]+)/.exec(cost)![1].replace(/,/g, ""));
          // Two decimals from 10 IDR up; below, every micro-IDR.
          if (r.cost_idr < 10) expect(shown, `${r.model}: ${cost}`).toBe(r.cost_idr);
          else expect(Math.abs(shown - r.cost_idr), `${r.model}: ${cost}`).toBeLessThan(0.005);
        }
        const perModel = page
          .locator("#per-model tbody tr")
          .filter({ has: page.locator("code", { hasText: /^cheap-gpt$/ }) });
        expect(await perModel.textContent()).toContain(`Rp ${cheap.cost_idr}`);
        await page.goto(`${gw.url}/dashboard/requests/${cheap.id}`);
        expect(await text(page, "#request-cost")).toBe(`Rp ${cheap.cost_idr}`);
        await shoot(page, `owner-day-cheap-request-${width}`);
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    },
    30_000,
  );
  it("every status and payment the recent list shows is explained, and a request's page says what its state means, once", async () => {
    const rows = await listed();
    const interrupted = rows.filter((r) => r.state === "interrupted");
    expect(interrupted.map((r) => r.payment).sort()).toEqual(["balance", "free"]);
    const left = rows.find((r) => r.error_code === "client_closed")!;
    expect(left).toMatchObject({ state: "failed", status: 499, cost_idr: 0 });
    const { context, page, errors } = await signedInTab(browser!, gw, 1280);
    try {
      // A stream cut by the crash delivered and was charged: it reads neither as answered nor
      // as failed, and its pill says why when pointed at.
      for (const r of interrupted) {
        const pill = page.locator(`#request-${r.id} td.status .pill`);
        expect(await pill.getAttribute("class")).not.toMatch(/\b(ok|bad)\b/);
        expect(await pill.getAttribute("title")).toMatch(/gateway stopped/);
      }
      expect(
        await page.locator(`#request-${left.id} td.status .pill`).getAttribute("title"),
      ).toMatch(/client closed the connection/);
      // What a row says under its status and under its cost, the legend explains.
      const legend = page.locator("#status-legend");
      await legend.locator("summary").click();
      const explained = ((await legend.textContent()) ?? "").replace(/\s+/g, " ");
      const shown = await page
        .locator("#recent td.status .muted, #recent td.num:not(.wide-only) .muted")
        .allTextContents();
      expect(new Set(shown.map((t) => t.trim()))).toEqual(
        new Set(["interrupted", "client_closed", "upstream_error", "own key", "free"]),
      );
      for (const word of shown) expect(explained, word).toContain(word.trim());
      const freeRow = rows.find((r) => r.model === "mock-gpt:free")!;
      expect(
        (await page.locator(`#request-${freeRow.id} td.num:not(.wide-only)`).innerText()).split(
          /\s+/,
        ),
      ).toEqual(["Rp", "0", "free"]);
      await shoot(page, "owner-day-legend", { selector: "#status-legend" });
      await shoot(page, "owner-day-dashboard", { screens: true });
      for (const secret of [OWN_KEY, OWN_KEY.slice(-8), POOL_KEY, KEY])
        expect(await page.content()).not.toContain(secret);

      await page.goto(`${gw.url}/dashboard/requests/${interrupted[0].id}`);
      const status = await text(page, "#request-status");
      expect(status.match(/interrupted/g), status).toHaveLength(1);
      expect(status).toMatch(/gateway stopped/);
      await shoot(page, "owner-day-interrupted");
      await page.goto(`${gw.url}/dashboard/requests/${left.id}`);
      expect(await text(page, "#request-status")).toMatch(/client closed the connection/);
      const paidBy = page
        .locator("#request dt", { hasText: /^Paid by$/ })
        .locator("xpath=following-sibling::dd[1]");
      expect(await paidBy.textContent()).toMatch(/nothing charged/);
      await shoot(page, "owner-day-client-closed");
      expect(await page.content()).not.toContain(POOL_KEY);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  }, 30_000);

  it("on a 390 px phone each recent request's time and endpoint are shown whole", async () => {
    const { context, page } = await signedInTab(browser!, gw, 390);
    try {
      const cut = (await page.evaluate(`[...document.querySelectorAll("#recent td.req .sub")]
        .filter((el) => el.scrollWidth > el.clientWidth).map((el) => el.textContent)`)) as string[];
      await shoot(page, "owner-day-recent-phone", { selector: "#recent" });
      expect(cut).toEqual([]);
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
    } finally {
      await context.close();
    }
  }, 30_000);

  it.each([1280, 390])(
    "at %i px a refused pay as you go limit comes back as typed, its field named, focused and on screen",
    async (width) => {
      const before = gw.services.store.getAccount("acct")!;
      const { context, page, errors } = await signedInTab(browser!, gw, width);
      try {
        const form = page.locator("#payg-form");
        await form.getByLabel("Pay as you go on").uncheck();
        await form.getByLabel("Limit (IDR)").fill("0.0000001");
        const answer = page.waitForResponse((r) => r.url().endsWith("/dashboard/payg"));
        await form.getByRole("button", { name: "Save" }).click();
        expect((await answer).status()).toBe(400);
        await page.waitForLoadState();
        const limit = page.getByLabel("Limit (IDR)");
        expect(await limit.inputValue()).toBe("0.0000001");
        expect(await page.getByLabel("Pay as you go on").isChecked()).toBe(false);
        expect(await limit.getAttribute("aria-invalid")).toBe("true");
        expect(await page.evaluate(focusedField)).toBe("limit_idr");
        const why = page.locator(`#${await limit.getAttribute("aria-describedby")}`);
        expect(await why.textContent()).toContain("The PAYG limit must have at most 6 decimals");
        // On screen as the page opens, beside the field: not only at the top of a long page.
        const box = (await why.boundingBox())!;
        expect(box.y).toBeGreaterThanOrEqual(0);
        expect(box.y + box.height).toBeLessThanOrEqual(page.viewportSize()!.height);
        await shoot(page, `owner-day-payg-refused-${width}`, { screens: true });
        expect(gw.services.store.getAccount("acct")).toMatchObject({
          payg_enabled: before.payg_enabled,
          payg_limit_micro: before.payg_limit_micro,
        });
        expect(errors.filter((e) => !e.includes("status of 400"))).toEqual([]);
      } finally {
        await context.close();
      }
    },
    30_000,
  );

  it("a key's label takes 100 characters however many UTF-16 units they are; the 101st is refused with the label kept", async () => {
    const { context, page } = await signedInTab(browser!, gw, 390);
    const keysOf = () => gw.services.store.listKeys("acct").map((k) => k.label);
    try {
      const hundred = `${"🚀".repeat(91)}ünïcödé 🤖`;
      expect([...hundred]).toHaveLength(100);
      const input = page.getByLabel("New key label");
      await input.fill(hundred);
      expect(await input.inputValue()).toBe(hundred);
      await page.getByRole("button", { name: "Create key" }).click();
      await page.locator("#new-key-value").waitFor();
      expect(keysOf()).toContain(hundred);
      expect(await text(page, ".new-key bdi")).toBe(hundred);

      const tooLong = `${hundred}!`;
      await page.getByLabel("New key label").fill(tooLong);
      const answer = page.waitForResponse((r) => r.url().endsWith("/dashboard/keys"));
      await page.getByRole("button", { name: "Create key" }).click();
      expect((await answer).status()).toBe(400);
      await page.waitForLoadState();
      const again = page.getByLabel("New key label");
      expect(await again.inputValue()).toBe(tooLong);
      expect(await again.getAttribute("aria-invalid")).toBe("true");
      expect(await page.evaluate(focusedField)).toBe("label");
      const why = page.locator(`#${await again.getAttribute("aria-describedby")}`);
      expect(await why.textContent()).toMatch(/label.*at most 100 characters.*101/);
      await shoot(page, "owner-day-label-refused", { screens: true });
      expect(keysOf()).not.toContain(tooLong);
    } finally {
      await context.close();
    }
  }, 30_000);
});
