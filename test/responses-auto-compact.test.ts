import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  type RecordedRequest,
  type Reply,
} from "./support/fake-upstream.js";
import { backends, baseConfig, gatewayOn, KEY, type TestGateway } from "./support/gateway.js";

/**
 * Server-side compaction in a Responses turn (`context_management` with `compact_threshold`, a
 * `compaction_trigger` last in `input`) on the wires that are not a native Responses API: the
 * gateway summarizes the conversation first, the model answers with the summary in its place, and
 * the answer's output lists the sealed `compaction` item first, as OpenAI's does.
 */

const PRICE_IN = 10_000;
const PRICE_OUT = 20_000;
const prices = { price_input_per_mtok: PRICE_IN, price_output_per_mtok: PRICE_OUT };

const early = "EARLY-FACT: my cat is called Tom. ".repeat(20);
const conversation: OpenAI.Responses.ResponseInputItem[] = [
  { role: "user", content: early },
  { role: "assistant", content: "Noted." },
  { role: "user", content: "What is my cat called?" },
];
/** Far below the conversation's size: the turn compacts. */
const compactNow = [{ type: "compaction", compact_threshold: 20 }];
/** Far above it: nothing changes. */
const compactLater = [{ type: "compaction", compact_threshold: 1_000_000 }];

const summaryOf = (wire: string) => `SUMMARY-${wire}: the cat is Tom.`;
const answerOf = (wire: string) => `ANSWER-${wire}`;
const asksSummary = (req: RecordedRequest) =>
  JSON.stringify(req.body).includes("Summarize the conversation above");

function chatReply(req: RecordedRequest): Reply {
  if (asksSummary(req)) return openaiJson(summaryOf("chat"), { usage: [100, 10] });
  if (req.body.stream === true)
    return { kind: "sse", steps: openaiStreamSteps([answerOf("chat")], { usage: [30, 5] }) };
  return openaiJson(answerOf("chat"), { usage: [30, 5] });
}

function anthropicReply(req: RecordedRequest): Reply {
  if (asksSummary(req)) return anthropicJson(summaryOf("anthropic"));
  if (req.body.stream === true)
    return { kind: "sse", steps: anthropicStreamSteps([answerOf("anthropic")]) };
  return anthropicJson(answerOf("anthropic"));
}

type Event = Record<string, unknown> & { type: string };

describe.each(backends)("compaction inside a Responses turn on %s", (backend) => {
  let gw: TestGateway;
  let openai: OpenAI;
  let chatUp: FakeUpstream;
  let anthropicUp: FakeUpstream;

  beforeAll(async () => {
    chatUp = await fakeUpstream("openai", chatReply);
    anthropicUp = await fakeUpstream("anthropic", anthropicReply);
    const base = baseConfig();
    gw = await gatewayOn(backend, {
      config: {
        ...base,
        providers: [
          ...base.providers!,
          { id: "oa", wire: "openai", base_url: chatUp.baseUrl, api_keys: ["sk-oa"] },
          { id: "an", wire: "anthropic", base_url: anthropicUp.baseUrl, api_keys: ["sk-an"] },
        ],
        models: [
          ...base.models!,
          { name: "gpt-mock", provider: "mock", ...prices },
          { name: "gpt-chat", provider: "oa", upstream_model: "chat-up", ...prices },
          { name: "claude-x", provider: "an", upstream_model: "claude-up", ...prices },
        ],
      },
    });
    openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  });
  afterAll(async () => {
    await gw?.close();
    for (const up of [chatUp, anthropicUp]) await up?.close();
  });

  const fakes: [string, string, () => FakeUpstream][] = [
    ["chat", "gpt-chat", () => chatUp],
    ["anthropic", "claude-x", () => anthropicUp],
  ];

  it.each(fakes)(
    "on the %s wire, whole: past the threshold the conversation is summarized first, the model answers with the summary in its place, and the output lists the compaction item then the answer",
    async (wire, model, upstream) => {
      const calls = upstream().requests.length;
      const response = await openai.responses.create({
        model,
        input: conversation,
        context_management: compactNow,
      } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
      const sent = upstream().requests.slice(calls);
      expect(sent).toHaveLength(2);
      expect(asksSummary(sent[0])).toBe(true);
      expect(JSON.stringify(sent[0].body)).toContain("EARLY-FACT");
      const answered = JSON.stringify(sent[1].body);
      expect(answered).toContain(summaryOf(wire));
      expect(answered).toContain("What is my cat called?");
      expect(answered).not.toContain("EARLY-FACT");
      expect(answered).not.toContain("mgw-compaction");

      expect(response.output.map((item) => item.type)).toEqual(["compaction", "message"]);
      const item = response.output[0] as unknown as Record<string, unknown>;
      expect(String(item.encrypted_content)).not.toContain("SUMMARY");
      expect(response.output_text).toBe(answerOf(wire));
    },
  );

  it.each(fakes)(
    "on the %s wire, streamed: response.compaction.compacting between the compaction item's added and done, before the answer's events, each numbered in order",
    async (wire, model) => {
      const stream = await openai.responses.create({
        model,
        input: conversation,
        context_management: compactNow,
        stream: true,
      } as OpenAI.Responses.ResponseCreateParamsStreaming);
      const events: Event[] = [];
      for await (const event of stream) events.push(event as unknown as Event);
      const types = events.map((e) => e.type);
      expect(types.slice(0, 5)).toEqual([
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
      ]);
      expect(events[2]).toMatchObject({ output_index: 0, item: { type: "compaction" } });
      const item = (events[4] as unknown as { item: { id: string } }).item;
      expect(events[3]).toMatchObject({ output_index: 0, item_id: item.id });
      const answerAdded = events.slice(5).find((e) => e.type === "response.output_item.added");
      expect(answerAdded).toMatchObject({ output_index: 1, item: { type: "message" } });
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      const completed = events.at(-1) as unknown as {
        type: string;
        response: OpenAI.Responses.Response;
      };
      expect(completed.type).toBe("response.completed");
      expect(completed.response.output.map((o) => o.type)).toEqual(["compaction", "message"]);
      expect(completed.response.output_text ?? "").toBe("");
      const text = events
        .filter((e) => e.type === "response.output_text.delta")
        .map((e) => String(e.delta))
        .join("");
      expect(text).toBe(answerOf(wire));
    },
  );

  it("on the mock, whole and streamed: the answer follows the compaction item, and the one row is billed both calls' usage", async () => {
    for (const stream of [false, true]) {
      const before = await money(gw);
      let response: OpenAI.Responses.Response;
      if (stream) {
        const events = await openai.responses.create({
          model: "gpt-mock",
          input: conversation,
          context_management: compactNow,
          stream: true,
        } as OpenAI.Responses.ResponseCreateParamsStreaming);
        let last: Event | undefined;
        for await (const event of events) last = event as unknown as Event;
        expect(last?.type).toBe("response.completed");
        response = (last as unknown as { response: OpenAI.Responses.Response }).response;
      } else {
        response = await openai.responses.create({
          model: "gpt-mock",
          input: conversation,
          context_management: compactNow,
        } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
      }
      expect(response.output.map((item) => item.type)).toEqual(["compaction", "message"]);
      const text = (response.output[1] as OpenAI.Responses.ResponseOutputMessage).content
        .map((part) => (part.type === "output_text" ? part.text : ""))
        .join("");
      // The mock answers the last user message, which the model is given after the summary.
      expect(text).toContain("Mock reply to: What is my cat called?");

      const usage = response.usage!;
      const after = await money(gw);
      const cost = usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;
      expect(before.balance - after.balance).toBe(cost);
      const rows = await fetch(`${gw.url}/v1/usage/requests?limit=1`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      const [row] = ((await rows.json()) as { data: Record<string, unknown>[] }).data;
      expect(row).toMatchObject({
        endpoint: "responses",
        model: "gpt-mock",
        status: 200,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
      });

      // The same turn below its threshold is billed less: the compaction's usage is in the row.
      const plain = await openai.responses.create({ model: "gpt-mock", input: conversation });
      expect(usage.output_tokens).toBeGreaterThan(plain.usage!.output_tokens);
    }
  });

  it("below the threshold nothing changes: the provider gets byte for byte the request it got without context_management", async () => {
    await openai.responses.create({ model: "gpt-chat", input: conversation });
    const without = chatUp.last.raw;
    const calls = chatUp.requests.length;
    const response = await openai.responses.create({
      model: "gpt-chat",
      input: conversation,
      context_management: compactLater,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(chatUp.requests.length).toBe(calls + 1);
    expect(chatUp.last.raw).toBe(without);
    expect(response.output.map((item) => item.type)).toEqual(["message"]);
  });

  it("a stored chain continues from the compacted state: the next turn sends the summary, the answer and the new input, not the conversation before the compaction", async () => {
    const first = await openai.responses.create({
      model: "gpt-chat",
      input: conversation,
      context_management: compactNow,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(first.output[0].type).toBe("compaction");
    const calls = chatUp.requests.length;
    const next = await openai.responses.create({
      model: "gpt-chat",
      previous_response_id: first.id,
      input: "And its colour?",
    });
    expect(next.output_text).toBe(answerOf("chat"));
    expect(chatUp.requests.length).toBe(calls + 1);
    const sent = JSON.stringify(chatUp.last.body);
    expect(sent).toContain(summaryOf("chat"));
    expect(sent).toContain(answerOf("chat"));
    expect(sent).toContain("And its colour?");
    expect(sent).not.toContain("EARLY-FACT");

    // A client that chains by sending the output back (stateless) gets the same.
    await openai.responses.create({
      model: "gpt-chat",
      store: false,
      input: [
        ...conversation,
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { role: "user", content: "And its age?" },
      ],
    });
    const stateless = JSON.stringify(chatUp.last.body);
    expect(stateless).toContain(summaryOf("chat"));
    expect(stateless).not.toContain("EARLY-FACT");
  });

  it("a conversation continues from the compacted state: its next turn sends the summary, not the items before it", async () => {
    const { id } = await openai.conversations.create({});
    const first = await openai.responses.create({
      model: "claude-x",
      conversation: id,
      input: conversation,
      context_management: compactNow,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(first.output.map((item) => item.type)).toEqual(["compaction", "message"]);
    await openai.responses.create({ model: "claude-x", conversation: id, input: "Go on." });
    const sent = JSON.stringify(anthropicUp.last.body);
    expect(sent).toContain(summaryOf("anthropic"));
    expect(sent).toContain(answerOf("anthropic"));
    expect(sent).toContain("Go on.");
    expect(sent).not.toContain("EARLY-FACT");
  });

  it("a compaction_trigger last in input compacts whatever the size: the one output item is the compaction, billed the summarizing call, whole and streamed", async () => {
    const input: OpenAI.Responses.ResponseInputItem[] = [
      { role: "user", content: "Hi." },
      { type: "compaction_trigger" } as unknown as OpenAI.Responses.ResponseInputItem,
    ];
    const calls = chatUp.requests.length;
    const before = await money(gw);
    const response = await openai.responses.create({ model: "gpt-chat", input });
    expect(chatUp.requests.length).toBe(calls + 1);
    expect(asksSummary(chatUp.last)).toBe(true);
    expect(JSON.stringify(chatUp.last.body)).not.toContain("compaction_trigger");
    expect(response.output.map((item) => item.type)).toEqual(["compaction"]);
    expect(response.usage).toMatchObject({ input_tokens: 100, output_tokens: 10 });
    const after = await money(gw);
    expect(before.balance - after.balance).toBe(100 * PRICE_IN + 10 * PRICE_OUT);

    const stream = await openai.responses.create({ model: "gpt-chat", input, stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.compaction.compacting",
      "response.output_item.done",
      "response.completed",
    ]);

    // The turn after it is answered from the summary.
    await openai.responses.create({
      model: "gpt-chat",
      previous_response_id: response.id,
      input: "Go on.",
    });
    const sent = JSON.stringify(chatUp.last.body);
    expect(sent).toContain(summaryOf("chat"));
    expect(sent).toContain("Go on.");
  });

  const rules = "DEV-RULES: answer in one line.";
  const developer = { role: "developer", content: rules } as OpenAI.Responses.ResponseInputItem;

  it.each(fakes)(
    "on the %s wire, the client's developer messages stay with the summary: Codex's compaction_trigger, then its next turn with its instructions ahead of the compaction item",
    async (wire, model, upstream) => {
      // Codex (its OpenAI provider, remote compaction) compacts with a trigger, then sends each
      // turn as its instructions, the compaction item and the new request, stateless.
      const compacted = await openai.responses.create({
        model,
        store: false,
        input: [
          developer,
          ...conversation,
          { type: "compaction_trigger" } as unknown as OpenAI.Responses.ResponseInputItem,
        ],
      });
      expect(compacted.output.map((item) => item.type)).toEqual(["compaction"]);
      const next = await openai.responses.create({
        model,
        store: false,
        input: [
          developer,
          ...(compacted.output as OpenAI.Responses.ResponseInputItem[]),
          { role: "user", content: "Go on." },
        ],
      });
      expect(next.output_text).toBe(answerOf(wire));
      const sent = JSON.stringify(upstream().last.body);
      expect(sent).toContain(rules);
      expect(sent).toContain(summaryOf(wire));
      expect(sent).toContain("Go on.");
      expect(sent).not.toContain("EARLY-FACT");
    },
  );

  it.each(fakes)(
    "on the %s wire, a turn compacted past the threshold is answered with the client's developer messages ahead of the summary",
    async (wire, model, upstream) => {
      const calls = upstream().requests.length;
      await openai.responses.create({
        model,
        input: [developer, ...conversation],
        context_management: compactNow,
      } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
      const answered = upstream().requests.slice(calls);
      expect(answered).toHaveLength(2);
      const answer = JSON.stringify(answered[1].body);
      expect(answer).toContain(rules);
      expect(answer).toContain(summaryOf(wire));
      expect(answer).not.toContain("EARLY-FACT");
    },
  );

  it("a streaming client that leaves mid-compaction is billed what was delivered: nothing, and the answer is never asked for", async () => {
    const asked = deferred();
    chatUp.reset((req) => {
      if (!asksSummary(req)) return chatReply(req);
      asked.resolve();
      return { kind: "hang" };
    });
    try {
      const before = await money(gw);
      const calls = chatUp.requests.length;
      const controller = new AbortController();
      const leaving = openai.responses
        .create(
          {
            model: "gpt-chat",
            input: conversation,
            context_management: compactNow,
            stream: true,
          } as OpenAI.Responses.ResponseCreateParamsStreaming,
          { signal: controller.signal },
        )
        .then(async (stream) => {
          for await (const _ of stream) {
            // read until the client leaves
          }
        })
        .catch((e: unknown) => e);
      await asked.promise;
      controller.abort();
      await leaving;
      expect(await idleMoney(gw)).toEqual({ balance: before.balance, held: 0 });
      expect(chatUp.requests.length).toBe(calls + 1);
    } finally {
      chatUp.reset(chatReply);
    }
  });
});
