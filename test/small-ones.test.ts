import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { errorOf } from "./support/api.js";
import { cliHome, runCli } from "./support/cli.js";
import { type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { baseConfig, chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/** Issue 28's small ones, each over real HTTP (or the real CLI). */

let gw: TestGateway | undefined;
let upstream: FakeUpstream | undefined;
afterEach(async () => {
  await gw?.close();
  await upstream?.close();
  gw = undefined;
  upstream = undefined;
});

describe("model_not_found", () => {
  it("names the closest model and points to /v1/models, in both styles", async () => {
    gw = await testGateway();
    const chatStyle = await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "mock-gtp")));
    expect(chatStyle).toMatchObject({ status: 400, code: "model_not_found" });
    expect(chatStyle.message).toBe(
      'The model or route "mock-gtp" does not exist or is not available. Did you mean "mock-gpt"? GET /v1/models lists the models and routes.',
    );
    const messages = await post(gw, "/v1/messages", {
      model: "mock-gpt:fre",
      max_tokens: 5,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(messages.status).toBe(400);
    expect(((await messages.json()) as { error: { message: string } }).error.message).toContain(
      'Did you mean "mock-gpt:free"?',
    );
    const far = await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "llama-3-70b")));
    expect(far.message).not.toContain("Did you mean");
    expect(far.message).toContain("GET /v1/models");
  });
});

describe("tool calls on the messages style", () => {
  it("a chat backend's call_ ids reach a messages client as toolu_ ids, and the result goes back under them", async () => {
    upstream = await fakeUpstream("openai");
    const base = baseConfig();
    gw = await testGateway({
      config: {
        ...base,
        providers: [{ id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-x"] }],
        models: [{ name: "gpt-tools", provider: "oa", price_input_per_mtok: 1000 }],
        routes: [],
      },
    });
    upstream.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_abc123", name: "read_file", arguments: '{"path":"a.ts"}' }],
        finish: "tool_calls",
      }),
    );
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const tools = [
      {
        name: "read_file",
        input_schema: { type: "object" as const, properties: { path: { type: "string" } } },
      },
    ];
    const first = await anthropic.messages.create({
      model: "gpt-tools",
      max_tokens: 100,
      tools,
      messages: [{ role: "user", content: "read a.ts" }],
    });
    const call = first.content.find((b) => b.type === "tool_use");
    expect(call).toMatchObject({ id: "toolu_abc123", name: "read_file", input: { path: "a.ts" } });
    upstream.queue(openaiJson("done"));
    await anthropic.messages.create({
      model: "gpt-tools",
      max_tokens: 100,
      tools,
      messages: [
        { role: "user", content: "read a.ts" },
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_abc123", content: "x = 1" }],
        },
      ],
    });
    const sent = upstream.requests[1].body as {
      messages: { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[];
    };
    const assistant = sent.messages.find((m) => m.role === "assistant");
    const result = sent.messages.find((m) => m.role === "tool");
    expect(assistant?.tool_calls?.[0].id).toBe("toolu_abc123");
    expect(result?.tool_call_id).toBe("toolu_abc123");
  });
});

describe("LiteLLM's mock_response", () => {
  it("answers with its text on a mock model, in every style and streamed", async () => {
    gw = await testGateway();
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const body = {
      model: "mock-gpt",
      messages: [{ role: "user" as const, content: "hi" }],
      mock_response: "It's simple to use",
    };
    const completion = await openai.chat.completions.create(body);
    expect(completion.choices[0].message.content).toBe("It's simple to use");
    const stream = await openai.chat.completions.create({ ...body, stream: true });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
    expect(streamed).toBe("It's simple to use");
    // Chat's `n` (main's meter): every answer is the mocked text, and the usage counts them all.
    const several = await openai.chat.completions.create({ ...body, n: 3 });
    expect(several.choices.map((c) => c.message.content)).toEqual(
      Array(3).fill(body.mock_response),
    );
    expect(several.usage?.completion_tokens).toBe(3 * (completion.usage?.completion_tokens ?? 0));
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const message = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hi" }],
      // @ts-expect-error: LiteLLM's field, not Anthropic's
      mock_response: "from messages",
    });
    expect(message.content).toEqual([{ type: "text", text: "from messages" }]);
  });

  it("is refused plainly on a real provider and when it is not a string", async () => {
    upstream = await fakeUpstream("openai");
    const base = baseConfig();
    gw = await testGateway({
      config: {
        ...base,
        providers: [
          ...base.providers!,
          { id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-x"] },
        ],
        models: [...base.models!, { name: "real", provider: "oa", price_input_per_mtok: 1 }],
      },
    });
    expect(
      await errorOf(
        await post(gw, "/v1/chat/completions", chat("hi", "real", { mock_response: "x" })),
      ),
    ).toMatchObject({
      status: 400,
      code: "bad_request",
      message:
        'mock_response is answered by mock models only; "real" is served by a real provider.',
    });
    expect(
      await errorOf(
        await post(gw, "/v1/chat/completions", chat("hi", "mock-gpt", { mock_response: { a: 1 } })),
      ),
    ).toMatchObject({ status: 400, code: "bad_request" });
    expect(upstream.requests).toHaveLength(0);
  });
});

describe("GET /openapi.json", () => {
  it("is public and describes the route table, with the zod schemas as request bodies", async () => {
    gw = await testGateway();
    const res = await fetch(`${gw.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      paths: Record<string, Record<string, Record<string, unknown>>>;
    };
    expect(doc.openapi).toBe("3.1.0");
    const chatOp = doc.paths["/v1/chat/completions"].post as {
      security: object[];
      requestBody: { content: { "application/json": { schema: { required: string[] } } } };
    };
    expect(chatOp.requestBody.content["application/json"].schema.required).toEqual(
      expect.arrayContaining(["model", "messages"]),
    );
    expect(chatOp.security).toEqual([{ bearer: [] }, { apiKey: [] }]);
    const messagesSchema = (
      doc.paths["/v1/messages"].post as {
        requestBody: { content: { "application/json": { schema: { required: string[] } } } };
      }
    ).requestBody.content["application/json"].schema;
    expect(messagesSchema.required).toEqual(expect.arrayContaining(["max_tokens"]));
    expect(doc.paths["/v1/models"].get.security).toEqual([]);
    expect(doc.paths["/v1/models/{id}"].get.parameters).toEqual([
      { name: "id", in: "path", required: true, schema: { type: "string" } },
    ]);
    expect(Object.keys(doc.paths).some((p) => p.startsWith("/dashboard"))).toBe(false);
  });
});

describe("--json times", () => {
  it("are ISO 8601", async () => {
    gw = await testGateway();
    const home = cliHome();
    try {
      const done = await runCli(["keys", "create", "--db", gw.dbPath, "--json"], home.env, 30_000);
      expect(done.code).toBe(0);
      const created = JSON.parse(done.stdout) as { created_at: string };
      expect(created.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    } finally {
      home.remove();
    }
  });
});
