import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { mockImage } from "../src/server/providers/mock/media/index.js";
import { errorOf, quota } from "./support/api.js";
import { deferred, type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * A free media model's budget (`free_token_budget`, counted in the units the model is priced by:
 * docs/metering.md) under requests at once: each request holds its units of the budget from when
 * its provider is about to be called until it settles, and is served only while what the window
 * counted and what the others hold leave some. So requests at once, on one gateway or on two
 * gateways of one Postgres database, are served as the same requests one after another: the
 * budget is passed by at most what the one request that reaches it asks beyond it (it is served
 * whole). Images through `images.generate` (the provider holds each answer until the test lets it
 * go, so every request is in flight at once), and seconds of music through jobs (on a clock that
 * stands still until the test moves it).
 */

// Ten minutes into an hour: a budget of an hour refills in 50 minutes.
const T0 = Date.parse("2030-01-01T00:10:00Z");
const refillSeconds = 50 * 60;

let images: FakeUpstream;
/** Released by each test: until then the provider holds every image answer. */
let answer = deferred();

beforeAll(async () => {
  images = await fakeUpstream("openai", async (req) => {
    await answer.promise;
    const n = typeof req.body.n === "number" ? req.body.n : 1;
    const png = mockImage("a fox", "64x64").toString("base64");
    return {
      kind: "json",
      body: { created: 1_700_000_000, data: Array.from({ length: n }, () => ({ b64_json: png })) },
    };
  });
});
afterAll(async () => {
  answer.resolve();
  await images?.close();
});

const open: TestGateway[] = [];
afterEach(async () => {
  answer.resolve();
  for (const gw of open.splice(0).reverse()) await gw.close();
  images.requests.length = 0;
  answer = deferred();
});

function config(): ConfigInput {
  const free = { tier: "free" };
  return baseConfigWith({
    providers: [
      { id: "pics", wire: "openai", base_url: images.baseUrl, api_keys: ["sk-pics"] },
      // A job takes four seconds of the gateway's clock.
      { id: "tunes", wire: "mock", mock: { job_seconds: 4 } },
    ],
    models: [
      {
        name: "pic:free",
        provider: "pics",
        upstream_model: "pic-up",
        modality: "image",
        free_token_budget: { tokens: 1, window_seconds: 3600 },
      },
      {
        name: "trio:free",
        provider: "pics",
        upstream_model: "pic-up",
        modality: "image",
        free_token_budget: { tokens: 3, window_seconds: 3600 },
      },
      {
        name: "tune:free",
        provider: "tunes",
        modality: "music",
        free_token_budget: { tokens: 2, window_seconds: 3600 },
      },
    ],
    // Ten accounts, so that requests at once are not one account's (the budget is the model's).
    accounts: [
      ...Array.from({ length: 10 }, (_, i) => ({
        id: `fan-${i}`,
        ...free,
        keys: [{ id: `kf-${i}`, value: keyOf(i) }],
      })),
    ],
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
  });
}

const keyOf = (i: number) => `kn-test-fan-${String(i).padStart(2, "0")}-000000000000000000`;

const sdk = (gw: TestGateway, key = KEY) =>
  new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });

interface Outcome {
  status: number;
  images?: number;
  code?: string | null;
  retryAfter?: string | null;
}

/** `images.generate` as the SDK answers it: the images served, or the refusal. */
async function generate(gw: TestGateway, key: string, model: string, n: number): Promise<Outcome> {
  try {
    const served = await sdk(gw, key).images.generate({ model, prompt: "a fox", n });
    return { status: 200, images: served.data?.length ?? 0 };
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    return { status: err.status ?? 0, code: err.code, retryAfter: err.headers?.get("retry-after") };
  }
}

/**
 * Sends every request at once and lets the provider answer once each of them was either refused or
 * reached the provider (at most 5 s): every request the gateway admitted to its provider is in
 * flight together.
 */
async function atOnce(sends: (() => Promise<Outcome>)[]): Promise<Outcome[]> {
  let answered = 0;
  const all = sends.map((send) =>
    send().then((outcome) => {
      answered++;
      return outcome;
    }),
  );
  const deadline = Date.now() + 5_000;
  while (answered + images.requests.length < sends.length && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 10));
  answer.resolve();
  return Promise.all(all);
}

const served = (outcomes: Outcome[]) => outcomes.filter((outcome) => outcome.status === 200);

/** What a refusal for a spent budget looks like to the SDK. */
const budgetSpent = { status: 429, code: "rate_limit_exceeded", retryAfter: String(refillSeconds) };

describe.each(backends)("a free media model's budget under requests at once (%s)", (backend) => {
  const start = async () => {
    const gw = await gatewayOn(backend, { config: config(), now: () => T0 });
    open.push(gw);
    return gw;
  };

  for (const count of [2, 10])
    it(`budget 1 image, ${count} images.generate at once from ${count} accounts: one is served, the others are refused 429 until the window rolls`, async () => {
      const gw = await start();
      const outcomes = await atOnce(
        Array.from({ length: count }, (_, i) => () => generate(gw, keyOf(i), "pic:free", 1)),
      );
      expect(served(outcomes), JSON.stringify(outcomes)).toEqual([{ status: 200, images: 1 }]);
      for (const outcome of outcomes.filter((each) => each.status !== 200))
        expect(outcome).toEqual(budgetSpent);
      expect(images.requests).toHaveLength(1);
      // The one served is what the window counted: the next is refused too.
      expect(await generate(gw, KEY, "pic:free", 1)).toEqual(budgetSpent);
    });

  it("a request that lost the budget's last units to one at once is refused as admission's check refuses one: no row, its free day not counted", async () => {
    const gw = await start();
    const outcomes = await atOnce([0, 1].map((i) => () => generate(gw, keyOf(i), "pic:free", 1)));
    expect(served(outcomes), JSON.stringify(outcomes)).toHaveLength(1);
    const lost = outcomes.findIndex((outcome) => outcome.status !== 200);
    expect(outcomes[lost]).toEqual(budgetSpent);
    // Refused by admission's check: the budget was counted by then.
    expect(await generate(gw, keyOf(2), "pic:free", 1)).toEqual(budgetSpent);
    const rows = await gw.listRequests({ limit: 10 });
    expect(rows.map((row) => [row.account, row.status])).toEqual([[`fan-${1 - lost}`, 200]]);
    expect((await quota(gw, keyOf(lost))).free).toMatchObject({ daily_used: 0 });
    expect((await quota(gw, keyOf(1 - lost))).free).toMatchObject({ daily_used: 1 });
  });

  it("budget 3 images, three n: 2 at once: two are served whole (four images, as two in turn would be), the third is refused", async () => {
    const gw = await start();
    const outcomes = await atOnce(
      [0, 1, 2].map((i) => () => generate(gw, keyOf(i), "trio:free", 2)),
    );
    expect(served(outcomes), JSON.stringify(outcomes)).toEqual([
      { status: 200, images: 2 },
      { status: 200, images: 2 },
    ]);
    expect(outcomes.filter((each) => each.status !== 200)).toEqual([budgetSpent]);
    expect(await generate(gw, KEY, "trio:free", 1)).toEqual(budgetSpent);
  });

  it("a request whose provider failed gives back the units it held: the budget serves the next", async () => {
    const gw = await start();
    answer.resolve();
    images.queue({ kind: "json", status: 500, body: { error: { message: "down" } } });
    expect((await generate(gw, KEY, "pic:free", 1)).status).toBe(503);
    expect(await generate(gw, KEY, "pic:free", 1)).toEqual({ status: 200, images: 1 });
    expect(await generate(gw, KEY, "pic:free", 1)).toEqual(budgetSpent);
  });

  it("budget 2 seconds of music, two jobs of 2 seconds submitted at once: one completes, the other fails rate_limit_exceeded, charged nothing", async () => {
    const gw = await gatewayOn(backend, {
      config: config(),
      clock: "manual",
      autoAdvance: false,
      now: () => T0,
    });
    open.push(gw);
    const submitted = await Promise.all(
      [0, 1].map((i) =>
        post(
          gw,
          "/v1/music/generations",
          { model: "tune:free", prompt: "rain", duration: 2 },
          { authorization: `Bearer ${keyOf(i)}` },
        ),
      ),
    );
    for (const res of submitted) expect(res.status, await res.clone().text()).toBe(202);
    const jobs = await Promise.all(submitted.map((res) => res.json() as Promise<{ id: string }>));
    // Both taken by the runner (the one refused fails at once), then their time passes.
    await expect
      .poll(
        async () =>
          (await Promise.all(jobs.map((job, i) => jobOf(gw, job.id, keyOf(i)))))
            .map((j) => j.status)
            .sort(),
        {
          timeout: 5_000,
        },
      )
      .toEqual(expect.arrayContaining(["running"]));
    gw.clock.advance(10_000);
    const ended = await Promise.all(jobs.map((job, i) => finished(gw, job.id, keyOf(i))));
    expect(ended.map((job) => job.status).sort(), JSON.stringify(ended)).toEqual([
      "completed",
      "failed",
    ]);
    expect(ended.find((job) => job.status === "failed")?.error?.code).toBe("rate_limit_exceeded");
    const refused = await post(
      gw,
      "/v1/music/generations",
      { model: "tune:free", prompt: "rain", duration: 1 },
      { authorization: `Bearer ${keyOf(2)}` },
    );
    expect(await errorOf(refused)).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
  });
});

interface JobView {
  id: string;
  status: string;
  error?: { code: string } | null;
}

async function jobOf(gw: TestGateway, id: string, key: string): Promise<JobView> {
  const res = await fetch(`${gw.url}/v1/music/generations/${id}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return (await res.json()) as JobView;
}

/** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
async function finished(gw: TestGateway, id: string, key: string): Promise<JobView> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const job = await jobOf(gw, id, key);
    if (job.status === "completed" || job.status === "failed") return job;
    if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("a free media model's budget under requests at once on two gateways of one database (postgres)", () => {
  it("budget 1 image, one images.generate on each gateway at once: one is served, the other refused", async () => {
    const first = await gatewayOn("postgres", { config: config(), now: () => T0 });
    open.push(first);
    const second = await testGateway({ config: config(), db: first.dbPath, now: () => T0 });
    open.push(second);
    const outcomes = await atOnce([
      () => generate(first, keyOf(0), "pic:free", 1),
      () => generate(second, keyOf(1), "pic:free", 1),
    ]);
    expect(served(outcomes), JSON.stringify(outcomes)).toEqual([{ status: 200, images: 1 }]);
    expect(outcomes.filter((each) => each.status !== 200)).toEqual([budgetSpent]);
    expect(images.requests).toHaveLength(1);
    for (const gw of [first, second])
      expect(await generate(gw, KEY, "pic:free", 1)).toEqual(budgetSpent);
  });
});
