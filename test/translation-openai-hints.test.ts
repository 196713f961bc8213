import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiError, geminiJson } from "./support/fake-gemini.js";
import {
  anthropicError,
  anthropicJson,
  anthropicStreamSteps,
  type FakeUpstream,
  openaiJson,
} from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * OpenAI request fields with no twin of the same name on Anthropic's or Gemini's API, through a
 * model of that wire: each is carried where the wire has an equivalent (Anthropic's service tiers,
 * Gemini's seed and each family's thinking budgets), refused with a 400 naming the client's field
 * where leaving it out would change the answer, or left out where it is only a hint (docs/http-api.md
 * lists them). The fakes refuse what the real APIs refuse: OpenAI's fields and tiers on Anthropic's
 * Messages API, and a thinking budget outside the model family's range on Gemini's.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 32_000,
  extra: () => ({
    models: [
      { name: "g-pro", provider: "gm", upstream_model: "gemini-2.5-pro" },
      { name: "g-flash", provider: "gm", upstream_model: "gemini-2.5-flash" },
      { name: "g-lite", provider: "gm", upstream_model: "gemini-2.5-flash-lite" },
      { name: "g3-pro", provider: "gm", upstream_model: "gemini-3-pro-preview" },
      { name: "g31-pro", provider: "gm", upstream_model: "gemini-3.1-pro-preview" },
      { name: "g3-flash", provider: "gm", upstream_model: "gemini-3-flash-preview" },
    ],
  }),
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;
const user = (content: string) => [{ role: "user" as const, content }];
const generationConfig = () => gm.last.body.generationConfig as Json;

describe("OpenAI's service_tier toward an anthropic-wire model", () => {
  it("reaches Anthropic as its own tier: auto, priority, fast and scale as auto; default and flex as standard_only", async () => {
    const tiers = {
      auto: "auto",
      priority: "auto",
      fast: "auto",
      scale: "auto",
      default: "standard_only",
      flex: "standard_only",
    } as const;
    for (const [tier, anthropicTier] of Object.entries(tiers)) {
      an.queue(anthropicJson("ok"));
      await openai.chat.completions.create({
        model: "h-anthropic",
        service_tier: tier as keyof typeof tiers,
        messages: user("Hi"),
      });
      expect(an.last.body.service_tier, tier).toBe(anthropicTier);
    }
    an.queue(anthropicJson("ok"));
    await openai.responses.create({ model: "h-anthropic", service_tier: "flex", input: "Hi" });
    expect(an.last.body.service_tier).toBe("standard_only");
    expect(an.refused).toEqual([]);
  });

  it("the tier Anthropic served (usage.service_tier) comes back as OpenAI names it: standard as default, priority as priority", async () => {
    for (const [anthropicTier, tier] of [
      ["standard", "default"],
      ["priority", "priority"],
    ] as const) {
      an.queue(anthropicJson("ok", { serviceTier: anthropicTier }));
      const chat = await openai.chat.completions.create({
        model: "h-anthropic",
        service_tier: "auto",
        messages: user("Hi"),
      });
      expect(chat.service_tier, anthropicTier).toBe(tier);

      an.queue({
        kind: "sse",
        steps: anthropicStreamSteps(["o", "k"], { serviceTier: anthropicTier }),
      });
      const chunks = await openai.chat.completions.create({
        model: "h-anthropic",
        messages: user("Hi"),
        stream: true,
      });
      const tiers = new Set<unknown>();
      for await (const chunk of chunks) tiers.add(chunk.service_tier);
      expect([...tiers], anthropicTier).toEqual([tier]);

      an.queue(anthropicJson("ok", { serviceTier: anthropicTier }));
      const response = await openai.responses.create({ model: "h-anthropic", input: "Hi" });
      expect(response.service_tier, anthropicTier).toBe(tier);

      an.queue({
        kind: "sse",
        steps: anthropicStreamSteps(["o", "k"], { serviceTier: anthropicTier }),
      });
      const stream = openai.responses.stream({ model: "h-anthropic", input: "Hi" });
      for await (const _ of stream);
      expect((await stream.finalResponse()).service_tier, anthropicTier).toBe(tier);
    }
    expect(an.refused).toEqual([]);
  });
});

describe("sampling hints Anthropic or Gemini have no form for", () => {
  it("seed reaches Gemini as generationConfig.seed; toward Anthropic it is left out and answered", async () => {
    gm.queue(geminiJson("ok"));
    await openai.chat.completions.create({ model: "h-gemini", seed: 42, messages: user("Hi") });
    expect(generationConfig().seed).toBe(42);
    an.queue(anthropicJson("ok"));
    const answer = await openai.chat.completions.create({
      model: "h-anthropic",
      seed: 42,
      messages: user("Hi"),
    });
    expect(answer.choices[0].message.content).toBe("ok");
    expect(an.refused).toEqual([]);
  });

  it("prediction (Predicted Outputs) toward either, and service_tier toward Gemini, are left out and answered", async () => {
    for (const model of ["h-anthropic", "h-gemini"]) {
      an.queue(anthropicJson("const x = 2;"));
      gm.queue(geminiJson("const x = 2;"));
      const answer = await openai.chat.completions.create({
        model,
        prediction: { type: "content", content: "const x = 1;" },
        service_tier: "priority",
        messages: user("Set x to 2."),
      });
      expect(answer.choices[0].message.content, model).toBe("const x = 2;");
    }
    expect(an.refused).toEqual([]);
    expect(gm.refused).toEqual([]);
  });

  it("verbosity, a hint toward a length, is left out and answered (chat's verbosity, Responses' text.verbosity)", async () => {
    for (const verbosity of ["low", "medium", "high"] as const) {
      an.queue(anthropicJson("ok"));
      gm.queue(geminiJson("ok"));
      an.queue(anthropicJson("ok"));
      gm.queue(geminiJson("ok"));
      for (const model of ["h-anthropic", "h-gemini"]) {
        const chat = await openai.chat.completions.create({
          model,
          verbosity,
          messages: user("Hi"),
        });
        expect(chat.choices[0].message.content, model).toBe("ok");
        const responses = await openai.responses.create({
          model,
          text: { verbosity },
          input: "Hi",
        });
        expect(responses.output_text, model).toBe("ok");
      }
    }
    // The fakes refuse a field their API does not take: none reached them.
    expect(an.refused).toEqual([]);
    expect(gm.refused).toEqual([]);
  });
});

describe("what Codex sends on every Responses request, toward anthropic- and gemini-wire models", () => {
  it("prompt_cache_key, prompt_cache_retention, include reasoning.encrypted_content and store: false are answered, none reaching the provider", async () => {
    for (const model of ["h-anthropic", "h-gemini"]) {
      an.queue(anthropicJson("Done."));
      gm.queue(geminiJson("Done."));
      const response = await openai.responses.create({
        model,
        instructions: "You are a coding agent.",
        input: [{ role: "user", content: "List the files." }],
        prompt_cache_key: "0199-session",
        prompt_cache_retention: "24h",
        include: ["reasoning.encrypted_content"],
        reasoning: { effort: "medium", summary: "auto" },
        store: false,
        parallel_tool_calls: false,
      });
      expect(response.output_text, model).toBe("Done.");
    }
    expect(an.refused).toEqual([]);
    expect(gm.refused).toEqual([]);
    expect(JSON.stringify(gm.last.body)).not.toMatch(/0199-session|24h|encrypted/);
  });

  it("an include value outside the Responses API's list is a 400 naming it, nothing sent; every listed one is answered", async () => {
    // Typed by the SDK: a value it adds, or one this list lacks, fails to compile.
    const listed: Record<OpenAI.Responses.ResponseIncludable, true> = {
      "file_search_call.results": true,
      "web_search_call.results": true,
      "web_search_call.action.sources": true,
      "message.input_image.image_url": true,
      "computer_call_output.output.image_url": true,
      "code_interpreter_call.outputs": true,
      "reasoning.encrypted_content": true,
      "message.output_text.logprobs": true,
    };
    const include = Object.keys(listed) as OpenAI.Responses.ResponseIncludable[];
    oa.queue(openaiJson("ok"));
    const answered = await openai.responses.create({ model: "h-openai", include, input: "Hi" });
    expect(answered.output_text).toBe("ok");
    for (const model of ["h-openai", "h-anthropic", "h-gemini"]) {
      const err = (await outcomeOf(
        openai.responses.create({
          model,
          include: [
            "reasoning.encrypted_content",
            "output_text.logprobs" as OpenAI.Responses.ResponseIncludable,
          ],
          input: "Hi",
        }),
      )) as { status?: number; message: string; code?: string };
      expect(err.status, model).toBe(400);
      expect(err.code, model).toBe("bad_request");
      expect(err.message, model).toMatch(/`include`: 'output_text\.logprobs'\./);
      expect(err.message, model).not.toMatch(/'reasoning\.encrypted_content'\. Supported/);
    }
    expect(oa.requests).toHaveLength(1);
    expect(an.requests).toHaveLength(0);
    expect(gm.requests).toHaveLength(0);
  });
});

describe("Responses truncation and context_management on the bridge", () => {
  const anthropicOverflow = () =>
    anthropicError(
      400,
      "invalid_request_error",
      "prompt is too long: 215000 tokens > 200000 maximum",
    );
  const geminiOverflow = () =>
    geminiError(
      400,
      "INVALID_ARGUMENT",
      "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    );

  it("an input within the window is answered as asked, truncation echoed", async () => {
    an.queue(anthropicJson("ok"));
    const response = await openai.responses.create({
      model: "h-anthropic",
      truncation: "auto",
      context_management: [{ type: "compaction", compact_threshold: 100_000 }],
      input: "Hi",
    });
    expect(response.output_text).toBe("ok");
    expect(response.truncation).toBe("auto");
    expect(an.refused).toEqual([]);
  });

  it("context_management compaction past its compact_threshold toward an anthropic-wire model: the gateway summarizes the conversation first (nothing of Anthropic's own compaction is asked), the model answers from the summary, and a compaction item comes back before the answer", async () => {
    // About 4,000 tokens of earlier turns, past a threshold of 1,000.
    const long = "The harbour log for the day, line by line. ".repeat(90);
    const input = [
      { role: "user" as const, content: `Read this. ${long}` },
      { role: "assistant" as const, content: `Read. ${long}` },
      { role: "user" as const, content: `And this. ${long}` },
      { role: "assistant" as const, content: "Read that too." },
      { role: "user" as const, content: "What was the first line?" },
    ];
    for (const stream of [false, true]) {
      an.queue(anthropicJson("SUMMARY: a harbour log was read."));
      an.queue(
        stream
          ? { kind: "sse", steps: anthropicStreamSteps(["The harbour log."]) }
          : anthropicJson("The harbour log."),
      );
      const ask = {
        model: "h-anthropic",
        context_management: [{ type: "compaction", compact_threshold: 1_000 }],
        input,
      };
      const calls = an.requests.length;
      let output: OpenAI.Responses.ResponseOutputItem[] = [];
      if (stream) {
        for await (const event of await openai.responses.create({ ...ask, stream: true }))
          if (event.type === "response.completed") output = event.response.output;
      } else output = (await openai.responses.create(ask)).output;
      expect(an.refused, `stream ${stream}`).toEqual([]);
      const [summarizing, answering] = an.requests.slice(calls);
      for (const sent of [summarizing, answering]) {
        expect(sent.body).not.toHaveProperty("context_management");
        expect(String(sent.headers["anthropic-beta"] ?? "")).not.toMatch(
          /compact|context-management/,
        );
      }
      expect(JSON.stringify(summarizing.body.messages)).toContain(`Read this. ${long}`);
      const answered = JSON.stringify(answering.body.messages);
      expect(answered).toContain("SUMMARY: a harbour log was read.");
      expect(answered).toContain("What was the first line?");
      expect(answered).not.toContain(long);
      expect(output.map((item) => item.type)).toEqual(["compaction", "message"]);
    }
  });

  it("an input the backend refuses as over its window is a 400 context_length_exceeded naming truncation auto or context_management", async () => {
    const asks = [
      { ask: { truncation: "auto" as const }, named: /`truncation: "auto"`/ },
      {
        ask: { context_management: [{ type: "compaction" as const, compact_threshold: 100_000 }] },
        named: /`context_management`/,
      },
    ];
    for (const [model, upstream, overflow] of [
      ["h-anthropic", an, anthropicOverflow],
      ["h-gemini", gm, geminiOverflow],
    ] as const) {
      for (const { ask, named } of asks) {
        upstream.queue(overflow());
        const err = (await outcomeOf(
          openai.responses.create({ model, input: "A very long conversation.", ...ask }),
        )) as { status?: number; message: string; code?: string };
        expect(err.status, model).toBe(400);
        expect(err.code, model).toBe("context_length_exceeded");
        expect(err.message, model).toMatch(named);
        expect(err.message, model).toMatch(/maximum context window/);
      }
    }
    // Streamed: refused before the stream's 200, the same answer.
    gm.queue(geminiOverflow());
    const streamed = (await outcomeOf(
      (async () => {
        const events = await openai.responses.create({
          model: "h-gemini",
          stream: true,
          truncation: "auto",
          input: "A very long conversation.",
        });
        for await (const _ of events);
      })(),
    )) as { status?: number; message: string; code?: string };
    expect(streamed.status).toBe(400);
    expect(streamed.code).toBe("context_length_exceeded");
    expect(streamed.message).toMatch(/`truncation: "auto"`/);
  });

  it("with truncation disabled (every backend's own way) the overflow is the plain context_length_exceeded", async () => {
    an.queue(anthropicOverflow());
    const err = (await outcomeOf(
      openai.responses.create({ model: "h-anthropic", truncation: "disabled", input: "Long." }),
    )) as { status?: number; message: string; code?: string };
    expect(err.status).toBe(400);
    expect(err.code).toBe("context_length_exceeded");
    expect(err.message).toMatch(
      /The request exceeds the model's maximum context window\. Send a shorter conversation .*from GET \/v1\/models\.$/,
    );
  });
});

describe("Gemini thinking budgets, within each model family's range", () => {
  const thinking = () => generationConfig().thinkingConfig as Json | undefined;
  const chatWith = (model: string, effort: "none" | "minimal" | "max") =>
    openai.chat.completions.create({ model, reasoning_effort: effort, messages: user("Why?") });

  it("2.5 Pro, which cannot stop thinking: effort none thinks on its lowest budget (128) without showing thoughts", async () => {
    await chatWith("g-pro", "none");
    expect(thinking()).toEqual({ thinkingBudget: 128 });
    await chatWith("g-pro", "minimal");
    expect(thinking()).toEqual({ thinkingBudget: 128, includeThoughts: true });
    await anthropic.messages.create({
      model: "g-pro",
      max_tokens: 2000,
      thinking: { type: "disabled" },
      messages: user("Why?"),
    });
    expect(thinking()).toEqual({ thinkingBudget: 128 });
    expect(gm.refused).toEqual([]);
  });

  it("Flash-Lite: none turns thinking off; minimal is its lowest budget, 512", async () => {
    await chatWith("g-lite", "none");
    expect(thinking()).toEqual({ thinkingBudget: 0 });
    await chatWith("g-lite", "minimal");
    expect(thinking()).toEqual({ thinkingBudget: 512, includeThoughts: true });
    expect(gm.refused).toEqual([]);
  });

  it("an Anthropic budget above the family's top is brought down to it (Flash and Flash-Lite 24576, Pro 32768)", async () => {
    for (const [model, budget] of [
      ["g-flash", 24_576],
      ["g-lite", 24_576],
      ["g-pro", 30_000],
    ] as const) {
      await anthropic.messages.create({
        model,
        max_tokens: 32_000,
        thinking: { type: "enabled", budget_tokens: 30_000 },
        messages: user("Why?"),
      });
      expect(thinking(), model).toEqual({ thinkingBudget: budget, includeThoughts: true });
    }
    expect(gm.refused).toEqual([]);
  });

  it("the fake refuses what Google refuses: budget 0 on Pro, 128 on Flash-Lite, 30000 on Flash", async () => {
    for (const [model, budget] of [
      ["gemini-2.5-pro", 0],
      ["gemini-2.5-flash-lite", 128],
      ["gemini-2.5-flash", 30_000],
    ] as const) {
      const answer = await fetch(`${gm.url}/v1beta/models/${model}:generateContent`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-goog-api-key": "gm-key" },
        body: JSON.stringify({
          contents: [{ role: "user", parts: [{ text: "Why?" }] }],
          generationConfig: { thinkingConfig: { thinkingBudget: budget } },
        }),
      });
      expect(answer.status, model).toBe(400);
    }
  });
});

describe("Gemini 3 thinking levels", () => {
  const thinking = () => generationConfig().thinkingConfig as Json | undefined;
  type Effort = "none" | "minimal" | "low" | "medium" | "high" | "xhigh";

  it("reasoning effort reaches Gemini 3 as thinkingLevel, the family's lowest level at or above it; 2.5 keeps its budgets", async () => {
    const cases: [string, Effort, Json][] = [
      ["g3-pro", "minimal", { thinkingLevel: "low", includeThoughts: true }],
      ["g3-pro", "low", { thinkingLevel: "low", includeThoughts: true }],
      ["g3-pro", "medium", { thinkingLevel: "high", includeThoughts: true }],
      ["g3-pro", "xhigh", { thinkingLevel: "high", includeThoughts: true }],
      // 3 Pro cannot stop thinking: its lowest level, the thoughts not shown.
      ["g3-pro", "none", { thinkingLevel: "low" }],
      ["g31-pro", "minimal", { thinkingLevel: "low", includeThoughts: true }],
      ["g31-pro", "medium", { thinkingLevel: "medium", includeThoughts: true }],
      ["g3-flash", "minimal", { thinkingLevel: "minimal", includeThoughts: true }],
      ["g3-flash", "medium", { thinkingLevel: "medium", includeThoughts: true }],
      ["g3-flash", "high", { thinkingLevel: "high", includeThoughts: true }],
      ["g3-flash", "none", { thinkingLevel: "minimal" }],
      ["g-flash", "low", { thinkingBudget: 1024, includeThoughts: true }],
    ];
    for (const [model, effort, config] of cases) {
      gm.queue(geminiJson("ok"));
      await openai.chat.completions.create({
        model,
        reasoning_effort: effort,
        messages: user("Why?"),
      });
      expect(thinking(), `${model} ${effort}`).toEqual(config);
    }
    gm.queue(geminiJson("ok"));
    await openai.responses.create({
      model: "g3-pro",
      reasoning: { effort: "high" },
      input: "Why?",
    });
    expect(thinking()).toEqual({ thinkingLevel: "high", includeThoughts: true });
    // A summary asked with no effort: the model's own default level, its thoughts shown.
    gm.queue(geminiJson("ok"));
    await openai.responses.create({
      model: "g3-pro",
      reasoning: { summary: "auto" },
      input: "Why?",
    });
    expect(thinking()).toEqual({ includeThoughts: true });
    expect(gm.refused).toEqual([]);
  });

  it("Anthropic's thinking reaches Gemini 3 as a level: a budget by its effort, disabled as the lowest level, adaptive as the model's own unless an effort says", async () => {
    type Ask = Pick<Anthropic.MessageCreateParamsNonStreaming, "thinking" | "output_config">;
    const thoughts = (level: string) => ({ thinkingLevel: level, includeThoughts: true });
    const enabled = (budget: number): Ask => ({
      thinking: { type: "enabled", budget_tokens: budget },
    });
    const cases: [string, Ask, Json][] = [
      ["g3-pro", enabled(1024), thoughts("low")],
      ["g3-flash", enabled(1024), thoughts("minimal")],
      ["g3-flash", enabled(6000), thoughts("medium")],
      ["g3-pro", enabled(12_000), thoughts("high")],
      ["g3-flash", { thinking: { type: "disabled" } }, { thinkingLevel: "minimal" }],
      ["g3-pro", { thinking: { type: "adaptive" } }, { includeThoughts: true }],
      [
        "g3-pro",
        { thinking: { type: "adaptive" }, output_config: { effort: "low" } },
        thoughts("low"),
      ],
    ];
    for (const [model, ask, config] of cases) {
      gm.queue(geminiJson("ok"));
      await anthropic.messages.create({
        ...ask,
        model,
        max_tokens: 16_000,
        messages: user("Why?"),
      });
      expect(thinking(), `${model} ${JSON.stringify(ask)}`).toEqual(config);
    }
    expect(gm.refused).toEqual([]);
  });

  it("the fake refuses what Google refuses: a level on 2.5, medium on 3 Pro, minimal on 3.1 Pro, a level with a budget", async () => {
    for (const [model, thinkingConfig] of [
      ["gemini-2.5-flash", { thinkingLevel: "low" }],
      ["gemini-3-pro-preview", { thinkingLevel: "medium" }],
      ["gemini-3.1-pro-preview", { thinkingLevel: "minimal" }],
      ["gemini-3-flash-preview", { thinkingLevel: "low", thinkingBudget: 1024 }],
    ] as const) {
      const answer = await fetch(`${gm.url}/v1beta/models/${model}:generateContent`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-goog-api-key": "gm-key" },
        body: JSON.stringify({
          contents: [{ role: "user", parts: [{ text: "Why?" }] }],
          generationConfig: { thinkingConfig },
        }),
      });
      expect(answer.status, model).toBe(400);
    }
  });
});
