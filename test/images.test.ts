import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readPngSize } from "../src/server/media/png.js";
import {
  type FakeOpenAIMedia,
  providerSecretText,
  startFakeOpenAIMedia,
} from "./support/fake-openai-media.js";
import {
  baseConfigWith,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

const UPSTREAM_KEY = "sk-upstream-image-key";
const IMAGE_PRICE_IDR = 500;

let gw: TestGateway;
let upstream: FakeOpenAIMedia;
let openai: OpenAI;

beforeAll(async () => {
  upstream = await startFakeOpenAIMedia();
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: [UPSTREAM_KEY] },
        { id: "up-errors", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-errors"] },
        { id: "claude", wire: "anthropic", base_url: upstream.baseUrl },
      ],
      models: [
        {
          name: "up-image",
          provider: "up",
          upstream_model: "gpt-image-1",
          modality: "image",
          price_per_unit: 300,
        },
        { name: "up-image-errors", provider: "up-errors", modality: "image", price_per_unit: 300 },
        {
          name: "down-image",
          provider: "mock-down",
          modality: "image",
          price_per_unit: IMAGE_PRICE_IDR,
        },
        { name: "claude-image", provider: "claude", modality: "image", price_per_unit: 1 },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const balanceMicro = (account = "acct") => gw.services.store.getAccount(account)!.balance_micro;

async function errorOf(res: Response) {
  return ((await res.json()) as { error: { code: string; type: string; message: string } }).error;
}

describe("POST /v1/images/generations on the mock provider", () => {
  it("returns n real PNGs of the requested size as b64_json and charges n x price_per_unit", async () => {
    const before = balanceMicro();
    const result = await openai.images.generate({
      model: "mock-image",
      prompt: "a lighthouse at dusk",
      n: 3,
      size: "256x256",
      response_format: "b64_json",
    });
    expect(result.data).toHaveLength(3);
    const pictures = (result.data ?? []).map((d) => Buffer.from(d.b64_json ?? "", "base64"));
    for (const png of pictures) expect(readPngSize(png)).toEqual({ width: 256, height: 256 });
    expect(new Set(pictures.map((p) => p.toString("base64"))).size).toBe(3);
    expect(typeof result.created).toBe("number");
    expect(before - balanceMicro()).toBe(3 * IMAGE_PRICE_IDR * 1_000_000);
  });

  it("defaults to one 1024x1024 picture in b64_json", async () => {
    const result = await openai.images.generate({ model: "mock-image", prompt: "a cat" });
    expect(result.data).toHaveLength(1);
    expect(readPngSize(Buffer.from(result.data?.[0].b64_json ?? "", "base64"))).toEqual({
      width: 1024,
      height: 1024,
    });
  });

  it("serves response_format url from /v1/files, to the same account's keys only", async () => {
    const result = await openai.images.generate({
      model: "mock-image",
      prompt: "a red kite",
      size: "512x256",
      response_format: "url",
    });
    const url = result.data?.[0].url ?? "";
    expect(url).toMatch(new RegExp(`^${gw.url}/v1/files/file_`));
    expect(result.data?.[0].b64_json).toBeUndefined();

    const own = await fetch(url, { headers: { authorization: `Bearer ${KEY}` } });
    expect(own.status).toBe(200);
    expect(own.headers.get("content-type")).toBe("image/png");
    expect(readPngSize(new Uint8Array(await own.arrayBuffer()))).toEqual({
      width: 512,
      height: 256,
    });

    const other = await fetch(url, { headers: { authorization: `Bearer ${POOR_KEY}` } });
    expect(other.status).toBe(404);
    expect((await errorOf(other)).code).toBe("not_found");
    expect((await fetch(url)).status).toBe(401);
    const unknown = await fetch(`${gw.url}/v1/files/file_nope`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(unknown.status).toBe(404);
  });
});

describe("image request errors", () => {
  const cases: [string, object, number, string, RegExp][] = [
    ["a missing prompt", { model: "mock-image" }, 400, "bad_request", /prompt/],
    [
      "a prompt of the wrong type",
      { model: "mock-image", prompt: 7 },
      400,
      "bad_request",
      /prompt/,
    ],
    ["n above 10", { model: "mock-image", prompt: "x", n: 11 }, 400, "bad_request", /\bn\b/],
    [
      "n that is not an integer",
      { model: "mock-image", prompt: "x", n: 1.5 },
      400,
      "bad_request",
      /\bn\b/,
    ],
    [
      "a malformed size",
      { model: "mock-image", prompt: "x", size: "big" },
      400,
      "bad_request",
      /size/,
    ],
    [
      "an unknown response_format",
      { model: "mock-image", prompt: "x", response_format: "gif" },
      400,
      "bad_request",
      /response_format/,
    ],
    ["a missing model", { prompt: "x" }, 400, "bad_request", /model/],
    [
      "an unknown model",
      { model: "no-such-model", prompt: "x" },
      400,
      "model_not_found",
      /no-such-model/,
    ],
    ["a chat model", { model: "mock-gpt", prompt: "x" }, 503, "no_wire_for_modality", /image/],
    [
      "an image model on an anthropic provider",
      { model: "claude-image", prompt: "x" },
      503,
      "no_wire_for_modality",
      /image/,
    ],
  ];
  for (const [what, body, status, code, message] of cases) {
    it(`answers ${status} ${code} for ${what}`, async () => {
      const before = balanceMicro();
      const res = await post(gw, "/v1/images/generations", body);
      expect(res.status).toBe(status);
      const error = await errorOf(res);
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
      expect(balanceMicro()).toBe(before);
    });
  }

  it("answers 402 insufficient_balance for an account that cannot pay", async () => {
    const res = await post(
      gw,
      "/v1/images/generations",
      { model: "mock-image", prompt: "x" },
      { authorization: `Bearer ${POOR_KEY}` },
    );
    expect(res.status).toBe(402);
    expect((await errorOf(res)).code).toBe("insufficient_balance");
  });

  it("charges nothing when the provider fails", async () => {
    const before = balanceMicro();
    const res = await post(gw, "/v1/images/generations", {
      model: "down-image",
      prompt: "x",
      n: 2,
    });
    expect(res.status).toBe(503);
    expect((await errorOf(res)).code).toBe("upstream_error");
    expect(balanceMicro()).toBe(before);
    const log = gw.services.store
      .requestLog("acct", 1_000)
      .filter((r) => r.model === "down-image")
      .map(({ state, cost_micro }) => ({ state, cost_micro }));
    expect(log).toEqual([{ state: "failed", cost_micro: 0 }]);
  });
});

describe("images over the openai wire", () => {
  it("forwards the body with the mapped model and the provider key, and returns its data", async () => {
    const before = balanceMicro();
    const result = await openai.images.generate({
      model: "up-image",
      prompt: "a fox",
      n: 2,
      size: "64x32",
      quality: "low",
    });
    const forwarded = upstream.received.at(-1)!;
    expect(forwarded.path).toBe("/v1/images/generations");
    expect(forwarded.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    expect(JSON.parse(forwarded.body.toString())).toEqual({
      model: "gpt-image-1",
      prompt: "a fox",
      n: 2,
      size: "64x32",
      quality: "low",
    });
    expect(result.created).toBe(1_700_000_000);
    expect(result.data).toHaveLength(2);
    expect(readPngSize(Buffer.from(result.data?.[1].b64_json ?? "", "base64"))).toEqual({
      width: 64,
      height: 32,
    });
    expect(before - balanceMicro()).toBe(2 * 300 * 1_000_000);
  });

  it("stores base64 answers and returns gateway URLs when the client asked for url", async () => {
    const result = await openai.images.generate({
      model: "up-image",
      prompt: "an owl",
      size: "32x32",
      response_format: "url",
    });
    const res = await fetch(result.data?.[0].url ?? "", {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(readPngSize(new Uint8Array(await res.arrayBuffer()))).toEqual({ width: 32, height: 32 });
  });

  it("maps upstream 400, 500 and 429 by the spec's rules, never passing the provider's body on", async () => {
    const before = balanceMicro();
    const expectations: [number, number, string, string][] = [
      [400, 400, "invalid_request_error", "invalid_request_error"],
      [500, 503, "upstream_error", "upstream_error"],
      [429, 429, "upstream_error", "upstream_error"],
    ];
    for (const [upstreamStatus, status, code, type] of expectations) {
      const res = await post(gw, "/v1/images/generations", {
        model: "up-image-errors",
        prompt: `status=${upstreamStatus}`,
      });
      const text = await res.text();
      expect(res.status, `upstream ${upstreamStatus}`).toBe(status);
      const { error } = JSON.parse(text) as { error: { code: string; type: string } };
      expect(error.code).toBe(code);
      expect(error.type).toBe(type);
      expect(text).not.toContain("provider-internal-detail");
      expect(text).not.toContain("sk-");
      expect(text).not.toContain(providerSecretText);
    }
    expect(balanceMicro()).toBe(before);
  });
});
