import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeOpenAIMedia, startFakeOpenAIMedia } from "./support/fake-openai-media.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  anthropicToolStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiStreamSteps,
  openaiToolStreamSteps,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfigWith,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { assertConforms, assertResponseEvent, openapiSource } from "./support/openai-schemas.js";
import { allStreamEvents, type StreamEvent } from "./support/sse.js";

/**
 * Every OpenAI-style answer and stream event the gateway writes, validated against the schemas of
 * OpenAI's own OpenAPI document (test/fixtures/openai-openapi): each route, streamed and not, on
 * the mock provider and through the translating wires (a fake OpenAI chat-completions upstream, a
 * fake Anthropic upstream, a fake native Responses upstream), refusals and broken streams included.
 * The fakes answer as the real APIs do, so what fails here is the gateway's own doing.
 */

let gw: TestGateway;
let chatUpstream: FakeUpstream;
let claudeUpstream: FakeUpstream;
let media: FakeOpenAIMedia;
let openai: OpenAI;

/** Chat-completions answers as OpenAI writes them (with `refusal` and `logprobs`). */
function openaiAnswer(req: RecordedRequest): Reply {
  const tools = Array.isArray(req.body.tools) && req.body.tools.length > 0;
  const stream = req.body.stream === true;
  const wantsLogprobs = req.body.logprobs === true;
  if (stream) {
    const steps = tools
      ? openaiToolStreamSteps([
          { id: "call_up_1", name: "get_weather", argumentPieces: ['{"city"', ':"Paris"}'] },
        ])
      : openaiStreamSteps(["Hello", " there", "!"]);
    return {
      kind: "sse",
      steps: wantsLogprobs ? steps.map(withChunkLogprobs) : steps,
    };
  }
  const message: Record<string, unknown> = {
    role: "assistant",
    content: tools ? null : "Hello there!",
    refusal: null,
    annotations: [],
  };
  if (tools) {
    message.tool_calls = [
      {
        id: "call_up_1",
        type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris"}' },
      },
    ];
  }
  return {
    kind: "json",
    body: {
      id: "chatcmpl-up",
      object: "chat.completion",
      created: 1_700_000_000,
      model: "gpt-upstream",
      choices: [
        {
          index: 0,
          message,
          logprobs: wantsLogprobs ? { content: [tokenLogprob("Hello")], refusal: null } : null,
          finish_reason: tools ? "tool_calls" : "stop",
        },
      ],
      usage: {
        prompt_tokens: 11,
        completion_tokens: 7,
        total_tokens: 18,
        prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 },
      },
      service_tier: "default",
    },
  };
}

function tokenLogprob(token: string) {
  return {
    token,
    logprob: -0.25,
    bytes: [...Buffer.from(token)],
    top_logprobs: [{ token, logprob: -0.25, bytes: [...Buffer.from(token)] }],
  };
}

function withChunkLogprobs(step: SseStep): SseStep {
  const data = step.data as { choices?: { delta?: { content?: string }; logprobs?: unknown }[] };
  const content = data.choices?.[0]?.delta?.content;
  if (!content) return step;
  return {
    ...step,
    data: {
      ...data,
      choices: [
        { ...data.choices![0], logprobs: { content: [tokenLogprob(content)], refusal: null } },
      ],
    },
  };
}

/** A native Responses upstream: the Response object and its stream, as OpenAI writes them. */
function nativeResponse(req: RecordedRequest, status: "in_progress" | "completed") {
  const done = status === "completed";
  const asked = req.body;
  return {
    id: "resp_up_1",
    object: "response",
    created_at: 1_700_000_000,
    status,
    completed_at: done ? 1_700_000_001 : null,
    error: null,
    incomplete_details: null,
    instructions: asked.instructions ?? null,
    max_output_tokens: asked.max_output_tokens ?? null,
    model: "up-model",
    output: done
      ? [
          {
            type: "message",
            id: "msg_up_1",
            status: "completed",
            role: "assistant",
            content: [{ type: "output_text", text: "Hello there!", annotations: [], logprobs: [] }],
          },
        ]
      : [],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: asked.temperature ?? 1,
    text: { format: { type: "text" } },
    tool_choice: asked.tool_choice ?? "auto",
    tools: asked.tools ?? [],
    top_p: asked.top_p ?? 1,
    truncation: "disabled",
    usage: done
      ? {
          input_tokens: 11,
          input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
          output_tokens: 7,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 18,
        }
      : undefined,
    metadata: asked.metadata ?? {},
  };
}

function nativeStream(req: RecordedRequest, broken: boolean): Reply {
  let sequence = 0;
  const event = (type: string, fields: object): SseStep => ({
    event: type,
    data: { type, ...fields, sequence_number: sequence++ },
  });
  const ids = { item_id: "msg_up_1", output_index: 0, content_index: 0 };
  const steps: SseStep[] = [
    event("response.created", { response: nativeResponse(req, "in_progress") }),
    event("response.in_progress", { response: nativeResponse(req, "in_progress") }),
    event("response.output_item.added", {
      output_index: 0,
      item: {
        type: "message",
        id: "msg_up_1",
        status: "in_progress",
        role: "assistant",
        content: [],
      },
    }),
    event("response.content_part.added", {
      ...ids,
      part: { type: "output_text", text: "", annotations: [], logprobs: [] },
    }),
    event("response.output_text.delta", { ...ids, delta: "Hello", logprobs: [] }),
  ];
  if (broken) return { kind: "sse", steps, end: "destroy" };
  steps.push(
    event("response.output_text.delta", { ...ids, delta: " there!", logprobs: [] }),
    event("response.output_text.done", { ...ids, text: "Hello there!", logprobs: [] }),
    event("response.content_part.done", {
      ...ids,
      part: { type: "output_text", text: "Hello there!", annotations: [], logprobs: [] },
    }),
    event("response.output_item.done", {
      output_index: 0,
      item: nativeResponse(req, "completed").output[0],
    }),
    event("response.completed", { response: nativeResponse(req, "completed") }),
  );
  return { kind: "sse", steps };
}

const openaiHandler: Handler = (req) => {
  if (req.path.endsWith("/responses")) {
    if (req.body.stream === true)
      return nativeStream(req, JSON.stringify(req.body).includes("BREAK"));
    return { kind: "json", body: nativeResponse(req, "completed") };
  }
  if (JSON.stringify(req.body).includes("BREAK")) {
    return {
      kind: "sse",
      steps: openaiStreamSteps(["Hello", " there"]).slice(0, 2),
      end: "destroy",
    };
  }
  return openaiAnswer(req);
};

const anthropicHandler: Handler = (req) => {
  const tools = Array.isArray(req.body.tools) && req.body.tools.length > 0;
  const broken = JSON.stringify(req.body).includes("BREAK");
  if (req.body.stream === true) {
    if (broken)
      return {
        kind: "sse",
        steps: anthropicStreamSteps(["Hello", " there"]).slice(0, 4),
        end: "destroy",
      };
    return {
      kind: "sse",
      steps: tools
        ? anthropicToolStreamSteps([
            { id: "toolu_1", name: "get_weather", jsonPieces: ['{"city"', ':"Paris"}'] },
          ])
        : anthropicStreamSteps(["Hello", " there", "!"]),
    };
  }
  return tools
    ? anthropicJson(null, {
        toolUses: [{ id: "toolu_1", name: "get_weather", input: { city: "Paris" } }],
      })
    : anthropicJson("Hello there!");
};

beforeAll(async () => {
  chatUpstream = await fakeUpstream("openai", openaiHandler);
  claudeUpstream = await fakeUpstream("anthropic", anthropicHandler);
  media = await startFakeOpenAIMedia();
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "oa", wire: "openai", base_url: chatUpstream.baseUrl, api_keys: ["sk-oa"] },
        {
          id: "native",
          wire: "openai",
          base_url: chatUpstream.baseUrl,
          api_keys: ["sk-native"],
          responses_native: true,
        },
        { id: "an", wire: "anthropic", base_url: claudeUpstream.baseUrl, api_keys: ["sk-an"] },
        { id: "media", wire: "openai", base_url: media.baseUrl, api_keys: ["sk-media"] },
        // Slower than the keepalive interval, then down: a stream's 200 is committed before it fails.
        { id: "mock-late", wire: "mock", mock: { latency_ms: 1_500, fail_status: 503 } },
      ],
      models: [
        { name: "gpt-x", provider: "oa", upstream_model: "gpt-upstream", price_input_per_mtok: 1 },
        {
          name: "native-x",
          provider: "native",
          upstream_model: "up-model",
          price_input_per_mtok: 1,
        },
        {
          name: "claude-x",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
        },
        { name: "mock-late", provider: "mock-late", price_input_per_mtok: 1 },
        { name: "mock-embed", provider: "mock", modality: "embedding", price_input_per_mtok: 1 },
        {
          name: "up-embed",
          provider: "media",
          upstream_model: "text-embedding-3-small",
          modality: "embedding",
          price_input_per_mtok: 1,
        },
        {
          name: "up-image",
          provider: "media",
          upstream_model: "gpt-image-1",
          modality: "image",
          price_per_unit: 1,
        },
        { name: "mock-edit", provider: "mock", modality: "edit", price_per_unit: 1 },
        { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: 1 },
        { name: "mock-stt", provider: "mock", modality: "transcription", price_per_unit: 1 },
        {
          name: "up-stt",
          provider: "media",
          upstream_model: "whisper-1",
          modality: "transcription",
          price_per_unit: 1,
        },
      ],
      routes: [{ name: "all-down", steps: ["mock-down"] }],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 20_000 });
});

afterAll(async () => {
  await gw?.close();
  await chatUpstream?.close();
  await claudeUpstream?.close();
  await media?.close();
});

type Event = StreamEvent<unknown>;

async function events(res: Response): Promise<Event[]> {
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  return allStreamEvents<unknown>(res);
}

/** Each chunk of a chat stream; an error chunk is an error body. */
function checkChatStream(list: Event[], what: string): void {
  expect(list.length).toBeGreaterThan(0);
  for (const [i, { data }] of list.entries()) {
    if (data === "[DONE]") continue;
    if ((data as { error?: unknown }).error !== undefined)
      assertConforms("ErrorResponse", data, `${what} error chunk`);
    else assertConforms("CreateChatCompletionStreamResponse", data, `${what} chunk ${i}`);
  }
}

/** Each event of a Responses stream; numbered from 0 without a gap, named as its `type`. */
function checkResponsesStream(list: Event[], what: string): void {
  expect(list.length).toBeGreaterThan(0);
  for (const [i, { event, data }] of list.entries()) {
    const typed = data as { type?: string; sequence_number?: number };
    assertResponseEvent(typed, `${what} event ${i}`);
    expect(event, `${what} event ${i}: the SSE event name is its type`).toBe(typed.type);
    expect(typed.sequence_number, `${what} event ${i} (${typed.type}): sequence_number`).toBe(i);
  }
}

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather in a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  },
];
const responsesTools = [
  {
    type: "function",
    name: "get_weather",
    description: "Weather in a city",
    parameters: tools[0].function.parameters,
    strict: false,
  },
];

const chatModels = [
  { wire: "mock", model: "mock-gpt", tool: "[[mock:tool]] " },
  { wire: "openai (chat-completions)", model: "gpt-x", tool: "" },
  { wire: "anthropic", model: "claude-x", tool: "" },
];

describe(`conformance to OpenAI's OpenAPI document ${openapiSource.version}`, () => {
  describe.each(chatModels)("POST /v1/chat/completions on $wire", ({ model, tool }) => {
    it("answers a CreateChatCompletionResponse, with text and with tool calls", async () => {
      const plain = await post(gw, "/v1/chat/completions", {
        model,
        messages: [{ role: "user", content: "hello" }],
      });
      expect(plain.status).toBe(200);
      assertConforms("CreateChatCompletionResponse", await plain.json(), "text answer");
      const called = await post(gw, "/v1/chat/completions", {
        model,
        messages: [{ role: "user", content: `${tool}weather in Paris?` }],
        tools,
      });
      expect(called.status).toBe(200);
      const body = (await called.json()) as { choices: { message: { tool_calls?: unknown[] } }[] };
      expect(body.choices[0].message.tool_calls).toHaveLength(1);
      assertConforms("CreateChatCompletionResponse", body, "tool-call answer");
    });

    it("streams CreateChatCompletionStreamResponse chunks, with usage and with tool calls", async () => {
      const plain = await events(
        await post(gw, "/v1/chat/completions", {
          model,
          messages: [{ role: "user", content: "hello" }],
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
      checkChatStream(plain, "text stream");
      expect(plain.at(-1)?.data).toBe("[DONE]");
      const called = await events(
        await post(gw, "/v1/chat/completions", {
          model,
          messages: [{ role: "user", content: `${tool}weather in Paris?` }],
          tools,
          stream: true,
        }),
      );
      checkChatStream(called, "tool-call stream");
    });

    it("serves logprobs: true with the tokens of the answer, or refuses it with a 400 naming logprobs", async () => {
      const asked = {
        model,
        messages: [{ role: "user", content: "hello" }],
        logprobs: true,
        top_logprobs: 2,
      };
      const res = await post(gw, "/v1/chat/completions", asked);
      if (model === "claude-x") {
        // Anthropic's API has no log probabilities: said so, rather than a silent null.
        expect(res.status).toBe(400);
        const body = (await res.json()) as { error: { code: string; message: string } };
        assertConforms("ErrorResponse", body, "refusal");
        expect(body.error.code).toBe("bad_request");
        expect(body.error.message).toContain("`logprobs`");
        return;
      }
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        choices: {
          message: { content: string };
          logprobs: { content: { token: string; top_logprobs: unknown[] }[] } | null;
        }[];
      };
      assertConforms("CreateChatCompletionResponse", body, "answer with logprobs");
      const [choice] = body.choices;
      expect(choice.logprobs?.content.length).toBeGreaterThan(0);
      if (model === "mock-gpt") {
        expect(choice.logprobs?.content.map((t) => t.token).join("")).toBe(choice.message.content);
        for (const token of choice.logprobs?.content ?? [])
          expect(token.top_logprobs).toHaveLength(2);
      }
      const streamed = await events(
        await post(gw, "/v1/chat/completions", { ...asked, stream: true }),
      );
      checkChatStream(streamed, "stream with logprobs");
      const tokens = streamed.flatMap(
        ({ data }) =>
          (data as { choices?: { logprobs?: { content?: { token: string }[] } | null }[] })
            .choices?.[0]?.logprobs?.content ?? [],
      );
      expect(tokens.length).toBeGreaterThan(0);
      if (model === "mock-gpt") expect(tokens).toEqual(choice.logprobs?.content);
    });

    it("ends a stream that breaks midway with an error body", async () => {
      const broken = await events(
        await post(gw, "/v1/chat/completions", {
          model,
          messages: [{ role: "user", content: "BREAK [[mock:break=2]]" }],
          stream: true,
        }),
      );
      checkChatStream(broken, "broken stream");
      expect((broken.at(-1)!.data as { error?: unknown }).error).toBeDefined();
    });
  });

  const responsesModels = [
    ...chatModels,
    { wire: "openai (native Responses)", model: "native-x", tool: "" },
  ];

  /** A request that echoes back into the Response: every field the client set. */
  const asked = {
    instructions: "Answer briefly.",
    metadata: { purpose: "conformance" },
    temperature: 0.5,
    top_p: 0.9,
    tool_choice: "auto",
    tools: responsesTools,
    max_output_tokens: 500,
  };

  describe.each(responsesModels)("POST /v1/responses on $wire", ({ wire, model, tool }) => {
    const native = wire.includes("native");

    it("answers a Response, with text and with function calls", async () => {
      const plain = await post(gw, "/v1/responses", { model, input: "hello" });
      expect(plain.status).toBe(200);
      assertConforms("Response", await plain.json(), "text answer");
      if (native) return;
      const called = await post(gw, "/v1/responses", {
        model,
        input: `${tool}weather in Paris?`,
        tools: responsesTools,
      });
      expect(called.status).toBe(200);
      const body = (await called.json()) as { output: { type: string }[] };
      expect(body.output.map((item) => item.type)).toContain("function_call");
      assertConforms("Response", body, "function-call answer");
    });

    it("streams Response events, each of its own schema and numbered in order", async () => {
      const plain = await events(
        await post(gw, "/v1/responses", { model, input: "hello", stream: true }),
      );
      checkResponsesStream(plain, "text stream");
      expect(plain.at(-1)?.event).toBe("response.completed");
      if (native) return;
      const called = await events(
        await post(gw, "/v1/responses", {
          model,
          input: `${tool}weather in Paris?`,
          tools: responsesTools,
          stream: true,
        }),
      );
      checkResponsesStream(called, "function-call stream");
    });

    it("includes message.output_text.logprobs where the provider has them, else a 400 naming logprobs", async () => {
      if (native) return; // the provider's own answer passes on
      const asked = {
        model,
        input: "hello",
        include: ["message.output_text.logprobs"],
        top_logprobs: 2,
      };
      const res = await post(gw, "/v1/responses", asked);
      if (model === "claude-x") {
        expect(res.status).toBe(400);
        const body = (await res.json()) as { error: { code: string; message: string } };
        assertConforms("ErrorResponse", body, "refusal");
        expect(body.error.code).toBe("bad_request");
        expect(body.error.message).toContain("logprobs");
        return;
      }
      expect(res.status).toBe(200);
      type Part = { text: string; logprobs: { token: string; top_logprobs: unknown[] }[] };
      const body = (await res.json()) as { output: { content?: Part[] }[] };
      assertConforms("Response", body, "answer with logprobs");
      const part = body.output[0].content?.[0];
      expect(part?.logprobs.length).toBeGreaterThan(0);
      if (model === "mock-gpt")
        expect(part?.logprobs.map((t) => t.token).join("")).toBe(part?.text);
      const streamed = await events(await post(gw, "/v1/responses", { ...asked, stream: true }));
      checkResponsesStream(streamed, "stream with logprobs");
      const deltas = streamed.flatMap(({ data }) => {
        const event = data as { type: string; logprobs?: { token: string }[] };
        return event.type === "response.output_text.delta" ? (event.logprobs ?? []) : [];
      });
      expect(deltas.length).toBeGreaterThan(0);
      const done = streamed.find((e) => e.event === "response.completed")?.data as {
        response: { output: { content?: Part[] }[] };
      };
      expect(done.response.output[0].content?.[0].logprobs.map((t) => t.token)).toEqual(
        deltas.map((t) => t.token),
      );
    });

    it("ends a stream that breaks midway with error and a whole response.failed, numbered on", async () => {
      const broken = await events(
        await post(gw, "/v1/responses", {
          model,
          input: "BREAK [[mock:break=2]]",
          stream: true,
          ...asked,
        }),
      );
      checkResponsesStream(broken, "broken stream");
      const [error, failed] = broken.slice(-2).map((e) => e.data) as [
        { type: string },
        { type: string; response: Record<string, unknown> },
      ];
      expect(error.type).toBe("error");
      expect(failed.type).toBe("response.failed");
      const created = broken[0].data as { response: { id: string } };
      expect(failed.response).toMatchObject({
        id: created.response.id,
        status: "failed",
        model,
        instructions: asked.instructions,
        metadata: asked.metadata,
        temperature: asked.temperature,
        top_p: asked.top_p,
        tool_choice: asked.tool_choice,
        max_output_tokens: asked.max_output_tokens,
        tools: [expect.objectContaining({ type: "function", name: "get_weather" })],
      });
    });
  });

  describe("POST /v1/responses cut at max_output_tokens", () => {
    it("answers an incomplete Response, and streams up to response.incomplete", async () => {
      const asked = { model: "mock-gpt", input: "[[mock:words=300]] go on", max_output_tokens: 16 };
      const res = await post(gw, "/v1/responses", asked);
      const body = (await res.json()) as { status: string };
      expect(body.status).toBe("incomplete");
      assertConforms("Response", body, "incomplete answer");
      const list = await events(await post(gw, "/v1/responses", { ...asked, stream: true }));
      checkResponsesStream(list, "incomplete stream");
      expect(list.at(-1)?.event).toBe("response.incomplete");
    });
  });

  describe("POST /v1/chat/completions, a stream whose every provider failed after its 200", () => {
    it("ends with an error body", async () => {
      const list = await events(
        await post(gw, "/v1/chat/completions", {
          model: "mock-late",
          messages: [{ role: "user", content: "hi" }],
          stream: true,
        }),
      );
      checkChatStream(list, "kept-alive failure");
      expect(list.map((e) => (e.data as { error?: { code: string } }).error?.code)).toEqual([
        "upstream_error",
      ]);
    });
  });

  describe("POST /v1/responses, a stream whose every provider failed after its 200", () => {
    it("starts with response.created, then ends with error and a whole response.failed", async () => {
      const list = await events(
        await post(gw, "/v1/responses", {
          model: "mock-late",
          input: "hi",
          stream: true,
          ...asked,
        }),
      );
      checkResponsesStream(list, "kept-alive failure");
      expect(list.map((e) => e.event)).toEqual(["response.created", "error", "response.failed"]);
      const failed = list[2].data as { response: Record<string, unknown> };
      expect(failed.response).toMatchObject({
        model: "mock-late",
        instructions: asked.instructions,
        metadata: asked.metadata,
      });
    });
  });

  describe("POST /v1/embeddings", () => {
    it.each(["mock-embed", "up-embed"])(
      "answers a CreateEmbeddingResponse on %s",
      async (model) => {
        for (const encoding_format of ["float", "base64"]) {
          const res = await post(gw, "/v1/embeddings", {
            model,
            input: ["one", "two"],
            encoding_format,
          });
          expect(res.status).toBe(200);
          const body = (await res.json()) as { data: { embedding: number[] | string }[] };
          // The document types `embedding` as numbers only, though OpenAI answers base64 (what its
          // SDKs ask for by default) as a string: the base64 of float32 values is checked as them.
          for (const item of body.data) {
            if (typeof item.embedding !== "string") continue;
            const bytes = Buffer.from(item.embedding, "base64");
            expect(bytes.length % 4).toBe(0);
            const floats = new Float32Array(new Uint8Array(bytes).buffer);
            item.embedding = [...floats];
          }
          assertConforms("CreateEmbeddingResponse", body, `${encoding_format} answer`);
        }
      },
    );
  });

  describe("POST /v1/images/generations and /v1/images/edits", () => {
    it.each(["mock-image", "up-image"])(
      "answers an ImagesResponse on %s, b64_json and url",
      async (model) => {
        for (const response_format of ["b64_json", "url"]) {
          const res = await post(gw, "/v1/images/generations", {
            model,
            prompt: "a lighthouse",
            size: "64x64",
            response_format,
          });
          expect(res.status).toBe(200);
          assertConforms("ImagesResponse", await res.json(), `${response_format} answer`);
        }
      },
    );

    it.each(["mock-edit", "up-image"])(
      "answers an edit as an ImagesResponse on %s",
      async (model) => {
        const made = (await (
          await post(gw, "/v1/images/generations", {
            model: "mock-image",
            prompt: "a boat",
            size: "64x64",
          })
        ).json()) as { data: { b64_json: string }[] };
        const edited = await openai.images.edit({
          model,
          image: await toFile(Buffer.from(made.data[0].b64_json, "base64"), "boat.png", {
            type: "image/png",
          }),
          prompt: "paint it red",
          size: "1024x1024",
        });
        assertConforms("ImagesResponse", edited, "edit answer");
      },
    );
  });

  describe("POST /v1/audio/transcriptions (JSON forms)", () => {
    let wav: Buffer;
    beforeAll(async () => {
      const speech = await openai.audio.speech.create({
        model: "mock-tts",
        input: "The gateway speaks. Then it listens to every word again.",
        voice: "alloy",
        response_format: "wav",
      });
      wav = Buffer.from(await speech.arrayBuffer());
    });

    it.each(["mock-stt", "up-stt"])("answers json and verbose_json on %s", async (model) => {
      const json = await openai.audio.transcriptions.create({
        model,
        file: await toFile(wav, "speech.wav"),
        response_format: "json",
      });
      assertConforms("CreateTranscriptionResponseJson", json, "json answer");
      const verbose = await openai.audio.transcriptions.create({
        model,
        file: await toFile(wav, "speech.wav"),
        response_format: "verbose_json",
        timestamp_granularities: ["word", "segment"],
      });
      assertConforms("CreateTranscriptionResponseVerboseJson", verbose, "verbose_json answer");
      expect(verbose.words?.length).toBeGreaterThan(0);
      expect(verbose.segments?.length).toBeGreaterThan(0);
    });
  });

  describe("GET /v1/models", () => {
    it("lists models as ListModelsResponse and answers one as a Model, with or without the admin key", async () => {
      const anyone: Record<string, string> = {};
      for (const headers of [anyone, { authorization: `Bearer ${ADMIN_KEY}` }]) {
        const list = await fetch(`${gw.url}/v1/models`, { headers });
        expect(list.status).toBe(200);
        assertConforms("ListModelsResponse", await list.json(), "model list");
        const one = await fetch(`${gw.url}/v1/models/mock-gpt`, { headers });
        expect(one.status).toBe(200);
        assertConforms("Model", await one.json(), "one model");
      }
    });
  });

  describe("error bodies", () => {
    const chatBody = (model: string, content = "hello") => ({
      model,
      messages: [{ role: "user", content }],
    });
    const responsesBody = (model: string, input = "hello") => ({ model, input });
    const refusals: [string, number, string, () => Promise<Response>][] = [
      ["bad body", 400, "bad_request", () => post(gw, "/v1/chat/completions", { model: "x" })],
      [
        "unknown model",
        400,
        "model_not_found",
        () => post(gw, "/v1/chat/completions", chatBody("nope")),
      ],
      [
        "upstream rejection",
        400,
        "context_length_exceeded",
        () =>
          post(
            gw,
            "/v1/chat/completions",
            chatBody("mock-gpt", "[[mock:reject=context_length_exceeded]]"),
          ),
      ],
      [
        "no balance",
        402,
        "insufficient_balance",
        () =>
          post(gw, "/v1/chat/completions", chatBody("mock-gpt"), {
            authorization: `Bearer ${POOR_KEY}`,
          }),
      ],
      [
        "subscribers only",
        403,
        "subscribers_only",
        () => post(gw, "/v1/chat/completions", chatBody("mock-pro")),
      ],
      [
        "provider rate limit",
        429,
        "upstream_error",
        () => post(gw, "/v1/chat/completions", chatBody("mock-gpt", "[[mock:fail=429]]")),
      ],
      [
        "provider down",
        503,
        "upstream_error",
        () => post(gw, "/v1/chat/completions", chatBody("mock-down")),
      ],
      [
        "every step down",
        503,
        "all_providers_failed",
        () => post(gw, "/v1/chat/completions", chatBody("all-down")),
      ],
      ["responses: bad body", 400, "bad_request", () => post(gw, "/v1/responses", { model: "x" })],
      [
        "responses: no balance",
        402,
        "insufficient_balance",
        () =>
          post(gw, "/v1/responses", responsesBody("mock-gpt"), {
            authorization: `Bearer ${POOR_KEY}`,
          }),
      ],
      [
        "responses: provider down",
        503,
        "upstream_error",
        () => post(gw, "/v1/responses", responsesBody("mock-down")),
      ],
      [
        "embeddings: bad body",
        400,
        "bad_request",
        () => post(gw, "/v1/embeddings", { model: "mock-embed" }),
      ],
      [
        "embeddings: anthropic wire",
        503,
        "no_wire_for_modality",
        () => post(gw, "/v1/embeddings", { model: "claude-x", input: "hi" }),
      ],
      [
        "images: bad body",
        400,
        "bad_request",
        () => post(gw, "/v1/images/generations", { model: "mock-image" }),
      ],
      [
        "speech: bad body",
        400,
        "bad_request",
        () => post(gw, "/v1/audio/speech", { model: "mock-tts", voice: "alloy" }),
      ],
      [
        "transcriptions: no file",
        400,
        "bad_request",
        () => {
          const form = new FormData();
          form.set("model", "mock-stt");
          return fetch(`${gw.url}/v1/audio/transcriptions`, {
            method: "POST",
            headers: { authorization: `Bearer ${KEY}` },
            body: form,
          });
        },
      ],
      ["models: unknown id", 400, "model_not_found", () => fetch(`${gw.url}/v1/models/nope`)],
      [
        "no such route",
        404,
        "not_found",
        () => fetch(`${gw.url}/v1/nope`, { headers: { authorization: `Bearer ${KEY}` } }),
      ],
    ];

    it.each(refusals)("%s: %i %s is an ErrorResponse", async (_what, status, code, send) => {
      const res = await send();
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: { code: string } };
      assertConforms("ErrorResponse", body, "error body");
      expect(body.error.code).toBe(code);
    });
  });
});
