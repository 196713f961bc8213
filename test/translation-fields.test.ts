import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * Request fields and content types the newest SDKs send (openai 7.57, @anthropic-ai/sdk 1.14),
 * through a model of another wire: each is translated, or refused with a 400 naming it before
 * anything is sent, never dropped where dropping changes the answer.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 32000,
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;
const messagesSent = (upstream: FakeUpstream) => upstream.last.body.messages as Json[];

describe("chat's reasoning_effort levels above high (openai SDK's ReasoningEffort: xhigh, max)", () => {
  it("xhigh and max turn on Anthropic's extended thinking, as high does", async () => {
    for (const effort of ["high", "xhigh", "max"] as const) {
      an.queue(anthropicJson("ok"));
      await openai.chat.completions.create({
        model: "h-anthropic",
        max_completion_tokens: 20_000,
        reasoning_effort: effort,
        messages: [{ role: "user", content: "Prove it." }],
      });
      expect(an.last.body.thinking, effort).toEqual({ type: "enabled", budget_tokens: 16_000 });
    }
    expect(an.refused).toEqual([]);
  });

  it("a Responses client's reasoning.effort xhigh thinks on an anthropic-wire model", async () => {
    an.queue(anthropicJson("ok"));
    await openai.responses.create({
      model: "h-anthropic",
      max_output_tokens: 20_000,
      reasoning: { effort: "xhigh" },
      input: "Prove it.",
    });
    expect(an.last.body.thinking).toMatchObject({ type: "enabled" });
  });

  it("max reaches Gemini as a thinking budget above xhigh's, not Gemini's default", async () => {
    gm.queue(geminiJson("ok"));
    await openai.chat.completions.create({
      model: "h-gemini",
      reasoning_effort: "max",
      messages: [{ role: "user", content: "Prove it." }],
    });
    const config = gm.last.body.generationConfig as { thinkingConfig?: { thinkingBudget: number } };
    expect(config.thinkingConfig?.thinkingBudget).toBeGreaterThan(8192);
  });
});

describe("a chat file part Anthropic cannot be given", () => {
  it("is refused with a 400 naming the file part, by file_id or of an unreadable type, never dropped", async () => {
    const files = [
      { file_id: "file-abc123" },
      {
        file_data:
          "data:application/vnd.openxmlformats-officedocument.wordprocessingml.document;base64,UEsDBA==",
        filename: "contract.docx",
      },
    ];
    for (const file of files) {
      const err = await outcomeOf(
        openai.chat.completions.create({
          model: "h-anthropic",
          messages: [
            {
              role: "user",
              content: [
                { type: "file", file },
                { type: "text", text: "Summarise the file." },
              ],
            },
          ],
        }),
      );
      expect(err.status, JSON.stringify(file)).toBe(400);
      expect(err.message).toMatch(/file/);
    }
    expect(an.requests).toHaveLength(0);
  });
});

describe("chat's deprecated functions (still in the openai SDK's ChatCompletionCreateParams)", () => {
  it("are refused with a 400 naming `functions` toward anthropic- and gemini-wire models, never dropped", async () => {
    for (const model of ["h-anthropic", "h-gemini"]) {
      const err = await outcomeOf(
        openai.chat.completions.create({
          model,
          functions: [
            {
              name: "get_weather",
              parameters: { type: "object", properties: { city: { type: "string" } } },
            },
          ],
          function_call: { name: "get_weather" },
          messages: [{ role: "user", content: "Weather in Jakarta?" }],
        }),
      );
      expect(err.status, model).toBe(400);
      expect(err.message).toMatch(/functions/);
    }
    expect(an.requests).toHaveLength(0);
    expect(gm.requests).toHaveLength(0);
  });
});

describe("chat's web_search_options toward a gemini-wire model", () => {
  it("is left out and named in x-gateway-tools-omitted, as a Responses web_search is", async () => {
    gm.queue(geminiJson("Nothing found."));
    const { response } = await openai.chat.completions
      .create({
        model: "h-gemini",
        web_search_options: {},
        messages: [{ role: "user", content: "Today's news?" }],
      })
      .withResponse();
    expect(response.headers.get("x-gateway-tools-omitted")).toBe("web_search");
  });
});

describe("what Gemini's translation does not carry, from a chat client", () => {
  it("logprobs are refused with a 400, not answered with logprobs: null", async () => {
    const err = await outcomeOf(
      openai.chat.completions.create({
        model: "h-gemini",
        logprobs: true,
        top_logprobs: 2,
        messages: [{ role: "user", content: "Hi" }],
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/logprobs/);
    expect(gm.requests).toHaveLength(0);
  });

  it("audio output is refused with a 400, not answered with text only", async () => {
    const err = await outcomeOf(
      openai.chat.completions.create({
        model: "h-gemini",
        modalities: ["text", "audio"],
        audio: { voice: "alloy", format: "wav" },
        messages: [{ role: "user", content: "Say hi" }],
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/[Aa]udio/);
    expect(gm.requests).toHaveLength(0);
  });
});

describe("Anthropic content blocks toward an openai-wire model", () => {
  it("a document whose source is content blocks (ContentBlockSource) reaches the model as its text", async () => {
    oa.queue(openaiJson("42"));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      messages: [
        {
          role: "user",
          content: [
            {
              type: "document",
              source: { type: "content", content: [{ type: "text", text: "The code is 42." }] },
              title: "Memo",
            },
            { type: "text", text: "What is the code?" },
          ],
        },
      ],
    });
    expect(JSON.stringify(messagesSent(oa))).toContain("The code is 42.");
  });

  it("search_result blocks, in the turn and in a tool_result, reach the model as text", async () => {
    oa.queue(openaiJson("Five days."));
    const result = {
      type: "search_result" as const,
      source: "https://kb.example/refunds",
      title: "Refund policy",
      content: [{ type: "text" as const, text: "Refunds take 5 days." }],
    };
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      tools: [
        { name: "kb", input_schema: { type: "object", properties: { q: { type: "string" } } } },
      ],
      messages: [
        { role: "user", content: [result, { type: "text", text: "And refunds?" }] },
        {
          role: "assistant",
          content: [{ type: "tool_use", id: "toolu_1", name: "kb", input: { q: "refunds" } }],
        },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [result] }],
        },
      ],
    });
    const sent = messagesSent(oa);
    expect(JSON.stringify(sent[0])).toContain("Refunds take 5 days.");
    const tool = sent.find((m) => m.role === "tool");
    expect(tool?.content).toContain("Refunds take 5 days.");
    expect(oa.refused).toEqual([]);
  });

  it("an image or document given by file_id (Files API source) is refused with a 400, never dropped", async () => {
    for (const block of [
      { type: "document" as const, source: { type: "file" as const, file_id: "file_011" } },
      { type: "image" as const, source: { type: "file" as const, file_id: "file_012" } },
    ]) {
      const err = await outcomeOf(
        anthropic.messages.create({
          model: "h-openai",
          max_tokens: 100,
          messages: [{ role: "user", content: [block, { type: "text", text: "Describe it." }] }],
        }),
      );
      expect(err.status, block.type).toBe(400);
      expect(err.message).toMatch(/file_id/);
    }
    expect(oa.requests).toHaveLength(0);
  });
});

describe("Responses input items the bridge to chat must not drop", () => {
  it("an additional_tools item's tools are declared to the chat backend", async () => {
    oa.queue(openaiJson("ok"));
    await openai.responses.create({
      model: "h-openai",
      input: [
        { role: "user", content: "Hi" },
        {
          type: "additional_tools",
          role: "developer",
          tools: [
            {
              type: "function",
              name: "lookup_order",
              parameters: { type: "object", properties: { id: { type: "string" } } },
              strict: false,
            },
          ],
        },
        { role: "user", content: "Where is order 7?" },
      ],
    });
    const tools = oa.last.body.tools as { function: { name: string } }[] | undefined;
    expect(tools?.map((t) => t.function.name)).toEqual(["lookup_order"]);
  });

  it("a configuration_update item's text.format reaches the chat backend as response_format", async () => {
    oa.queue(openaiJson('{"city":"Jakarta"}'));
    const schema = {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    };
    await openai.responses.create({
      model: "h-openai",
      input: [
        { role: "user", content: "Where is Monas?" },
        {
          type: "configuration_update",
          text: { format: { type: "json_schema", name: "place", schema, strict: true } },
        },
      ],
    });
    expect(oa.last.body.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "place", schema, strict: true },
    });
  });

  it("a compaction_trigger item that is not the final input item is refused with a 400, not answered as an ordinary turn", async () => {
    const err = await outcomeOf(
      openai.responses.create({
        model: "h-openai",
        input: [{ type: "compaction_trigger" }, { role: "user", content: "Hi" }],
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/compaction_trigger/);
    expect(oa.requests).toHaveLength(0);
  });
});

describe("moderated completions (`moderation`) where the body is rewritten", () => {
  it("a Responses request through the bridge is refused with a 400 naming `moderation`", async () => {
    const err = await outcomeOf(
      openai.responses.create({
        model: "h-openai",
        moderation: { model: "omni-moderation-latest", policy: { input: { mode: "block" } } },
        input: "Hi",
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/moderation/);
    expect(oa.requests).toHaveLength(0);
  });

  it("a chat request toward an anthropic-wire model is refused with a 400 naming `moderation`", async () => {
    const err = await outcomeOf(
      openai.chat.completions.create({
        model: "h-anthropic",
        moderation: { model: "omni-moderation-latest" },
        messages: [{ role: "user", content: "Hi" }],
      } as OpenAI.ChatCompletionCreateParamsNonStreaming),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/moderation/);
    expect(an.requests).toHaveLength(0);
  });
});
