import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeRgbaPng, encodePng, readPngSize } from "../src/server/media/png.js";
import { mockImage } from "../src/server/providers/mock/media/index.js";
import { type FakeOpenAIMedia, startFakeOpenAIMedia } from "./support/fake-openai-media.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfigWith,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/** Embeddings, image edits, token counting and one model's entry, through the official SDKs. */

const EMBED_PRICE = 300;
const EDIT_PRICE = 700;

const countTokensFields = new Set([
  "model",
  "messages",
  "system",
  "tools",
  "tool_choice",
  "thinking",
  "mcp_servers",
  "output_config",
  "context_management",
]);

let gw: TestGateway;
let media: FakeOpenAIMedia;
let claude: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  media = await startFakeOpenAIMedia();
  // Validates a count_tokens body the way the real API does: messages required, and no field
  // count_tokens does not take (max_tokens, stream, sampling: "Extra inputs are not permitted").
  claude = await fakeUpstream("anthropic", (req) => {
    if (req.path !== "/v1/messages/count_tokens") return { kind: "json", status: 404, body: {} };
    const ok =
      Array.isArray(req.body.messages) &&
      req.body.messages.length > 0 &&
      Object.keys(req.body).every((field) => countTokensFields.has(field));
    return ok
      ? { kind: "json", body: { input_tokens: 1234 } }
      : {
          kind: "json",
          status: 400,
          body: { type: "error", error: { type: "invalid_request_error", message: "bad" } },
        };
  });
  gw = await testGateway({
    // Held at a minute's start: the 60-a-minute budget below is counted in one window, however
    // slowly a loaded machine sends the requests (on the wall clock a minute's end could fall
    // between them and start the count again).
    clock: "manual",
    now: () => Date.parse("2030-01-01T10:00:00Z"),
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: media.baseUrl, api_keys: ["sk-up"] },
        { id: "claude", wire: "anthropic", base_url: claude.baseUrl, api_keys: ["sk-ant"] },
        // A base URL someone wrote a secret into: never used, never shown.
        {
          id: "secretive",
          wire: "openai",
          base_url: "http://127.0.0.1:9/v1?key=url-secret",
          api_keys: ["sk-up"],
        },
      ],
      models: [
        {
          name: "mock-embed",
          provider: "mock",
          modality: "embedding",
          price_input_per_mtok: EMBED_PRICE,
        },
        {
          name: "up-embed",
          provider: "up",
          upstream_model: "text-embedding-3-small",
          modality: "embedding",
          price_input_per_mtok: EMBED_PRICE,
        },
        { name: "claude-embed", provider: "claude", modality: "embedding" },
        { name: "mock-edit", provider: "mock", modality: "edit", price_per_unit: EDIT_PRICE },
        {
          name: "up-image",
          provider: "up",
          upstream_model: "gpt-image-1",
          modality: "image",
          price_per_unit: EDIT_PRICE,
        },
        { name: "claude-edit", provider: "claude", modality: "edit", price_per_unit: 1 },
        { name: "claude-chat", provider: "claude", upstream_model: "claude-upstream" },
        { name: "secretive-chat", provider: "secretive" },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await media?.close();
  await claude?.close();
});

const balanceMicro = (account = "acct") => gw.services.store.getAccount(account)?.balance_micro;

async function errorOf(res: Response) {
  return {
    status: res.status,
    ...((await res.json()) as { error: { code?: string; type: string } }).error,
  };
}

const norm = (v: number[]) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));

describe("POST /v1/embeddings", () => {
  it("gives deterministic unit vectors of the requested dimensions from the mock, billed by input tokens", async () => {
    const before = balanceMicro() ?? 0;
    const result = await openai.embeddings.create({
      model: "mock-embed",
      input: ["the quick brown fox", "jumps over the lazy dog"],
      dimensions: 64,
    });
    expect(result.model).toBe("mock-embed");
    expect(result.data.map((d) => d.index)).toEqual([0, 1]);
    for (const d of result.data) {
      expect(d.embedding).toHaveLength(64);
      expect(norm(d.embedding)).toBeCloseTo(1, 5);
    }
    expect(result.data[0].embedding).not.toEqual(result.data[1].embedding);
    const tokens = result.usage.prompt_tokens;
    expect(tokens).toBeGreaterThan(0);
    expect(before - (balanceMicro() ?? 0)).toBe(tokens * EMBED_PRICE);

    const again = await openai.embeddings.create({
      model: "mock-embed",
      input: "the quick brown fox",
      dimensions: 64,
    });
    expect(again.data[0].embedding).toEqual(result.data[0].embedding);
  });

  it("answers encoding_format float and base64 (little-endian float32) with the same values", async () => {
    const ask = async (encoding_format: string) =>
      (await (
        await post(gw, "/v1/embeddings", {
          model: "mock-embed",
          input: "hello",
          dimensions: 8,
          encoding_format,
        })
      ).json()) as { data: { embedding: number[] | string }[] };
    const floats = (await ask("float")).data[0].embedding as number[];
    const base64 = (await ask("base64")).data[0].embedding as string;
    const bytes = Buffer.from(base64, "base64");
    expect(bytes).toHaveLength(32);
    const decoded = Array.from({ length: 8 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(decoded).toEqual(floats);
    // The default length is OpenAI's small model's.
    const plain = await openai.embeddings.create({ model: "mock-embed", input: [1, 2, 3] });
    expect(plain.data[0].embedding).toHaveLength(1536);
  });

  it("forwards the body to an openai-wire provider and bills its reported tokens", async () => {
    const before = balanceMicro() ?? 0;
    const result = await openai.embeddings.create({ model: "up-embed", input: "forward me" });
    const sent = JSON.parse(media.received.at(-1)?.body.toString("utf8") ?? "{}");
    expect(media.received.at(-1)?.path).toBe("/v1/embeddings");
    expect(media.received.at(-1)?.headers.authorization).toBe("Bearer sk-up");
    expect(sent).toMatchObject({ model: "text-embedding-3-small", input: "forward me" });
    expect(result.model).toBe("up-embed");
    expect(result.data[0].embedding[0]).toBeCloseTo(0.6, 5);
    expect(before - (balanceMicro() ?? 0)).toBe(9 * EMBED_PRICE);
  });

  it("answers 503 no_wire_for_modality for an anthropic-wire model, and 400 for bad input, charging nothing", async () => {
    const before = balanceMicro();
    expect(
      await errorOf(await post(gw, "/v1/embeddings", { model: "claude-embed", input: "x" })),
    ).toMatchObject({ status: 503, code: "no_wire_for_modality" });
    expect(
      await errorOf(await post(gw, "/v1/embeddings", { model: "mock-embed", input: [] })),
    ).toMatchObject({ status: 400, code: "bad_request" });
    expect(
      await errorOf(
        await post(gw, "/v1/embeddings", {
          model: "mock-embed",
          input: "x",
          encoding_format: "hex",
        }),
      ),
    ).toMatchObject({ status: 400, code: "bad_request" });
    expect(balanceMicro()).toBe(before);
  });
});

const png = (prompt: string) => mockImage(prompt, "64x64");

describe("POST /v1/images/edits", () => {
  it("edits with the mock: n deterministic PNGs of the size asked, priced per image", async () => {
    const before = balanceMicro() ?? 0;
    const source = png("original picture");
    const edit = async () =>
      openai.images.edit({
        model: "mock-edit",
        image: await toFile(source, "in.png", { type: "image/png" }),
        prompt: "add a red balloon",
        n: 2,
        size: "256x256",
      });
    const result = await edit();
    expect(result.data).toHaveLength(2);
    const [first, second] = (result.data ?? []).map((d) => Buffer.from(d.b64_json ?? "", "base64"));
    expect(readPngSize(first)).toEqual({ width: 256, height: 256 });
    expect(first.equals(second)).toBe(false);
    expect(before - (balanceMicro() ?? 0)).toBe(2 * EDIT_PRICE * 1_000_000);
    const again = await edit();
    expect(Buffer.from(again.data?.[0].b64_json ?? "", "base64").equals(first)).toBe(true);
  });

  it("keeps the original where the mask is opaque and repaints where it is transparent", async () => {
    const source = png("keep me");
    // Transparent top half, opaque bottom half.
    const rgba = new Uint8Array(64 * 64 * 4);
    for (let i = 0; i < rgba.length; i += 4) rgba[i + 3] = i < rgba.length / 2 ? 0 : 255;
    const result = await openai.images.edit({
      model: "mock-edit",
      image: await toFile(source, "in.png", { type: "image/png" }),
      mask: await toFile(encodePng(64, 64, rgba), "mask.png", { type: "image/png" }),
      prompt: "sky",
    });
    const out = decodeRgbaPng(Buffer.from(result.data?.[0].b64_json ?? "", "base64"));
    const original = decodeRgbaPng(source);
    if (!out || !original) throw new Error("not a PNG");
    const half = out.rgba.length / 2;
    expect(
      Buffer.from(out.rgba.subarray(half)).equals(Buffer.from(original.rgba.subarray(half))),
    ).toBe(true);
    expect(
      Buffer.from(out.rgba.subarray(0, half)).equals(Buffer.from(original.rgba.subarray(0, half))),
    ).toBe(false);
  });

  it("forwards the multipart form to an openai-wire image model (image models edit too)", async () => {
    const result = await openai.images.edit({
      model: "up-image",
      image: await toFile(png("upload"), "in.png", { type: "image/png" }),
      prompt: "make it blue",
      size: "64x64",
    });
    const received = media.received.at(-1);
    expect(received?.path).toBe("/v1/images/edits");
    expect(received?.headers.authorization).toBe("Bearer sk-up");
    const text = received?.body.toString("latin1") ?? "";
    expect(text).toMatch(/name="model"\r\n\r\ngpt-image-1\r\n/);
    expect(text).toMatch(/name="prompt"\r\n\r\nmake it blue\r\n/);
    expect(text).toMatch(/name="image"; filename="in.png"/);
    expect(result.created).toBe(1_700_000_001);
    expect(readPngSize(Buffer.from(result.data?.[0].b64_json ?? "", "base64"))).toEqual({
      width: 64,
      height: 64,
    });
  });

  it("serves response_format url from the gateway's files", async () => {
    const result = await openai.images.edit({
      model: "mock-edit",
      image: await toFile(png("as url"), "in.png", { type: "image/png" }),
      prompt: "x",
      response_format: "url",
    });
    const url = result.data?.[0].url ?? "";
    expect(url.startsWith(`${gw.url}/v1/files/`)).toBe(true);
    const file = await fetch(url, { headers: { authorization: `Bearer ${KEY}` } });
    expect(file.headers.get("content-type")).toBe("image/png");
  });

  it("refuses a missing image (400), a chat body (400) and an anthropic-wire model (503), charging nothing", async () => {
    const before = balanceMicro();
    const form = new FormData();
    form.set("model", "mock-edit");
    form.set("prompt", "x");
    const noImage = await fetch(`${gw.url}/v1/images/edits`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}` },
      body: form,
    });
    expect(await errorOf(noImage)).toMatchObject({ status: 400, code: "bad_request" });
    expect(await errorOf(await post(gw, "/v1/images/edits", { model: "mock-edit" }))).toMatchObject(
      { status: 400, code: "bad_request" },
    );
    await expect(
      openai.images.edit({
        model: "claude-edit",
        image: await toFile(png("x"), "in.png", { type: "image/png" }),
        prompt: "x",
      }),
    ).rejects.toMatchObject({ status: 503, code: "no_wire_for_modality" });
    expect(balanceMicro()).toBe(before);
  });
});

describe("POST /v1/messages/count_tokens", () => {
  const messages = [{ role: "user" as const, content: "How many tokens is this sentence?" }];

  it("estimates for a non-anthropic backend, without billing or logging a request", async () => {
    const before = balanceMicro();
    const count = await anthropic.messages.countTokens({
      model: "mock-gpt",
      system: "Be brief.",
      messages,
    });
    expect(count.input_tokens).toBeGreaterThan(5);
    const longer = await anthropic.messages.countTokens({
      model: "mock-gpt",
      messages: [{ role: "user", content: "How many tokens is this sentence? ".repeat(20) }],
    });
    expect(longer.input_tokens).toBeGreaterThan(count.input_tokens * 5);
    expect(balanceMicro()).toBe(before);
  });

  it("asks an anthropic-wire provider for the exact count, with the upstream model name", async () => {
    const count = await anthropic.messages.countTokens({ model: "claude-chat", messages });
    expect(count.input_tokens).toBe(1234);
    expect(claude.last.path).toBe("/v1/messages/count_tokens");
    expect(claude.last.headers["x-api-key"]).toBe("sk-ant");
    expect(claude.last.body).toEqual({ model: "claude-upstream", messages });
  });

  it("answers in the messages style: 400 for a bad body, 400 not_found_error for an unknown model", async () => {
    const bad = await post(gw, "/v1/messages/count_tokens", { model: "mock-gpt" });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error" },
    });
    await expect(
      anthropic.messages.countTokens({ model: "no-such-model", messages }),
    ).rejects.toMatchObject({ status: 400, error: { error: { type: "not_found_error" } } });
  });

  it("shares the usage endpoints' budget of 60 a minute (an account that cannot pay may count)", async () => {
    const poor = new Anthropic({ apiKey: POOR_KEY, baseURL: gw.url, maxRetries: 0 });
    for (let i = 0; i < 59; i++) {
      await poor.messages.countTokens({ model: "mock-gpt", messages });
    }
    const usage = await fetch(`${gw.url}/v1/usage/summary`, {
      headers: { authorization: `Bearer ${POOR_KEY}` },
    });
    expect(usage.status).toBe(200);
    await expect(poor.messages.countTokens({ model: "mock-gpt", messages })).rejects.toMatchObject({
      status: 429,
      error: { error: { type: "rate_limit_error" } },
    });
  });
});

describe("POST /v1/responses/input_tokens", () => {
  it("estimates for a non-anthropic backend with the SDK's shape, without billing", async () => {
    const before = balanceMicro();
    const count = await openai.responses.inputTokens.count({
      model: "mock-gpt",
      instructions: "Be brief.",
      input: "How many tokens is this sentence?",
    });
    expect(count.object).toBe("response.input_tokens");
    expect(count.input_tokens).toBeGreaterThan(5);
    const longer = await openai.responses.inputTokens.count({
      model: "mock-gpt",
      input: [{ role: "user", content: "How many tokens is this sentence? ".repeat(20) }],
    });
    expect(longer.input_tokens).toBeGreaterThan(count.input_tokens * 5);
    expect(balanceMicro()).toBe(before);
  });

  it("counts the turns a previous_response_id names before the new input", async () => {
    const first = await openai.responses.create({
      model: "mock-gpt",
      input: "Remember this long first turn about tokens. ".repeat(30),
    });
    const alone = await openai.responses.inputTokens.count({ model: "mock-gpt", input: "And?" });
    const chained = await openai.responses.inputTokens.count({
      model: "mock-gpt",
      previous_response_id: first.id,
      input: "And?",
    });
    expect(chained.input_tokens).toBeGreaterThan(alone.input_tokens + 200);
  });

  it("asks an anthropic-wire provider for the exact count, the Responses input as Messages", async () => {
    const count = await openai.responses.inputTokens.count({
      model: "claude-chat",
      instructions: "Be brief.",
      input: [{ role: "user", content: "How many tokens is this sentence?" }],
      tools: [
        {
          type: "function",
          name: "lookup",
          parameters: { type: "object", properties: {} },
          strict: false,
        },
      ],
    });
    expect(count).toEqual({ object: "response.input_tokens", input_tokens: 1234 });
    expect(claude.last.path).toBe("/v1/messages/count_tokens");
    expect(claude.last.body).toMatchObject({
      model: "claude-upstream",
      system: "Be brief.",
      messages: [
        { role: "user", content: [{ type: "text", text: "How many tokens is this sentence?" }] },
      ],
      tools: [{ name: "lookup" }],
    });
  });

  it("answers in the chat-completions style: a missing model named, an unknown model", async () => {
    const bad = await post(gw, "/v1/responses/input_tokens", { input: "hi" });
    expect(await errorOf(bad)).toMatchObject({ status: 400, code: "bad_request" });
    await expect(
      openai.responses.inputTokens.count({ model: "no-such-model", input: "hi" }),
    ).rejects.toMatchObject({ status: 400, code: "model_not_found" });
    await expect(
      openai.responses.inputTokens.count({
        model: "mock-gpt",
        previous_response_id: "resp_unknown",
        input: "hi",
      }),
    ).rejects.toMatchObject({ status: 400, code: "bad_request" });
  });
});

describe("GET /v1/models/{id}", () => {
  it("returns the same object as the list entry, for models and routes", async () => {
    const list = await openai.models.list();
    for (const id of ["mock-gpt", "mock-gpt:free", "auto"]) {
      const entry = list.data.find((m) => m.id === id);
      expect(entry).toBeDefined();
      expect(await openai.models.retrieve(id)).toEqual(entry);
    }
  });

  it("adds the internal fields for an admin key, and works without a key like the list", async () => {
    const admin = await fetch(`${gw.url}/v1/models/up-embed`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(await admin.json()).toMatchObject({
      id: "up-embed",
      modality: "embedding",
      internal: { provider: "up", wire: "openai", upstream_model: "text-embedding-3-small" },
    });
    const anonymous = (await (await fetch(`${gw.url}/v1/models/up-embed`)).json()) as object;
    expect(anonymous).toMatchObject({ id: "up-embed" });
    expect(anonymous).not.toHaveProperty("internal");
  });

  it("shows an admin a provider's base URL with the query written into it as ***", async () => {
    const admin = await fetch(`${gw.url}/v1/models/secretive-chat`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    const text = await admin.text();
    expect(JSON.parse(text).internal.base_url).toBe("http://127.0.0.1:9/v1?***");
    expect(text).not.toContain("url-secret");
  });

  it("answers 400 model_not_found for an unknown id", async () => {
    await expect(openai.models.retrieve("no-such-model")).rejects.toMatchObject({
      status: 400,
      code: "model_not_found",
    });
  });
});

describe("GET /v1/models in Anthropic's shape (the request carries anthropic-version)", () => {
  const client = (apiKey = KEY) =>
    new Anthropic({ apiKey, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
  /** The ids of the OpenAI list, in its order: what every Anthropic page is cut from. */
  const allIds = async () => (await openai.models.list()).data.map((m) => m.id);

  it("lists every model and route with the typed fields filled, paging through all of them", async () => {
    const ids: string[] = [];
    const seen: Anthropic.ModelInfo[] = [];
    for await (const model of client().models.list({ limit: 2 })) {
      ids.push(model.id);
      seen.push(model);
    }
    expect(ids).toEqual(await allIds());
    for (const model of seen) {
      expect(model.type).toBe("model");
      expect(model.display_name).toBe(model.id);
      expect(Number.isNaN(Date.parse(model.created_at))).toBe(false);
      expect(model).not.toHaveProperty("internal");
    }
    const gpt = seen.find((m) => m.id === "mock-gpt");
    expect(gpt).toMatchObject({ lifecycle: "active", max_input_tokens: expect.any(Number) });
    expect(Date.parse(gpt?.created_at ?? "")).toBeGreaterThan(0);
    expect(seen.find((m) => m.id === "auto")).toMatchObject({ type: "model", route: true });
  });

  it("pages with limit, after_id and before_id as Anthropic does: has_more, first_id, last_id", async () => {
    const ids = await allIds();
    const first = await client().models.list({ limit: 3 });
    expect(first.data.map((m) => m.id)).toEqual(ids.slice(0, 3));
    expect(first).toMatchObject({ has_more: true, first_id: ids[0], last_id: ids[2] });

    const next = await client().models.list({ limit: 3, after_id: ids[2] });
    expect(next.data.map((m) => m.id)).toEqual(ids.slice(3, 6));
    expect(next.first_id).toBe(ids[3]);

    const before = await client().models.list({ limit: 2, before_id: ids[3] });
    expect(before.data.map((m) => m.id)).toEqual(ids.slice(1, 3));
    expect(before).toMatchObject({ has_more: true, first_id: ids[1], last_id: ids[2] });
    const start = await before.getNextPage();
    expect(start.data.map((m) => m.id)).toEqual([ids[0]]);
    expect(start.has_more).toBe(false);

    const last = await client().models.list({ limit: 1000, after_id: ids[0] });
    expect(last).toMatchObject({ has_more: false, last_id: ids.at(-1) });
  });

  it("refuses a bad limit or an unknown cursor with a 400 in Anthropic's error shape", async () => {
    for (const query of ["limit=0", "limit=1001", "limit=two", "after_id=no-such-model"]) {
      const res = await fetch(`${gw.url}/v1/models?${query}`, {
        headers: { "anthropic-version": "2023-06-01" },
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({
        type: "error",
        error: { type: "invalid_request_error", message: expect.any(String) },
      });
    }
  });

  it("retrieves one model as the list's entry, and an unknown id is Anthropic's 404 not_found_error", async () => {
    const listed = (await client().models.list({ limit: 1000 })).data;
    for (const id of ["mock-gpt", "up-embed", "auto"]) {
      expect(await client().models.retrieve(id)).toEqual(listed.find((m) => m.id === id));
    }
    const err = await client()
      .models.retrieve("no-such-model")
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({
      type: "error",
      error: { type: "not_found_error", message: expect.stringContaining("no-such-model") },
    });
  });

  it("keeps the admin key's internal fields, and the OpenAI shape without anthropic-version", async () => {
    const admin = await client(ADMIN_KEY).models.retrieve("up-embed");
    expect(admin).toMatchObject({
      type: "model",
      id: "up-embed",
      internal: { provider: "up", wire: "openai", upstream_model: "text-embedding-3-small" },
    });
    const route = (await client(ADMIN_KEY).models.list({ limit: 1000 })).data.find(
      (m) => m.id === "auto",
    );
    expect(route).toMatchObject({ internal: { steps: ["mock-down", "mock-gpt"] } });

    const plain = (await (await fetch(`${gw.url}/v1/models`)).json()) as Record<string, unknown>;
    expect(plain.object).toBe("list");
    expect(plain).not.toHaveProperty("has_more");
  });
});
