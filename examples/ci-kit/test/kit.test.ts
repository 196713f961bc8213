import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
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

describe("recorded cassettes, replayed offline", () => {
  // ./cassettes was recorded once by record-cassettes.mjs; nothing listens at gateway.json's
  // base_url, so every answer here comes from those files.
  const dir = new URL("../cassettes", import.meta.url).pathname;
  let replaying: RunningGateway;
  let client: OpenAI;

  beforeAll(async () => {
    replaying = await startGateway({
      config: new URL("../gateway.json", import.meta.url).pathname,
      db: ":memory:",
      cassettes: { dir, mode: "replay" },
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${replaying.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => replaying.close());

  it("answers a chat request as recorded, usage included", async () => {
    const answer = await client.chat.completions.create({
      model: "app-chat",
      messages: [{ role: "user", content: "Say hello to the CI" }],
    });
    expect(answer.choices[0].message.content).toBe("Hello from the recorded model.");
    expect(answer.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 6 });
  });

  it("replays a stream in its recorded chunks", async () => {
    const stream = await client.chat.completions.create({
      model: "app-chat",
      stream: true,
      messages: [{ role: "user", content: "Stream a greeting" }],
    });
    const pieces: string[] = [];
    for await (const part of stream) {
      const piece = part.choices[0]?.delta?.content;
      if (piece) pieces.push(piece);
    }
    expect(pieces).toEqual(["Streamed ", "from the ", "recording."]);
  });

  it("fails a request it has no cassette for, naming the nearest one", async () => {
    const missed = await client.chat.completions
      .create({ model: "app-chat", messages: [{ role: "user", content: "Say goodbye to the CI" }] })
      .catch((err: unknown) => err);
    expect(missed).toBeInstanceOf(OpenAI.BadRequestError);
    const error = missed as InstanceType<typeof OpenAI.BadRequestError>;
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/Nearest: upstream-gpt-4o-mini-say-hello-.*\.json/);
    expect(error.message).toContain(
      'differs at messages[0].content (recorded "Say hello to the CI", now "Say goodbye to the CI")',
    );
  });

  it("holds no key in any cassette file", () => {
    const files = readdirSync(dir);
    expect(files.length).toBe(2);
    for (const file of files) {
      const text = readFileSync(join(dir, file), "utf8");
      expect(text).not.toMatch(/sk-example|kn-|authorization|bearer/i);
    }
  });
});
