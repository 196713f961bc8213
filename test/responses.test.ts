import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf, lastLogged, quota } from "./support/api.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

let gw: TestGateway;
let openai: OpenAI;
beforeAll(async () => {
  gw = await testGateway();
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(() => gw.close());

describe("POST /v1/responses on a chat-wire provider", () => {
  it("answers a string input with output items and output_text", async () => {
    const res = await openai.responses.create({
      model: "mock-gpt",
      input: "Say hi",
      instructions: "Be brief.",
    });
    expect(res.object).toBe("response");
    expect(res.status).toBe("completed");
    expect(res.output_text).toContain("Mock reply to: Say hi");
    expect(res.output[0]).toMatchObject({ type: "message", role: "assistant" });
    expect(res.usage!.input_tokens).toBeGreaterThan(0);
    expect(res.usage!.output_tokens).toBeGreaterThan(0);
  });

  it("accepts item input with several turns", async () => {
    const res = await openai.responses.create({
      model: "mock-gpt",
      input: [
        { role: "user", content: [{ type: "input_text", text: "first" }] },
        { role: "assistant", content: "ok" },
        { role: "user", content: "second question" },
      ],
    });
    expect(res.output_text).toContain("second question");
  });

  it("streams response.* events that the SDK assembles", async () => {
    const stream = openai.responses.stream({ model: "mock-gpt", input: "Stream it" });
    const types = new Set<string>();
    stream.on("event", (e) => types.add(e.type));
    const final = await stream.finalResponse();
    expect(final.output_text).toContain("Mock reply to: Stream it");
    for (const t of ["response.created", "response.output_text.delta", "response.completed"])
      expect(types.has(t)).toBe(true);
  });

  it("returns function calls for tools and takes their output back", async () => {
    const tools: OpenAI.Responses.Tool[] = [
      {
        type: "function",
        name: "get_weather",
        description: "weather",
        parameters: {
          type: "object",
          properties: { city: { type: "string" } },
          required: ["city"],
        },
        strict: false,
      },
    ];
    const first = await openai.responses.create({
      model: "mock-gpt",
      input: "Weather? [[mock:tool]]",
      tools,
    });
    const call = first.output.find(
      (o) => o.type === "function_call",
    ) as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.name).toBe("get_weather");
    expect(JSON.parse(call.arguments)).toEqual({ city: "example city" });
    const second = await openai.responses.create({
      model: "mock-gpt",
      tools,
      input: [
        { role: "user", content: "Weather? [[mock:tool]]" },
        {
          type: "function_call",
          call_id: call.call_id,
          name: call.name,
          arguments: call.arguments,
        },
        { type: "function_call_output", call_id: call.call_id, output: "sunny, 31C" },
      ],
    });
    expect(second.output_text).toContain("Tool result received: sunny, 31C");
  });

  it("uses the chat-completions error style", async () => {
    const err = await errorOf(await post(gw, "/v1/responses", { model: "mock-gpt" }));
    expect(err).toMatchObject({ status: 400, code: "bad_request", type: "bad_request" });
    expect(
      await errorOf(await post(gw, "/v1/responses", { model: "nope", input: "x" })),
    ).toMatchObject({ status: 400, code: "model_not_found" });
  });

  it("names what a body lacks or what shape a field should have, not zod's 'Invalid input'", async () => {
    const missing = await openai.responses
      .create({ model: "mock-gpt" } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.BadRequestError);
    expect((missing as Error).message).toContain("Invalid request: input: required.");
    const wrong = await errorOf(await post(gw, "/v1/responses", { model: "mock-gpt", input: 3 }));
    expect(wrong).toMatchObject({
      status: 400,
      code: "bad_request",
      message: "Invalid request: input: expected string or array, received number.",
    });
    const item = await errorOf(
      await post(gw, "/v1/responses", { model: "mock-gpt", input: ["not an item"] }),
    );
    expect(item.message).toBe(
      "Invalid request: input.0: Invalid input: expected object, received string",
    );
    const chat = await errorOf(await post(gw, "/v1/chat/completions", { model: "mock-gpt" }));
    expect(chat.message).toBe("Invalid request: messages: required.");
  });
});

describe("Responses API state: its lifetime and its refusals over HTTP", () => {
  const continueFrom = (g: TestGateway, id: string) =>
    post(g, "/v1/responses", { model: "mock-gpt", previous_response_id: id, input: "again" });

  it("keeps responses as long as the config's responses.ttl_seconds, unless the option says otherwise", async () => {
    const configured = await testGateway({
      clock: "manual",
      config: { ...baseConfig(), responses: { ttl_seconds: 60 } },
    });
    const overridden = await testGateway({
      clock: "manual",
      config: { ...baseConfig(), responses: { ttl_seconds: 60 } },
      responsesTtlSeconds: 3600,
    });
    try {
      const stored = async (g: TestGateway) =>
        (await (await post(g, "/v1/responses", { model: "mock-gpt", input: "hi" })).json()) as {
          id: string;
          store: boolean;
        };
      const short = await stored(configured);
      const long = await stored(overridden);
      expect(short.store).toBe(true);
      const retrieve = (g: TestGateway, id: string) =>
        fetch(`${g.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${KEY}` } });
      configured.clock.advance(59_000);
      expect((await retrieve(configured, short.id)).status).toBe(200);
      configured.clock.advance(2_000);
      expect((await retrieve(configured, short.id)).status).toBe(404);
      const expired = await continueFrom(configured, short.id);
      expect(expired.status).toBe(400);
      expect(await errorOf(expired)).toMatchObject({
        code: "bad_request",
        message: expect.stringContaining("previous_response_id"),
      });
      overridden.clock.advance(61_000);
      expect((await retrieve(overridden, long.id)).status).toBe(200);
      overridden.clock.advance(3_540_000);
      expect((await retrieve(overridden, long.id)).status).toBe(404);
      expect((await continueFrom(overridden, long.id)).status).toBe(400);
    } finally {
      await configured.close();
      await overridden.close();
    }
  });

  it("refuses a previous_response_id or conversation that is not a string, and a bad page query", async () => {
    const wrongType = await post(gw, "/v1/responses", {
      model: "mock-gpt",
      previous_response_id: 7,
      input: "x",
    });
    expect(wrongType.status).toBe(400);
    expect((await errorOf(wrongType)).message).toContain("previous_response_id");
    const unknown = await post(gw, "/v1/responses", {
      model: "mock-gpt",
      conversation: "conv_missing",
      input: "x",
    });
    expect(unknown.status).toBe(400);
    expect((await errorOf(unknown)).message).toContain("conversation");
    const created = (await (
      await post(gw, "/v1/responses", { model: "mock-gpt", input: "hi" })
    ).json()) as { id: string };
    const badPage = await fetch(`${gw.url}/v1/responses/${created.id}/input_items?limit=500`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(badPage.status).toBe(400);
    expect((await errorOf(badPage)).message).toContain("limit");
  });
});

describe("GET /v1/responses/{id} with stream=true (the SDK's way to resume a background stream)", () => {
  it("replays the finished response's events, ending in response.completed with the response", async () => {
    const created = await openai.responses.create({
      model: "mock-gpt",
      input: "hi",
      background: true,
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await openai.responses.retrieve(created.id, { stream: true }))
      events.push(event);
    expect(events[0]?.type).toBe("response.created");
    const last = events.at(-1);
    expect(last?.type).toBe("response.completed");
    if (last?.type !== "response.completed") throw new Error("no response.completed");
    expect(last.response.output_text ?? created.output_text).toBe(created.output_text);
    expect(last.response.id).toBe(created.id);
    // Without `stream` the same response is read whole.
    expect((await openai.responses.retrieve(created.id)).output_text).toBe(created.output_text);
  });
});

describe("POST /v1/responses/{id}/cancel", () => {
  it("cancel names why there is nothing to cancel, and an unknown id is a 404", async () => {
    const created = await openai.responses.create({
      model: "mock-gpt",
      input: "hi",
      background: true,
    });
    expect(created.status).toBe("completed");
    const err = await openai.responses.cancel(created.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toContain("nothing to cancel");
    await expect(openai.responses.cancel("resp_unknown")).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
  });
});

describe("POST /v1/responses with a stored prompt template (`prompt`)", () => {
  it("is a 400 bad_request naming `prompt`, not an answer given without the template", async () => {
    const before = (await quota(gw)).balance_idr;
    const err = await openai.responses
      .create({
        model: "mock-gpt",
        input: "What should I see?",
        prompt: { id: "pmpt_abc123", variables: { city: "Bandung" } },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const apiError = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(apiError.code).toBe("bad_request");
    expect(apiError.message).toContain("`prompt`");
    expect((await quota(gw)).balance_idr).toBe(before);
    expect(await lastLogged(gw)).toMatchObject({ state: "failed", cost_idr: 0 });
  });
});
