import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { errorOf } from "./support/api.js";
import {
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
} from "./support/gateway.js";

/**
 * A free media model's `free_token_budget` limits it as it limits a chat model: its answers have
 * no tokens, so each spends the units it is priced by (an image, a second of music), and once they
 * reach the budget the model is refused with 429 rate_limit_exceeded until its window rolls over.
 */

// Ten minutes into an hour: a budget of an hour refills in 50 minutes.
const T0 = Date.parse("2030-01-01T00:10:00Z");
const refillSeconds = 50 * 60;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "mock-now", wire: "mock", mock: { job_seconds: 0 } }],
    models: [
      {
        name: "pic:free",
        provider: "mock",
        modality: "image",
        free_token_budget: { tokens: 3, window_seconds: 3600 },
      },
      {
        name: "tune:free",
        provider: "mock-now",
        modality: "music",
        free_token_budget: { tokens: 3, window_seconds: 3600 },
      },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
  });
}

const open: TestGateway[] = [];
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close();
});

const auth = { authorization: `Bearer ${KEY}` };

interface JobView {
  id: string;
  status: string;
}

/** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
async function finished(gw: TestGateway, id: string): Promise<JobView> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const res = await fetch(`${gw.url}/v1/music/generations/${id}`, { headers: auth });
    const job = (await res.json()) as JobView;
    if (job.status === "completed" || job.status === "failed") return job;
    if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe.each(backends)("a free media model's budget (%s)", (backend) => {
  const start = async () => {
    const gw = await gatewayOn(backend, { config: config(), now: () => T0 });
    open.push(gw);
    return gw;
  };

  it("counts each image against a free image model's budget, then refuses it 429 until the window rolls over", async () => {
    const gw = await start();
    // The SDK retries a 429 by default, after Retry-After: here that is the window's end.
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const two = await openai.images.generate({ model: "pic:free", prompt: "a fox", n: 2 });
    expect(two.data).toHaveLength(2);
    const third = await openai.images.generate({ model: "pic:free", prompt: "a fox" });
    expect(third.data).toHaveLength(1);
    const refused = await openai.images.generate({ model: "pic:free", prompt: "a fox" }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.code).toBe("rate_limit_exceeded");
    expect(error.headers.get("retry-after")).toBe(String(refillSeconds));
  });

  it("counts each second of a free music model's jobs against its budget, then refuses a submission 429", async () => {
    const gw = await start();
    for (const duration of [2, 1]) {
      const res = await post(
        gw,
        "/v1/music/generations",
        { model: "tune:free", prompt: "rain", duration },
        auth,
      );
      expect(res.status, await res.clone().text()).toBe(202);
      const job = (await res.json()) as JobView;
      expect(await finished(gw, job.id)).toMatchObject({ status: "completed" });
    }
    const refused = await post(
      gw,
      "/v1/music/generations",
      { model: "tune:free", prompt: "rain", duration: 1 },
      auth,
    );
    expect(refused.status, await refused.clone().text()).toBe(429);
    expect(await errorOf(refused)).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: String(refillSeconds),
    });
  });
});
