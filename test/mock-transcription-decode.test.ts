import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { mockSpeech } from "../src/server/providers/mock/media/index.js";
import { baseConfigWith, KEY, type TestGateway, testGateway } from "./support/gateway.js";

// Every decode of an upload, wherever the gateway does it, goes through this one function.
const decodes = vi.hoisted(() => ({ count: 0 }));
vi.mock("../src/server/media/wav.js", async (original) => {
  const wav = await original<typeof import("../src/server/media/wav.js")>();
  return {
    ...wav,
    decodeWav: (buf: Uint8Array) => {
      decodes.count++;
      return wav.decodeWav(buf);
    },
  };
});

let gw: TestGateway;
let openai: OpenAI;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfigWith({
      models: [
        { name: "mock-stt", provider: "mock", modality: "transcription", price_per_unit: 10 },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 20_000 });
});
afterAll(async () => {
  await gw?.close();
});
beforeEach(() => {
  decodes.count = 0;
});

describe("the mock's transcription", () => {
  it("decodes the uploaded audio once per request: the refusal check and the answer share it", async () => {
    const said = "One decode is enough.";
    const result = await openai.audio.transcriptions.create({
      model: "mock-stt",
      file: await toFile(mockSpeech(said), "speech.wav", { type: "audio/wav" }),
    });
    expect(result.text).toBe(said);
    expect(decodes.count).toBe(1);
  });
});
