import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeOpenAIMedia, startFakeOpenAIMedia } from "./support/fake-openai-media.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import { baseConfigWith, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The non-text endpoints as an adversarial client finds them: what is charged and recorded for
 * answers the existing suites do not send (an embedding batch longer than one context window, a
 * provider that answers no image, a provider answering image URLs to an MCP tool, a small
 * low-bitrate recording).
 */

const EMBED_PRICE = 300;
const IMAGE_PRICE = 500;
const IMAGE_REQUEST_PRICE = 100;
const STT_PRICE = 10;
const SPEECH_PRICE = 2;

let gw: TestGateway;
let media: FakeOpenAIMedia;
let pictures: FakeUpstream;
/** What the fake image provider answers next: its own URLs, or no image at all. */
let pictureMode: "urls" | "none" = "urls";
/** Answers every speech request 200 with an empty audio body. */
let silent: FakeUpstream;

beforeAll(async () => {
  media = await startFakeOpenAIMedia();
  pictures = await fakeUpstream("openai", (req) => {
    if (pictureMode === "none") return { kind: "json", body: { created: 1_700_000_000, data: [] } };
    const n = typeof req.body.n === "number" ? req.body.n : 1;
    return {
      kind: "json",
      body: {
        created: 1_700_000_000,
        data: Array.from({ length: n }, (_, i) => ({
          url: `${pictures.url}/generated/${i}.png`,
          revised_prompt: "a lighthouse",
        })),
      },
    };
  });
  silent = await fakeUpstream("openai", () => ({
    kind: "drip",
    contentType: "audio/mpeg",
    everyMs: 0,
    piece: () => undefined,
  }));
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: media.baseUrl, api_keys: ["sk-up"] },
        { id: "pics", wire: "openai", base_url: `${pictures.url}/v1`, api_keys: ["sk-pics"] },
        { id: "silent", wire: "openai", base_url: `${silent.url}/v1`, api_keys: ["sk-silent"] },
      ],
      models: [
        {
          name: "small-embed",
          provider: "mock",
          modality: "embedding",
          price_input_per_mtok: EMBED_PRICE,
          // text-embedding-3-small's: each input may be up to 8,191 tokens, a batch many of them.
          context_window: 8192,
        },
        {
          name: "pics-image",
          provider: "pics",
          upstream_model: "dall-e-3",
          modality: "image",
          price_per_unit: IMAGE_PRICE,
          price_per_request: IMAGE_REQUEST_PRICE,
        },
        {
          name: "silent-tts",
          provider: "silent",
          upstream_model: "tts-1",
          modality: "speech",
          price_per_unit: SPEECH_PRICE,
        },
        {
          name: "up-stt",
          provider: "up",
          upstream_model: "whisper-1",
          modality: "transcription",
          price_per_unit: STT_PRICE,
        },
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await media?.close();
  await pictures?.close();
  await silent?.close();
});

const balanceMicro = (account = "acct") =>
  gw.services.store.getAccount(account)!.balance_micro - gw.services.ledger.heldMicro(account);

/** The account's newest request-log row. */
function lastRow(endpointName: string) {
  return gw.services.store
    .requestLog("acct", 50)
    .find((row) => row.endpoint.startsWith(endpointName))!;
}

describe("POST /v1/embeddings: a batch is billed for every input", () => {
  it("charges the prompt_tokens its answer reports for a batch longer than one context window", async () => {
    // Eight inputs of about 7,500 tokens each: every one fits the model's 8,192-token window,
    // the batch is 60,000 tokens.
    const inputs = Array.from({ length: 8 }, (_, i) => `${"word ".repeat(6_000)}${i}`);
    const before = balanceMicro();
    const res = await post(gw, "/v1/embeddings", { model: "small-embed", input: inputs });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { data: unknown[]; usage: { prompt_tokens: number } };
    expect(body.data).toHaveLength(8);
    const tokens = body.usage.prompt_tokens;
    expect(tokens).toBeGreaterThan(8192);
    // metering.md: "What the client read in the answer's usage is what was billed."
    expect(before - balanceMicro()).toBe(tokens * EMBED_PRICE);
    expect(lastRow("embeddings").input_tokens).toBe(tokens);
  });
});

describe("POST /v1/images/generations: a provider that answers no image", () => {
  it("charges nothing (not even the per-request price) when the provider's answer holds no image", async () => {
    pictureMode = "none";
    try {
      const before = balanceMicro();
      const res = await post(gw, "/v1/images/generations", {
        model: "pics-image",
        prompt: "a lighthouse",
        n: 2,
      });
      await res.arrayBuffer();
      // DECISIONS.md: "A request that delivered nothing is free."
      expect(before - balanceMicro()).toBe(0);
      expect(lastRow("images.generations").cost_micro).toBe(0);
    } finally {
      pictureMode = "urls";
    }
  });
});

describe("POST /v1/audio/speech: a provider that answers no audio", () => {
  it("charges nothing for the characters when the provider's answer is an empty body", async () => {
    const before = balanceMicro();
    const res = await post(gw, "/v1/audio/speech", {
      model: "silent-tts",
      input: "nothing will be said",
      voice: "alloy",
    });
    await res.arrayBuffer();
    // DECISIONS.md: "A request that delivered nothing is free."
    expect(before - balanceMicro()).toBe(0);
    expect(lastRow("audio.speech").cost_micro).toBe(0);
  });
});

describe("MCP generate_image against a provider that answers image URLs", () => {
  it("is not an error result when its /v1 twin delivered and charged the image", async () => {
    const client = new Client({ name: "hunt-media", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${KEY}` } },
    });
    await client.connect(transport);
    try {
      const before = balanceMicro();
      const result = (await client.callTool({
        name: "generate_image",
        arguments: { model: "pics-image", prompt: "a lighthouse at dusk" },
      })) as { isError?: boolean; content: { type: string; text?: string; uri?: string }[] };
      const charged = before - balanceMicro();
      // The twin answered 200 with the provider's URL and was charged one image.
      expect(charged).toBe((IMAGE_PRICE + IMAGE_REQUEST_PRICE) * 1_000_000);
      // DECISIONS.md: each call is metered as its /v1 twin; a refusal is isError. A call that was
      // served and charged is no refusal, and its result carries the image's link.
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      expect(result.content.some((c) => c.type === "resource_link" || c.type === "image")).toBe(
        true,
      );
    } finally {
      await client.close();
    }
  });
});

describe("POST /v1/audio/transcriptions over the openai wire: a small, low-bitrate recording", () => {
  it("charges the seconds the provider reports for a 5 KB Opus voice note that lasts 7 s", async () => {
    // 7 s of Opus voice at its 6 kbit/s floor is 5,250 bytes; the fake provider reports 7 s.
    const clip = Buffer.concat([Buffer.from("OggS"), Buffer.alloc(5_250 - 4, 7)]);
    const form = new FormData();
    form.set("model", "up-stt");
    form.set("file", new Blob([clip], { type: "audio/ogg" }), "note.ogg");
    const before = balanceMicro();
    const res = await fetch(`${gw.url}/v1/audio/transcriptions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}` },
      body: form,
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { usage?: { seconds?: number } };
    expect(body.usage?.seconds).toBe(7);
    // DECISIONS.md: "a request is charged what its provider reported when it finished".
    expect(before - balanceMicro()).toBe(7 * STT_PRICE * 1_000_000);
  });
});
