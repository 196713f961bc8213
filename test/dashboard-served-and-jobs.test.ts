import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { quota } from "./support/api.js";
import { connectChromium, haveChromium, shoot, signedInTab } from "./support/browser.js";
import { backends, chat, KEY, post, type TestGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { type ConfigAdditions, useJobsGateway } from "./support/jobs-gateway.js";

/**
 * What landed today, as the owner sees it in Chromium at a desktop's and a phone's width: the
 * step of a route that served a request (in the recent list and on the request's page, and not
 * where the model asked for served itself; in the per-model table, the model that served), a
 * job's progress while it runs (its request is logged only when it ends), and names as long as
 * real ones get kept inside a phone's screen. Set DASHBOARD_SCREENSHOTS=<dir> to keep screenshots.
 */

const longModel = "mock-very-long-model-name-for-a-phone-screen-2024-07-18-preview-extended";
const longRoute = "team-default-route-with-a-long-name-that-falls-back-2024-07-18-preview";
const longVideo = "mock-video-model-with-a-very-long-name-for-a-phone-2024-07-18-preview";
const JOB_MS = 60_000;

/** A model, a route through it and a video model whose job takes JOB_MS, each with a long name. */
const longNames: ConfigAdditions = {
  providers: [{ id: "mock-minute", wire: "mock", mock: { job_seconds: JOB_MS / 1000 } }],
  models: [
    { name: longModel, provider: "mock", price_input_per_mtok: 10_000 },
    { name: longVideo, provider: "mock-minute", modality: "video", price_per_unit: 50 },
  ],
  routes: [{ name: longRoute, steps: ["mock-down", longModel] }],
};

const text = async (page: Page, selector: string) =>
  ((await page.locator(selector).first().textContent()) ?? "").replace(/\s+/g, " ").trim();

/** How far past the right edge of the screen the elements of `selector` reach (0: none does). */
const pastRightEdge = (page: Page, selector: string) =>
  page.evaluate(
    `Math.max(0, ...[...document.querySelectorAll(${JSON.stringify(selector)})].map(
      (el) => el.getBoundingClientRect().right - document.documentElement.clientWidth))`,
  ) as Promise<number>;

describe.skipIf(!haveChromium).each(backends)(
  "the dashboard's served models and jobs (%s)",
  (backend) => {
    let gw: TestGateway;
    let browser: Browser;
    const requestOf: Record<string, string> = {};
    let jobId = "";

    const jobStatus = async () => {
      const res = await fetch(`${gw.url}/v1/videos/generations/${jobId}`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return (await res.json()) as { status: string; progress: number };
    };

    useJobsGateway(backend, longNames, { clock: "manual", now: () => Date.now() }, (started) => {
      ({ gw } = started);
    });
    beforeAll(async () => {
      for (const model of ["auto", "mock-gpt", longRoute]) {
        const res = await post(gw, "/v1/chat/completions", chat("hello", model));
        expect(res.status).toBe(200);
        requestOf[model] = res.headers.get("x-request-id")!;
      }
      const res = await post(gw, "/v1/videos/generations", {
        model: longVideo,
        prompt: "tide",
        seconds: 4,
      });
      expect(res.status).toBe(202);
      jobId = ((await res.json()) as { id: string }).id;
      await eventually(jobStatus, (job) => job.status === "running", 10_000, "the job running");
      gw.clock.advance(JOB_MS / 4);
      await eventually(jobStatus, (job) => job.progress === 25, 10_000, "a quarter of the job");
      browser = await connectChromium();
    }, 60_000);
    afterAll(async () => {
      await browser?.close();
    });

    it.each([1280, 390])(
      "at %i px a request a route served names the step that served it, in the list and on its page; a model that served itself is named once",
      async (width) => {
        const { context, page, errors } = await signedInTab(browser, gw, width);
        try {
          const row = (model: string) => `#request-${requestOf[model]}`;
          expect(await text(page, `${row("auto")} .served`)).toBe("served by mock-gpt");
          expect(await text(page, `${row(longRoute)} .served`)).toBe(`served by ${longModel}`);
          expect(await page.locator(`${row("mock-gpt")} .served`).count()).toBe(0);
          await shoot(page, `served-recent-${backend}-${width}`, { selector: "#recent" });

          await page.locator(`${row("auto")} a.name`).click();
          expect(await text(page, "#request-served-model")).toBe("mock-gpt");
          await shoot(page, `served-request-route-${backend}-${width}`);
          await page.goto(`${gw.url}/dashboard/requests/${requestOf["mock-gpt"]}`);
          expect(await page.locator("#request-served-model").count()).toBe(0);
          expect((await text(page, "#request")).match(/mock-gpt/g)).toHaveLength(1);
          expect(errors).toEqual([]);
        } finally {
          await context.close();
        }
      },
      30_000,
    );

    it.each([1280, 390])(
      "at %i px a running job shows how far it got as a number and a bar, on screen",
      async (width) => {
        const { context, page, errors } = await signedInTab(browser, gw, width);
        try {
          const job = page.locator(`#jobs #job-${jobId}`);
          expect(await text(page, `#job-${jobId} td.status`)).toBe("running");
          expect(await text(page, `#job-${jobId} .percent`)).toBe("25%");
          expect(await job.locator("progress").getAttribute("value")).toBe("25");
          expect(await job.locator("progress").isVisible()).toBe(true);
          await job.scrollIntoViewIfNeeded();
          await shoot(page, `jobs-running-${backend}-${width}`, { selector: "#jobs" });
          await shoot(page, `jobs-dashboard-${backend}-${width}`, { screens: true });
          expect(await pastRightEdge(page, "#jobs td, #jobs progress, #recent td")).toBe(0);
          expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
            width,
          );
          expect(errors).toEqual([]);
        } finally {
          await context.close();
        }
      },
      30_000,
    );

    it("at 390 px a long route's request page keeps every fact on screen", async () => {
      const { context, page, errors } = await signedInTab(browser, gw, 390, {
        next: `/dashboard/requests/${requestOf[longRoute]}`,
      });
      try {
        expect(await text(page, "#request-served-model")).toBe(longModel);
        await shoot(page, `served-request-long-${backend}-390`);
        expect(await pastRightEdge(page, "#request dd, #request dt")).toBe(0);
        expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(
          390,
        );
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    }, 30_000);

    it("a job that ends shows 100% and its model opens its request, which the recent list now has", async () => {
      gw.clock.advance(JOB_MS);
      await eventually(jobStatus, (job) => job.status === "completed", 10_000, "the job completed");
      const { context, page, errors } = await signedInTab(browser, gw, 1280);
      try {
        expect(await text(page, `#job-${jobId} td.status`)).toBe("completed");
        expect(await text(page, `#job-${jobId} .percent`)).toBe("100%");
        await shoot(page, `jobs-completed-${backend}`, { selector: "#jobs" });
        // By keyboard the jobs come after the recent requests' legend, before the keys.
        await page.locator("#status-legend summary").focus();
        await page.keyboard.press("Tab");
        expect(await page.evaluate("document.activeElement.closest('tr')?.id")).toBe(
          `job-${jobId}`,
        );
        await page.locator(`#job-${jobId} a.name`).click();
        expect(await text(page, "#request-job")).toBe(jobId);
        const requestId = await text(page, "#request-id");
        await page.goto(`${gw.url}/dashboard`);
        expect(await text(page, `#request-${requestId} .job`)).toBe(`job ${jobId}`);
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    }, 30_000);

    it("the per-model table names the model that served each request, its spends adding up to what the account was charged", async () => {
      const { context, page, errors } = await signedInTab(browser, gw, 1280);
      try {
        // Each row: the model, its requests, and its spend as shown (the cell's first line).
        const rows =
          (await page.evaluate(`[...document.querySelectorAll("#per-model tbody tr")].map(
          (tr) => [tr.cells[0].textContent.trim(), tr.cells[1].textContent.trim(),
            tr.cells[2].firstChild.textContent.trim()])`)) as [string, string, string][];
        await shoot(page, `per-model-${backend}`, { selector: "#per-model" });
        // auto and the long route were served by their last steps; the job by its model.
        expect(new Map(rows.map(([model, requests]) => [model, Number(requests)]))).toEqual(
          new Map([
            ["mock-gpt", 2],
            [longModel, 1],
            [longVideo, 1],
          ]),
        );
        const shownMicro = rows
          .map(([, , spend]) =>
            Math.round(Number(spend.replace(/^Rp /, "").replace(/,/g, "")) * 1e6),
          )
          .reduce((a, b) => a + b, 0);
        const charged = Math.round((1_000_000 - (await quota(gw)).balance_idr) * 1e6);
        expect(charged).toBeGreaterThan(0);
        expect(shownMicro).toBe(charged);
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    }, 30_000);
  },
);
