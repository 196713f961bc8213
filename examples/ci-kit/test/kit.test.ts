import Anthropic from "@anthropic-ai/sdk";
import { type RunningGateway, startGateway } from "model-gateway";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";

/**
 * What a team's CI does with the gateway's test kit: an in-memory gateway per suite, scripted
 * model answers, a clock the test moves, and asserted limit errors.
 */

const KEY = "kn-example-app-key-000000000000";
const ADMIN = "kn-example-admin-key-0000000000";

let gateway: RunningGateway;
let openai: OpenAI;

beforeAll(async () => {
  gateway = await startGateway({
    db: ":memory:",
    clock: "manual",
    now: () => Date.parse("2030-01-01T12:00:00Z"),
    config: {
      providers: [{ id: "mock", wire: "mock" }],
      models: [
        { name: "app-model", provider: "mock", price_input_per_mtok: 1000 },
        { name: "app-model:free", provider: "mock" },
      ],
      tiers: { free: { free_rpm: 2, free_daily: 3, burst_spacing_ms: 0 } },
      accounts: [{ id: "app", balance_idr: 100_000, keys: [{ id: "ci", value: KEY }] }],
      admin_keys: [ADMIN],
    },
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
});
afterAll(() => gateway.close());
afterEach(() => gateway.mock.reset());

describe("the app's weather assistant", () => {
  it("calls the weather tool and answers from its result (openai runTools)", async () => {
    gateway.mock.reply({ tool_result: true }, { text: "It is 12C in Oslo." });
    gateway.mock.reply(
      { tools_offered: "get_weather" },
      { tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
    );
    const cities: string[] = [];
    const runner = openai.chat.completions.runTools({
      model: "app-model",
      messages: [{ role: "user", content: "Weather in Oslo?" }],
      tools: [
        {
          type: "function",
          function: {
            name: "get_weather",
            description: "Current weather",
            parameters: { type: "object", properties: { city: { type: "string" } } },
            parse: JSON.parse,
            function: (args: { city: string }) => {
              cities.push(args.city);
              return "12C";
            },
          },
        },
      ],
    });
    expect(await runner.finalContent()).toBe("It is 12C in Oslo.");
    expect(cities).toEqual(["Oslo"]);
  });

  it("the same script answers the Anthropic SDK, streamed", async () => {
    gateway.mock.reply({ user_text: "hello" }, { text: "Hi from the script" }, { times: 1 });
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gateway.url, maxRetries: 0 });
    const stream = anthropic.messages.stream({
      model: "app-model",
      max_tokens: 100,
      messages: [{ role: "user", content: "hello" }],
    });
    expect((await stream.finalMessage()).content).toEqual([
      expect.objectContaining({ type: "text", text: "Hi from the script" }),
    ]);
  });
});

describe("limits, as the app sees them", () => {
  it("asserts a 429 with Retry-After, then the window resets by the clock", async () => {
    const ask = () =>
      openai.chat.completions.create({
        model: "app-model:free",
        messages: [{ role: "user", content: "hi" }],
      });
    await ask();
    await ask();
    const limited = await ask().catch((err: unknown) => err);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    const error = limited as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.code).toBe("free_quota_rpm");
    expect(error.headers.get("retry-after")).toBe("60");
    gateway.clock.advance(60_000);
    await ask();
    // The daily allowance (3) is now used; it comes back at 00:00 UTC, 0 s of real waiting away.
    const daily = (await ask().catch((err: unknown) => err)) as InstanceType<
      typeof OpenAI.RateLimitError
    >;
    expect(daily.code).toBe("free_quota_daily");
    gateway.clock.set(new Date("2030-01-02T00:00:00Z"));
    expect((await ask()).choices[0].message.content).toBeTruthy();
  });
});

describe("a recorded cassette, replayed offline", () => {
  // TODO(record/replay, issue 13 point 1): enable at merge. Needs `startGateway({ replay: DIR })`
  // from the record/replay branch and a cassette recorded once into ./cassettes (commit it);
  // the test then asserts the recorded answer comes back with no provider reachable.
  it.skip("answers from ./cassettes with the provider unreachable", async () => {
    const replaying = await startGateway({
      db: ":memory:",
      // replay: new URL("../cassettes", import.meta.url).pathname,
      config: {
        providers: [{ id: "real", wire: "openai", base_url: "http://127.0.0.1:9/v1" }],
        models: [{ name: "real-model", provider: "real" }],
        accounts: [{ id: "app", balance_idr: 1000, keys: [{ id: "ci", value: KEY }] }],
      },
    });
    try {
      const client = new OpenAI({ apiKey: KEY, baseURL: `${replaying.url}/v1`, maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: "real-model",
        messages: [{ role: "user", content: "hello" }],
      });
      expect(answer.choices[0].message.content).toBeTruthy();
    } finally {
      await replaying.close();
    }
  });
});
