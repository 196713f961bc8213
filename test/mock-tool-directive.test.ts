import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw.close();
});

describe("[[mock:tool]]", () => {
  it("without tools in the request is a 400 saying so, not a plain-text answer", async () => {
    for (const stream of [false, true]) {
      const res = await post(
        gw,
        "/v1/chat/completions",
        chat("call it [[mock:tool]]", "mock-gpt", { stream }),
      );
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { message: string; code: string } };
      expect(body.error.message).toBe(
        "[[mock:tool]] asks the mock for a tool call, but the request declares no tools; add `tools` to the request.",
      );
    }
    const messages = await post(gw, "/v1/messages", {
      model: "mock-gpt",
      max_tokens: 64,
      messages: [{ role: "user", content: "[[mock:tool]]" }],
    });
    expect(messages.status).toBe(400);
    expect(((await messages.json()) as { type: string }).type).toBe("error");
  });

  it("with tools still calls one, and answers the turn after the tool result in text", async () => {
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const tools = [
      {
        type: "function" as const,
        function: { name: "weather", parameters: { type: "object", properties: {} } },
      },
    ];
    const first = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "weather? [[mock:tool]]" }],
      tools,
    });
    const call = first.choices[0].message.tool_calls?.[0];
    expect(call?.type === "function" && call.function.name).toBe("weather");
    const second = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [
        { role: "user", content: "weather? [[mock:tool]]" },
        first.choices[0].message,
        { role: "tool", tool_call_id: call!.id, content: "sunny" },
      ],
    });
    expect(second.choices[0].message.content).toContain("Tool result received: sunny");
  });
});
