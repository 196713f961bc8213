import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { defaultMaxTokensField } from "../src/server/wire/to-provider.js";
import { geminiJson } from "./support/fake-gemini.js";
import {
  anthropicJson,
  type FakeUpstream,
  type JsonReply,
  openaiJson,
} from "./support/fake-upstream.js";
import { useThreeWires } from "./support/three-wires.js";

/**
 * An adversarial client of cross-wire translation: what the newest SDKs send and read, through
 * each provider wire (fakes that refuse what the real APIs refuse), checked for what is lost.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 1000,
  geminiMax: 1000,
  extra: ({ oa }) => ({
    // As OpenAI's own API (and its reasoning models, which refuse max_tokens) wants it.
    providers: [
      {
        id: "oa-new",
        wire: "openai",
        base_url: oa.baseUrl,
        api_keys: ["sk-oa"],
        max_tokens_field: "max_completion_tokens",
      },
    ],
    models: [{ name: "h-openai-new", provider: "oa-new", upstream_model: "gpt-up" }],
  }),
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic } = wires);
  },
});

const PDF_URL = "https://example.com/reports/q3.pdf";
const pdfByUrl: Anthropic.MessageParam[] = [
  {
    role: "user",
    content: [
      { type: "document", source: { type: "url", url: PDF_URL }, title: "Q3 report" },
      { type: "text", text: "Summarise the report." },
    ],
  },
];

describe("a messages client's PDF given by URL (Anthropic's URLPDFSource)", () => {
  it("reaches Gemini as a fileData part for Google to fetch, not left out", async () => {
    gm.queue(geminiJson("The report says..."));
    await anthropic.messages.create({ model: "h-gemini", max_tokens: 100, messages: pdfByUrl });
    expect(gm.refused).toEqual([]);
    const parts = (gm.last.body.contents as { parts: Record<string, unknown>[] }[])[0].parts;
    expect(parts).toContainEqual({ fileData: { fileUri: PDF_URL, mimeType: "application/pdf" } });
  });

  it("is refused on an openai-wire model, which cannot fetch it, never answered without it", async () => {
    oa.queue(openaiJson("I see no report."));
    const err = await anthropic.messages
      .create({ model: "h-openai", max_tokens: 100, messages: pdfByUrl })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    // Nothing was sent that would have the model answer about a document it never saw.
    expect(oa.requests).toHaveLength(0);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  });
});

describe("reasoning token counts, mapped each way", () => {
  it("a messages client reads Gemini's thinking tokens in usage.output_tokens_details.thinking_tokens", async () => {
    gm.queue(geminiJson("42", { thought: "Let me think.", usage: [10, 4, 30] }));
    const message = await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 500,
      thinking: { type: "enabled", budget_tokens: 200 },
      messages: [{ role: "user", content: "Answer?" }],
    });
    expect(message.usage.output_tokens).toBe(34);
    expect(message.usage.output_tokens_details?.thinking_tokens).toBe(30);
  });

  it("a messages client reads an OpenAI model's reasoning_tokens as thinking_tokens", async () => {
    const reply = openaiJson("42", { usage: [10, 50] }) as JsonReply;
    const body = reply.body as { usage: Record<string, unknown> };
    body.usage.completion_tokens_details = { reasoning_tokens: 45 };
    oa.queue(reply);
    const message = await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 500,
      messages: [{ role: "user", content: "Answer?" }],
    });
    expect(message.usage.output_tokens).toBe(50);
    expect(message.usage.output_tokens_details?.thinking_tokens).toBe(45);
  });

  it("chat and responses clients read Anthropic's thinking_tokens as reasoning_tokens", async () => {
    const withThinkingTokens = () => {
      const reply = anthropicJson("42", {
        usage: [10, 50],
        thinking: { text: "Let me think.", signature: "sig" },
      }) as JsonReply;
      const body = reply.body as { usage: Record<string, unknown> };
      body.usage.output_tokens_details = { thinking_tokens: 45 };
      return reply;
    };
    an.queue(withThinkingTokens());
    const completion = await openai.chat.completions.create({
      model: "h-anthropic",
      messages: [{ role: "user", content: "Answer?" }],
    });
    expect(completion.usage?.completion_tokens).toBe(50);
    expect(completion.usage?.completion_tokens_details?.reasoning_tokens).toBe(45);

    an.queue(withThinkingTokens());
    const response = await openai.responses.create({ model: "h-anthropic", input: "Answer?" });
    expect(response.usage?.output_tokens).toBe(50);
    expect(response.usage?.output_tokens_details.reasoning_tokens).toBe(45);
  });
});

describe("the output limit a messages or Responses client sets, toward an openai-wire model", () => {
  const limitFields = () => ({
    max_tokens: oa.last.body.max_tokens,
    max_completion_tokens: oa.last.body.max_completion_tokens,
  });

  it("goes as max_completion_tokens where the provider says so (OpenAI's reasoning models refuse max_tokens)", async () => {
    oa.reset(() => openaiJson("ok"));
    await anthropic.messages.create({
      model: "h-openai-new",
      max_tokens: 300,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(limitFields()).toEqual({ max_tokens: undefined, max_completion_tokens: 300 });
    await openai.responses.create({ model: "h-openai-new", input: "hi", max_output_tokens: 200 });
    expect(limitFields()).toEqual({ max_tokens: undefined, max_completion_tokens: 200 });
  });

  it("goes as max_tokens to another OpenAI-compatible server, which may know only that", async () => {
    oa.reset(() => openaiJson("ok"));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 300,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(limitFields()).toEqual({ max_tokens: 300, max_completion_tokens: undefined });
  });

  it("is max_completion_tokens by default for OpenAI's own API only", () => {
    expect(defaultMaxTokensField("https://api.openai.com/v1")).toBe("max_completion_tokens");
    expect(defaultMaxTokensField("http://127.0.0.1:8000/v1")).toBe("max_tokens");
    expect(defaultMaxTokensField(null)).toBe("max_tokens");
  });
});
