import { createHmac } from "node:crypto";
import Anthropic, { toFile as anthropicFile } from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  anthropicJson,
  anthropicStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  type RecordedRequest,
  type Reply,
} from "../support/fake-upstream.js";
import { baseConfigWith, KEY, type TestGateway, testGateway } from "../support/gateway.js";

/**
 * Every method of the official SDKs (openai 7.59.0, @anthropic-ai/sdk 1.14.0) pointed at the
 * gateway: each works as its provider documents, on the mock and on a model the gateway translates
 * to another wire, or is a 400 in the SDK's own error class naming the API that is not served and
 * where the served routes are listed, never the 404 of an unknown path, a 500 or a hang; a list
 * method's `for await` ends either way.
 */

const said = (req: RecordedRequest) => `You said: ${JSON.stringify(req.body.messages).length}`;
const chatReply = (req: RecordedRequest): Reply =>
  req.body.stream === true
    ? { kind: "sse", steps: openaiStreamSteps(["Hello", " there."]) }
    : openaiJson(said(req));
const messagesReply = (req: RecordedRequest): Reply =>
  req.body.stream === true
    ? { kind: "sse", steps: anthropicStreamSteps(["Hello", " there."]) }
    : anthropicJson(said(req));

let gw: TestGateway;
let chatUp: FakeUpstream;
let messagesUp: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
beforeAll(async () => {
  chatUp = await fakeUpstream("openai", chatReply);
  messagesUp = await fakeUpstream("anthropic", messagesReply);
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "oa", wire: "openai", base_url: chatUp.baseUrl, api_keys: ["sk-oa-pool"] },
        { id: "an", wire: "anthropic", base_url: messagesUp.baseUrl, api_keys: ["sk-an-pool"] },
      ],
      models: [
        { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: 1 },
        { name: "mock-stt", provider: "mock", modality: "transcription", price_per_unit: 1 },
        { name: "mock-embed", provider: "mock", modality: "embedding", price_input_per_mtok: 1 },
        { name: "gpt-x", provider: "oa", upstream_model: "gpt-upstream", price_input_per_mtok: 1 },
        {
          name: "claude-x",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
        },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw.close();
  await Promise.all([chatUp.close(), messagesUp.close()]);
});

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** The error a call ends in (a list method is read to its end with `for await`). */
async function failure(call: () => Promise<unknown> | AsyncIterable<unknown>): Promise<Error> {
  try {
    const started = call();
    if (Symbol.asyncIterator in started) await collect(started as AsyncIterable<unknown>);
    else await started;
  } catch (err) {
    return err as Error;
  }
  throw new Error("the call was answered");
}

/** A refusal of an API the gateway does not serve, as the SDK's own BadRequestError shows it. */
function expectNotServed(err: Error, what: string | RegExp): void {
  const { status, message } = err as Error & { status?: number };
  expect(status).toBe(400);
  expect(message).not.toMatch(/No route|internal/i);
  expect(message).toMatch(/not served by this gateway/);
  expect(message).toMatch(what);
  expect(message).toContain("GET /openapi.json");
}

const user = (content: string) => [{ role: "user" as const, content }];

describe.each(["mock-gpt", "claude-x"])("the openai SDK's model methods on %s", (model) => {
  it("answer as OpenAI documents: chat.completions create, stream, parse; completions create and stream; models list and retrieve", async () => {
    const made = await openai.chat.completions.create({ model, messages: user("hi") });
    expect(made.choices[0]?.message.content).not.toBe("");
    const completed = await openai.completions.create({ model, prompt: "hi" });
    expect(completed.object).toBe("text_completion");
    expect(completed.choices[0]?.text).not.toBe("");
    const pieces = await collect(
      await openai.completions.create({ model, prompt: "hi", stream: true }),
    );
    expect(pieces.map((piece) => piece.choices[0]?.text ?? "").join("")).not.toBe("");
    const chunks = await collect(
      await openai.chat.completions.create({ model, messages: user("hi"), stream: true }),
    );
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).not.toBe("");
    const streamed = await openai.chat.completions
      .stream({ model, messages: user("hi") })
      .finalChatCompletion();
    expect(streamed.choices[0]?.message.content).not.toBe("");
    const parsed = await openai.chat.completions.parse({ model, messages: user("hi") });
    expect(parsed.choices[0]?.message.parsed).toBeNull();

    const listed = (await collect(openai.models.list())).map((entry) => entry.id);
    expect(listed).toContain(model);
    expect(await openai.models.retrieve(model)).toMatchObject({ id: model, object: "model" });
  });
});

describe("the openai SDK's media methods on the mock", () => {
  it("answer as OpenAI documents: embeddings, images generate and edit, speech, transcriptions, videos.list", async () => {
    const embedded = await openai.embeddings.create({ model: "mock-embed", input: ["a", "b"] });
    expect(embedded.data.map((entry) => entry.index)).toEqual([0, 1]);

    const image = await openai.images.generate({ model: "mock-image", prompt: "a cat" });
    const png = Buffer.from(String(image.data?.[0]?.b64_json), "base64");
    const edited = await openai.images.edit({
      model: "mock-image",
      prompt: "a hat",
      image: await toFile(png, "cat.png", { type: "image/png" }),
    });
    expect(edited.data?.[0]?.b64_json).toEqual(expect.any(String));

    const speech = await openai.audio.speech.create({
      model: "mock-tts",
      input: "hello world",
      voice: "alloy",
      response_format: "wav",
    });
    const wav = Buffer.from(await speech.arrayBuffer());
    const heard = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(wav, "speech.wav", { type: "audio/wav" }),
    });
    expect(heard.text.toLowerCase()).toContain("hello world");

    expect(await collect(openai.videos.list())).toEqual([]);
  });
});

describe("the openai SDK's stored chat completions", () => {
  it("are each a 400 saying the gateway keeps no chat completion, and list's for await ends", async () => {
    const calls: (() => Promise<unknown> | AsyncIterable<unknown>)[] = [
      () => openai.chat.completions.list(),
      () => openai.chat.completions.retrieve("chatcmpl-1"),
      () => openai.chat.completions.update("chatcmpl-1", { metadata: { a: "b" } }),
      () => openai.chat.completions.delete("chatcmpl-1"),
      () => openai.chat.completions.messages.list("chatcmpl-1"),
    ];
    for (const call of calls) {
      const err = await failure(call);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.message).toContain("Stored chat completions are not available");
    }
  });
});

const wav = () => toFile(Buffer.from("RIFF"), "a.wav", { type: "audio/wav" });
const jsonl = () => toFile(Buffer.from("{}\n"), "a.jsonl");

/** Every openai SDK method of an API the gateway does not serve, and the name its refusal gives. */
const openaiNotServed: [string, () => Promise<unknown> | AsyncIterable<unknown>, RegExp][] = [
  ["models.delete", () => openai.models.delete("ft:mock-gpt"), /models\.delete/],
  [
    "images.createVariation",
    async () =>
      openai.images.createVariation({
        image: await toFile(Buffer.from("x"), "a.png", { type: "image/png" }),
      }),
    /images\.createVariation.*\/v1\/images\/edits/,
  ],
  [
    "audio.translations.create",
    async () => openai.audio.translations.create({ model: "mock-stt", file: await wav() }),
    /audio\.translations.*\/v1\/audio\/transcriptions/,
  ],
  [
    "audio.voices.create",
    async () =>
      openai.audio.voices.create({ name: "v", audio_sample: await wav(), consent: "c" } as never),
    /audio\.voices/,
  ],
  ["audio.voiceConsents.list", () => openai.audio.voiceConsents.list(), /audio\.voiceConsents/],
  ["moderations.create", () => openai.moderations.create({ input: "hi" }), /Moderations API/],
  [
    "files.create",
    async () => openai.files.create({ file: await jsonl(), purpose: "batch" }),
    /Files API/,
  ],
  ["files.list", () => openai.files.list(), /Files API/],
  ["files.delete", () => openai.files.delete("file-abc"), /Files API/],
  [
    "uploads.create",
    () =>
      openai.uploads.create({
        bytes: 3,
        filename: "a.jsonl",
        mime_type: "text/jsonl",
        purpose: "batch",
      }),
    /Uploads API/,
  ],
  [
    "uploads.parts.create",
    async () => openai.uploads.parts.create("upload_1", { data: await jsonl() }),
    /Uploads API/,
  ],
  ["uploads.complete", () => openai.uploads.complete("upload_1", { part_ids: [] }), /Uploads/],
  ["uploads.cancel", () => openai.uploads.cancel("upload_1"), /Uploads API/],
  [
    "batches.create",
    () =>
      openai.batches.create({
        input_file_id: "file-abc",
        endpoint: "/v1/chat/completions",
        completion_window: "24h",
      }),
    /Batch API/,
  ],
  ["batches.list", () => openai.batches.list(), /Batch API/],
  ["batches.retrieve", () => openai.batches.retrieve("batch_1"), /Batch API/],
  ["batches.cancel", () => openai.batches.cancel("batch_1"), /Batch API/],
  ["vectorStores.create", () => openai.vectorStores.create({}), /vectorStores.*\/v1\/embeddings/],
  ["vectorStores.list", () => openai.vectorStores.list(), /vectorStores/],
  ["vectorStores.search", () => openai.vectorStores.search("vs_1", { query: "q" }), /vectorStores/],
  ["vectorStores.files.list", () => openai.vectorStores.files.list("vs_1"), /vectorStores/],
  [
    "vectorStores.fileBatches.create",
    () => openai.vectorStores.fileBatches.create("vs_1", { file_ids: ["file-abc"] }),
    /vectorStores/,
  ],
  [
    "fineTuning.jobs.create",
    () => openai.fineTuning.jobs.create({ model: "mock-gpt", training_file: "file-abc" }),
    /fineTuning/,
  ],
  ["fineTuning.jobs.list", () => openai.fineTuning.jobs.list(), /fineTuning/],
  [
    "evals.create",
    () =>
      openai.evals.create({
        data_source_config: { type: "custom", item_schema: {} },
        testing_criteria: [],
      }),
    /Evals/,
  ],
  ["evals.list", () => openai.evals.list(), /Evals/],
  ["evals.runs.list", () => openai.evals.runs.list("eval_1"), /Evals/],
  ["containers.create", () => openai.containers.create({ name: "box" }), /Containers/],
  ["containers.list", () => openai.containers.list(), /Containers/],
  ["containers.files.list", () => openai.containers.files.list("cntr_1"), /Containers/],
  [
    "realtime.clientSecrets.create",
    () => openai.realtime.clientSecrets.create({}),
    /Realtime API.*\/v1\/responses/,
  ],
  [
    "realtime.calls.accept",
    () => openai.realtime.calls.accept("call_1", { type: "realtime" }),
    /Realtime API/,
  ],
  ["webhooks.list", () => (openai.webhooks as never as Lister).list(), /gateway sends no webhooks/],
  [
    "beta.assistants.create",
    () => openai.beta.assistants.create({ model: "mock-gpt" }),
    /Assistants API.*\/v1\/conversations/,
  ],
  ["beta.assistants.list", () => openai.beta.assistants.list(), /Assistants API/],
  ["beta.threads.create", () => openai.beta.threads.create({}), /Assistants API/],
  [
    "beta.threads.createAndRunPoll",
    () => openai.beta.threads.createAndRunPoll({ assistant_id: "asst_1" }),
    /Assistants API/,
  ],
  ["beta.threads.messages.list", () => openai.beta.threads.messages.list("thread_1"), /Assist/],
  ["beta.threads.runs.list", () => openai.beta.threads.runs.list("thread_1"), /Assistants API/],
  [
    "beta.chatkit.sessions.create",
    () => openai.beta.chatkit.sessions.create({ user: "u", workflow: { id: "wf" } }),
    /ChatKit/,
  ],
  ["skills.list", () => openai.skills.list(), /Skills/],
];
type Lister = { list(): AsyncIterable<unknown> };

describe("the openai SDK's methods of APIs the gateway does not serve", () => {
  it.each(openaiNotServed)(
    "%s is a BadRequestError naming what is not served",
    async (_, call, what) => {
      const err = await failure(call);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expectNotServed(err, what);
    },
  );

  it("keeps the 404 of an unknown path for a path no provider API has", async () => {
    const res = await fetch(`${gw.url}/v1/no-such-api`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(404);
  });

  it("files.retrieve describes an image the gateway made as a FileObject, files.content gives its bytes; any other id is a 404", async () => {
    const made = await openai.images.generate({
      model: "mock-image",
      prompt: "a cat",
      response_format: "url",
    });
    const url = String(made.data?.[0]?.url);
    const id = String(url.split("/").at(-1));
    const png = Buffer.from(await (await openai.files.content(id)).arrayBuffer());
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    expect(await openai.files.retrieve(id)).toEqual({
      id,
      object: "file",
      bytes: png.length,
      created_at: expect.any(Number),
      filename: `${id}.png`,
      purpose: "user_data",
      status: "processed",
    });
    // The image's url still gives the bytes to whoever opens it.
    const opened = await fetch(url, { headers: { authorization: `Bearer ${KEY}` } });
    expect(opened.headers.get("content-type")).toBe("image/png");
    expect(Buffer.from(await opened.arrayBuffer())).toEqual(png);
    expect(await failure(() => openai.files.retrieve("file-abc"))).toBeInstanceOf(
      OpenAI.NotFoundError,
    );
  });

  it("webhooks.unwrap verifies a signed event on the client, as OpenAI documents (the gateway sends none)", async () => {
    const secret = `whsec_${Buffer.from("a webhook secret of ours").toString("base64")}`;
    const payload = JSON.stringify({ id: "evt_1", type: "batch.completed", data: {} });
    const id = "msg_1";
    const timestamp = String(Math.floor(Date.now() / 1000));
    const signature = createHmac("sha256", Buffer.from("a webhook secret of ours"))
      .update(`${id}.${timestamp}.${payload}`)
      .digest("base64");
    const headers = {
      "webhook-id": id,
      "webhook-timestamp": timestamp,
      "webhook-signature": `v1,${signature}`,
    };
    expect(await openai.webhooks.unwrap(payload, headers, secret)).toMatchObject({
      id: "evt_1",
    });
  });
});

describe.each(["mock-gpt", "gpt-x"])("the Anthropic SDK's model methods on %s", (model) => {
  it("answer as Anthropic documents: messages create, stream, countTokens; beta.messages with betas; models and beta.models", async () => {
    const ask = { model, max_tokens: 64, messages: user("hi") };
    const made = await anthropic.messages.create(ask);
    expect(made.content[0]).toMatchObject({ type: "text" });
    const streamed = await anthropic.messages.stream(ask).finalMessage();
    expect(streamed.content[0]).toMatchObject({ type: "text", text: expect.any(String) });
    const counted = await anthropic.messages.countTokens({ model, messages: user("hi") });
    expect(counted.input_tokens).toBeGreaterThan(0);

    const betas = ["token-efficient-tools-2025-02-19"];
    const beta = await anthropic.beta.messages.create({ ...ask, betas });
    expect(beta.content[0]).toMatchObject({ type: "text" });
    const betaStreamed = await anthropic.beta.messages.stream({ ...ask, betas }).finalMessage();
    expect(betaStreamed.role).toBe("assistant");
    const betaCounted = await anthropic.beta.messages.countTokens({
      model,
      messages: user("hi"),
      betas,
    });
    expect(betaCounted.input_tokens).toBeGreaterThan(0);

    for (const models of [anthropic.models, anthropic.beta.models]) {
      const listed = (await collect(models.list({ limit: 2 }))).map((entry) => entry.id);
      expect(listed).toContain(model);
      expect(await models.retrieve(model)).toMatchObject({ id: model, type: "model" });
    }
  });
});

const textFile = () => anthropicFile(Buffer.from("notes"), "notes.txt", { type: "text/plain" });

/** Every Anthropic SDK method of an API the gateway does not serve, and the name its refusal gives. */
const anthropicNotServed: [string, () => Promise<unknown> | AsyncIterable<unknown>, RegExp][] = [
  [
    "messages.batches.create",
    () =>
      anthropic.messages.batches.create({
        requests: [
          {
            custom_id: "a",
            params: { model: "mock-gpt", max_tokens: 8, messages: user("hi") },
          },
        ],
      }),
    /Message Batches API.*\/v1\/messages/,
  ],
  ["messages.batches.list", () => anthropic.messages.batches.list(), /Message Batches API/],
  ["messages.batches.retrieve", () => anthropic.messages.batches.retrieve("b_1"), /Batches/],
  ["messages.batches.results", () => anthropic.messages.batches.results("b_1"), /Batches/],
  ["messages.batches.cancel", () => anthropic.messages.batches.cancel("b_1"), /Batches/],
  ["messages.batches.delete", () => anthropic.messages.batches.delete("b_1"), /Batches/],
  ["beta.messages.batches.list", () => anthropic.beta.messages.batches.list(), /Batches/],
  ["files.upload", async () => anthropic.files.upload({ file: await textFile() }), /Files API/],
  ["files.list", () => anthropic.files.list(), /Files API/],
  ["files.delete", () => anthropic.files.delete("file_1"), /Files API/],
  [
    "beta.files.upload",
    async () => anthropic.beta.files.upload({ file: await textFile() }),
    /Files API/,
  ],
  ["beta.files.list", () => anthropic.beta.files.list(), /Files API/],
  ["beta.files.delete", () => anthropic.beta.files.delete("file_1"), /Files API/],
  ["skills.list", () => anthropic.skills.list(), /Skills/],
  ["beta.skills.list", () => anthropic.beta.skills.list(), /Skills/],
  ["beta.agents.list", () => anthropic.beta.agents.list(), /beta\.agents/],
];

describe("the Anthropic SDK's methods of APIs the gateway does not serve", () => {
  it.each(anthropicNotServed)(
    "%s is a BadRequestError in the messages style naming what is not served",
    async (_, call, what) => {
      const err = await failure(call);
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      expectNotServed(err, what);
      expect((err as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
        type: "error",
        error: { type: "invalid_request_error" },
      });
    },
  );

  it("beta.files.retrieveMetadata describes an image the gateway made as FileMetadata, download gives its bytes; any other id is a 404", async () => {
    const made = await openai.images.generate({
      model: "mock-image",
      prompt: "a cat",
      response_format: "url",
    });
    const id = String(made.data?.[0]?.url?.split("/").at(-1));
    const png = Buffer.from(await (await anthropic.beta.files.download(id)).arrayBuffer());
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    expect(await anthropic.beta.files.retrieveMetadata(id)).toEqual({
      id,
      type: "file",
      filename: `${id}.png`,
      mime_type: "image/png",
      size_bytes: png.length,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      downloadable: true,
    });
    for (const call of [
      () => anthropic.beta.files.retrieveMetadata("file_1"),
      () => anthropic.beta.files.download("file_1"),
    ]) {
      expect(await failure(call)).toBeInstanceOf(Anthropic.NotFoundError);
    }
  });
});
