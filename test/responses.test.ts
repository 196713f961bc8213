import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf } from "./support/api.js";
import { KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

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
});
