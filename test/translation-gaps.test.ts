import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * Request fields of the newest SDKs (openai 7.57, @anthropic-ai/sdk 1.14) that a translation to
 * another wire used to drop or weaken without a word: each is carried to the backend's
 * equivalent, or refused with a 400 in the client's style naming it, nothing sent. The fakes
 * refuse what the real APIs refuse (OpenAI's four stop sequences and strict-schema rules,
 * Gemini's five stop sequences).
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 4000,
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;
const user = (content: string) => [{ role: "user" as const, content }];

describe("a messages tool_result with is_error toward a gemini-wire model", () => {
  it("reaches Gemini as a functionResponse under `error`, beside a good result under `output`", async () => {
    await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 100,
      tools: [
        {
          name: "read_file",
          input_schema: { type: "object", properties: { path: { type: "string" } } },
        },
      ],
      messages: [
        { role: "user", content: "Read a.txt and b.txt." },
        {
          role: "assistant",
          content: [
            { type: "tool_use", id: "toolu_a", name: "read_file", input: { path: "a.txt" } },
            { type: "tool_use", id: "toolu_b", name: "read_file", input: { path: "b.txt" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_a", content: "alpha" },
            {
              type: "tool_result",
              tool_use_id: "toolu_b",
              content: [{ type: "text", text: "ENOENT: no such file" }],
              is_error: true,
            },
          ],
        },
      ],
    });
    expect(gm.refused).toEqual([]);
    const contents = gm.last.body.contents as { role: string; parts: Json[] }[];
    expect(contents.at(-1)?.parts).toEqual([
      { functionResponse: { name: "read_file", response: { output: "alpha" } } },
      { functionResponse: { name: "read_file", response: { error: "ENOENT: no such file" } } },
    ]);
  });
});

describe("more stop sequences than the backend's API takes", () => {
  const stops = (n: number) => Array.from({ length: n }, (_, i) => `END${i}`);

  it("a messages client's fifth stop_sequence toward an openai-wire model is a 400 naming the field and OpenAI's 4", async () => {
    const err = await outcomeOf(
      anthropic.messages.create({
        model: "h-openai",
        max_tokens: 100,
        stop_sequences: stops(5),
        messages: user("Count."),
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/`stop_sequences`.*at most 4/);
    expect(oa.requests).toHaveLength(0);
  });

  it("four stop_sequences reach the openai wire as chat's stop, all of them", async () => {
    oa.queue(openaiJson("1 2 3"));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      stop_sequences: stops(4),
      messages: user("Count."),
    });
    expect(oa.last.body.stop).toEqual(stops(4));
  });

  it("toward Gemini the sixth is a 400 naming the client's field (stop_sequences, or chat's stop) and Gemini's 5", async () => {
    const messages = await outcomeOf(
      anthropic.messages.create({
        model: "h-gemini",
        max_tokens: 100,
        stop_sequences: stops(6),
        messages: user("Count."),
      }),
    );
    expect(messages.status).toBe(400);
    expect(messages.message).toMatch(/`stop_sequences`.*at most 5/);
    const chat = await outcomeOf(
      openai.chat.completions.create({
        model: "h-gemini",
        stop: stops(6),
        messages: user("Count."),
      }),
    );
    expect(chat.status).toBe(400);
    expect(chat.message).toMatch(/`stop`.*at most 5/);
    expect(gm.requests).toHaveLength(0);
  });

  it("five reach Gemini as stopSequences", async () => {
    gm.queue(geminiJson("1 2 3"));
    await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 100,
      stop_sequences: stops(5),
      messages: user("Count."),
    });
    expect((gm.last.body.generationConfig as Json).stopSequences).toEqual(stops(5));
  });
});

describe("Anthropic's structured outputs (always strict) toward an openai-wire model", () => {
  const closed = {
    type: "object" as const,
    properties: {
      city: { type: "string" },
      population: { type: "integer" },
      districts: {
        type: "array",
        items: {
          type: "object",
          properties: { name: { type: "string" } },
          required: ["name"],
          additionalProperties: false,
        },
      },
    },
    required: ["city", "population", "districts"],
    additionalProperties: false,
  };

  it("output_config.format reaches response_format with strict: true where OpenAI's strict rules hold", async () => {
    oa.queue(openaiJson('{"city":"Jakarta","population":10000000,"districts":[]}'));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      output_config: { format: { type: "json_schema", schema: closed } },
      messages: user("Describe Jakarta."),
    });
    expect(oa.refused).toEqual([]);
    expect(oa.last.body.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "output", schema: closed, strict: true },
    });
  });

  it("a schema strict mode cannot carry even with its optional properties nullable (an object open to others) goes non-strict and is answered", async () => {
    const open = { ...closed, required: ["city"], additionalProperties: true };
    oa.queue(openaiJson('{"city":"Jakarta"}'));
    const message = await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      output_config: { format: { type: "json_schema", schema: open } },
      messages: user("Describe Jakarta."),
    });
    expect(oa.refused).toEqual([]);
    expect(message.content).toEqual([
      { type: "text", text: '{"city":"Jakarta"}', citations: null },
    ]);
    const format = oa.last.body.response_format as { json_schema: Json };
    expect(format.json_schema.strict).toBeUndefined();
  });

  it("a strict tool reaches chat as a strict function", async () => {
    oa.queue(openaiJson("ok"));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      tools: [{ name: "city_facts", strict: true, input_schema: closed }],
      messages: user("Facts about Jakarta?"),
    });
    expect(oa.refused).toEqual([]);
    const tools = oa.last.body.tools as { function: Json }[];
    expect(tools[0].function).toMatchObject({ name: "city_facts", strict: true });
  });
});

describe("chat sampling controls Anthropic (and Gemini) have no form for", () => {
  it("logit_bias is refused with a 400 naming it toward anthropic- and gemini-wire models, nothing sent", async () => {
    for (const model of ["h-anthropic", "h-gemini"]) {
      const err = await outcomeOf(
        openai.chat.completions.create({
          model,
          logit_bias: { "50256": -100 },
          messages: user("Hi"),
        }),
      );
      expect(err.status, model).toBe(400);
      expect(err.message, model).toMatch(/logit_bias/);
    }
    expect(an.requests).toHaveLength(0);
    expect(gm.requests).toHaveLength(0);
  });

  it("an empty logit_bias and penalties of 0 ask for nothing and are answered", async () => {
    an.queue(anthropicJson("Hello"));
    const answer = await openai.chat.completions.create({
      model: "h-anthropic",
      logit_bias: {},
      presence_penalty: 0,
      frequency_penalty: 0,
      messages: user("Hi"),
    });
    expect(answer.choices[0].message.content).toBe("Hello");
  });

  it("a presence or frequency penalty toward an anthropic-wire model is a 400 naming it", async () => {
    for (const field of ["presence_penalty", "frequency_penalty"] as const) {
      const err = await outcomeOf(
        openai.chat.completions.create({
          model: "h-anthropic",
          [field]: 0.8,
          messages: user("Hi"),
        }),
      );
      expect(err.status, field).toBe(400);
      expect(err.message).toContain(field);
    }
    expect(an.requests).toHaveLength(0);
  });
});

describe("a Responses client's reasoning.summary without an effort, toward a gemini-wire model", () => {
  it("asks Gemini for its thoughts and returns them as the reasoning summary", async () => {
    // As Google's API: thought parts only when includeThoughts asks for them.
    gm.handle((req) => {
      const config = req.body.generationConfig as { thinkingConfig?: Json } | undefined;
      const asked = config?.thinkingConfig?.includeThoughts === true;
      return geminiJson("Paris.", asked ? { thought: "France's capital is Paris." } : {});
    });
    const response = await openai.responses.create({
      model: "h-gemini",
      reasoning: { summary: "auto" },
      input: "Capital of France?",
    });
    const reasoning = response.output.find((item) => item.type === "reasoning");
    expect(reasoning?.summary).toEqual([
      { type: "summary_text", text: "France's capital is Paris." },
    ]);
    expect(response.output_text).toBe("Paris.");
  });
});

describe("prompt_cache_options on the Responses bridge", () => {
  it("prewarm (prepare the cache, generate nothing) is a 400 naming it on every bridged wire, nothing sent", async () => {
    for (const model of ["h-openai", "h-anthropic", "h-gemini"]) {
      const err = await outcomeOf(
        openai.responses.create({
          model,
          prompt_cache_options: { prewarm: true },
          input: "A long shared prefix.",
        }),
      );
      expect(err.status, model).toBe(400);
      expect(err.message, model).toMatch(/prompt_cache_options\.prewarm/);
    }
    for (const upstream of [oa, an, gm]) expect(upstream.requests).toHaveLength(0);
  });

  it("its mode and ttl reach an openai-wire model under chat's prompt_cache_options", async () => {
    oa.queue(openaiJson("ok"));
    await openai.responses.create({
      model: "h-openai",
      prompt_cache_options: { mode: "explicit", ttl: "30m" },
      input: "Hi",
    });
    expect(oa.last.body.prompt_cache_options).toEqual({ mode: "explicit", ttl: "30m" });
  });
});

describe("messages fields only Anthropic's API can honour", () => {
  it("inference_geo toward another wire is a 400 naming it; toward an anthropic-wire model it passes as written", async () => {
    for (const model of ["h-openai", "h-gemini"]) {
      const err = await outcomeOf(
        anthropic.messages.create({
          model,
          max_tokens: 100,
          inference_geo: "us",
          messages: user("Hi"),
        }),
      );
      expect(err.status, model).toBe(400);
      expect(err.message, model).toMatch(/inference_geo/);
    }
    expect(oa.requests).toHaveLength(0);
    expect(gm.requests).toHaveLength(0);
    await anthropic.messages.create({
      model: "h-anthropic",
      max_tokens: 100,
      inference_geo: "us",
      messages: user("Hi"),
    });
    expect(an.last.body.inference_geo).toBe("us");
  });

  it("mcp_servers (the MCP connector, run by Anthropic) are left out and named in x-gateway-tools-omitted", async () => {
    oa.queue(openaiJson("I have no tools."));
    const { response } = await anthropic.beta.messages
      .create({
        model: "h-openai",
        max_tokens: 100,
        betas: ["mcp-client-2025-04-04"],
        mcp_servers: [{ type: "url", url: "https://mcp.example/sse", name: "example" }],
        messages: user("Search the wiki."),
      })
      .withResponse();
    expect(response.headers.get("x-gateway-tools-omitted")).toBe("mcp_servers");
  });
});
