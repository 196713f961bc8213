import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";
import OpenAI from "openai";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { beforeAll, describe, expect, it } from "vitest";
import { KEY } from "../support/gateway.js";
import {
  OTHER_KEY,
  type StateSetup,
  useStateGateway,
  weatherTool,
  wireModels,
} from "../support/responses-loop.js";
import { answerFor, WEATHER_RESULT, WEATHER_TOOL } from "../support/tool-loop.js";

/**
 * The Responses API's state through the official `openai` SDK, on a model of each wire: chains
 * continued with `previous_response_id` (a second turn that needs the first; a tool loop that
 * sends only the tool's output), retrieve, input items, delete, conversations, and the refusals:
 * unknown, `store: false`, deleted, expired and other accounts' responses.
 */

let setup: StateSetup;
let openai: OpenAI;
let other: OpenAI;
useStateGateway((ready) => {
  setup = ready;
});
beforeAll(() => {
  const client = (apiKey: string) =>
    new OpenAI({ apiKey, baseURL: `${setup.gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  openai = client(KEY);
  other = client(OTHER_KEY);
});

const day = 24 * 60 * 60 * 1000;

describe.each(wireModels)("Responses API state on %s", (model) => {
  it("a turn continued with previous_response_id is answered with the turn before it", async () => {
    const first = await openai.responses.create({ model, input: "My name is Ada." });
    expect(first).toMatchObject({ store: true });
    expect(first.output_text).toBe("Nice to meet you, Ada.");
    const second = await openai.responses.create({
      model,
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(second.output_text).toBe("Your name is Ada.");
    expect(second.previous_response_id).toBe(first.id);
    // The fakes remember nothing the gateway did not send them.
    const alone = await openai.responses.create({ model, input: "What is my name?" });
    expect(alone.output_text).toBe("I do not know your name.");
    const third = await openai.responses.create({
      model,
      previous_response_id: second.id,
      input: [{ role: "user", content: "What is my name?" }],
    });
    expect(third.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("a tool loop sends only the tool's output, and the provider gets the call before it", async () => {
    const asked = await openai.responses.create({
      model,
      tools: [weatherTool],
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    expect(call).toMatchObject({ name: WEATHER_TOOL });
    if (call?.type !== "function_call") throw new Error("no function call");
    const answered = await openai.responses.create({
      model,
      tools: [weatherTool],
      previous_response_id: asked.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT }],
    });
    expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
    expect(setup.refused()).toEqual([]);
  });

  it("an item_reference to an item of a stored response is that item; an unknown one is a 400", async () => {
    const asked = await openai.responses.create({
      model,
      tools: [weatherTool],
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call" || !call.id) throw new Error("no function call");
    // As the AI SDK sends a stored turn: by reference, without previous_response_id.
    const answered = await openai.responses.create({
      model,
      tools: [weatherTool],
      input: [
        { role: "user", content: "What is the weather in Jakarta?" },
        { type: "item_reference", id: call.id },
        { type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT },
      ],
    });
    expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
    expect(setup.refused()).toEqual([]);
    await expect(
      other.responses.create({
        model,
        input: [{ type: "item_reference", id: call.id }],
      }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("item_reference") });
  });

  it("a streamed chain is kept as it passes, and continued streamed", async () => {
    const first = await openai.responses
      .stream({ model, input: "My name is Grace." })
      .finalResponse();
    expect(first.output_text).toBe("Nice to meet you, Grace.");
    expect((await openai.responses.retrieve(first.id)).output_text).toBe(first.output_text);
    const second = await openai.responses
      .stream({ model, previous_response_id: first.id, input: "What is my name?" })
      .finalResponse();
    expect(second.output_text).toBe("Your name is Grace.");

    const asked = await openai.responses
      .stream({ model, tools: [weatherTool], input: "Weather in Jakarta?" })
      .finalResponse();
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("no function call");
    const answered = await openai.responses
      .stream({
        model,
        tools: [weatherTool],
        previous_response_id: asked.id,
        input: [{ type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT }],
      })
      .finalResponse();
    expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
    expect(setup.refused()).toEqual([]);
  });

  it("retrieve, input items paged as OpenAI pages them, and delete", async () => {
    const input: ResponseInputItem[] = [
      { role: "developer", content: "Be brief." },
      { role: "user", content: "one" },
      { role: "user", content: [{ type: "input_text", text: "two" }] },
    ];
    const created = await openai.responses.create({ model, input });
    const retrieved = await openai.responses.retrieve(created.id);
    expect(retrieved).toEqual(created);

    const page = await openai.responses.inputItems.list(created.id, { limit: 2, order: "asc" });
    expect(page.data.map((item) => item.type === "message" && item.role)).toEqual([
      "developer",
      "user",
    ]);
    expect(page.has_more).toBe(true);
    expect(page.data[1]).toMatchObject({
      type: "message",
      role: "user",
      status: "completed",
      content: [{ type: "input_text", text: "one" }],
    });
    expect(page.data[0].id).toMatch(/^msg_/);
    const all = [];
    for await (const item of openai.responses.inputItems.list(created.id, { limit: 1 })) {
      all.push(item);
    }
    // Newest first by default; `after` pages on from the last id.
    expect(all.map((item) => item.id)).toEqual(
      [...page.data.map((item) => item.id), all[0].id].reverse(),
    );

    const deleted: unknown = await openai.responses.delete(created.id);
    expect(deleted).toEqual({ id: created.id, object: "response", deleted: true });
    await expect(openai.responses.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.responses.create({ model, previous_response_id: created.id, input: "again" }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("previous_response_id"),
    });
  });

  it("store: false is echoed and kept nowhere; continuing it is a 400 naming previous_response_id", async () => {
    const unstored = await openai.responses.create({ model, input: "hi", store: false });
    expect(unstored).toMatchObject({ store: false });
    await expect(openai.responses.retrieve(unstored.id)).rejects.toMatchObject({ status: 404 });
    const refused = openai.responses.create({
      model,
      previous_response_id: unstored.id,
      input: "again",
    });
    await expect(refused).rejects.toMatchObject({
      status: 400,
      code: "bad_request",
      message: expect.stringContaining("previous_response_id"),
    });
    await expect(
      openai.responses.create({ model, previous_response_id: "resp_never", input: "x" }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("resp_never") });
  });

  it("another account's response is unknown: not continued, retrieved, listed or deleted", async () => {
    const mine = await openai.responses.create({ model, input: "My name is Ada." });
    await expect(
      other.responses.create({ model, previous_response_id: mine.id, input: "What is my name?" }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("previous_response_id"),
    });
    await expect(other.responses.retrieve(mine.id)).rejects.toMatchObject({ status: 404 });
    await expect(other.responses.inputItems.list(mine.id)).rejects.toMatchObject({ status: 404 });
    await expect(other.responses.delete(mine.id)).rejects.toMatchObject({ status: 404 });
    expect((await openai.responses.retrieve(mine.id)).id).toBe(mine.id);
  });

  it("conversations: created with items, a response on it reads them and adds its turn", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
      metadata: { topic: "names" },
    });
    expect(conversation).toMatchObject({ object: "conversation", metadata: { topic: "names" } });
    // As OpenAI's: `conv_`, then letters and digits.
    expect(conversation.id).toMatch(/^conv_[A-Za-z0-9]{24}$/);
    const response = await openai.responses.create({
      model,
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(response.output_text).toBe("Your name is Ada.");
    expect(response.conversation).toEqual({ id: conversation.id });
    const items = await openai.conversations.items.list(conversation.id, { order: "asc" });
    expect(items.data.map((item) => item.type === "message" && item.role)).toEqual([
      "user",
      "user",
      "assistant",
    ]);
    expect(items.data[2].id).toBe(response.output[0].id);
    // The next turn on the conversation sees the last one's answer too.
    const again = await openai.responses.create({
      model,
      conversation: { id: conversation.id },
      input: "What is my name?",
    });
    expect(again.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);

    const updated = await openai.conversations.update(conversation.id, {
      metadata: { topic: "renamed" },
    });
    expect(updated.metadata).toEqual({ topic: "renamed" });
    expect((await openai.conversations.retrieve(conversation.id)).metadata).toEqual({
      topic: "renamed",
    });
    const first = items.data[0];
    const firstId = String(first.id);
    expect(
      await openai.conversations.items.retrieve(firstId, { conversation_id: conversation.id }),
    ).toEqual(first);
    const added = await openai.conversations.items.create(conversation.id, {
      items: [{ type: "message", role: "user", content: "Extra." }],
    });
    expect(added.data).toHaveLength(1);
    expect(added.first_id).toBe(added.data[0].id);
    const afterDelete = await openai.conversations.items.delete(firstId, {
      conversation_id: conversation.id,
    });
    expect(afterDelete.id).toBe(conversation.id);
    const left = await openai.conversations.items.list(conversation.id, { limit: 100 });
    // Newest first: the one added last, down to the first turn's question.
    expect(left.data).toHaveLength(5);
    expect(left.data[0].id).toBe(added.data[0].id);
    expect(left.data.map((item) => item.id)).not.toContain(firstId);

    await expect(other.conversations.retrieve(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
    await expect(other.conversations.items.list(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
    await expect(
      other.responses.create({ model, conversation: conversation.id, input: "hi" }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("conversation") });

    expect(await openai.conversations.delete(conversation.id)).toMatchObject({
      id: conversation.id,
      object: "conversation.deleted",
      deleted: true,
    });
    await expect(openai.conversations.retrieve(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
  });
});

describe("Responses API state across wires", () => {
  it("a native provider that served the turn before gets previous_response_id as written", async () => {
    const first = await openai.responses.create({ model: "gpt-native", input: "My name is Ada." });
    const second = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(second.output_text).toBe("Your name is Ada.");
    expect(setup.nativeUp.last.body).toMatchObject({
      previous_response_id: first.id,
      input: "What is my name?",
    });
  });

  it("a chain moves between wires: each turn is replayed to a provider that does not hold it", async () => {
    const first = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const second = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: first.id,
      input: "Say something.",
    });
    expect(second.previous_response_id).toBe(first.id);
    // The native provider never saw the first turn: it is sent whole, without ids it would look up.
    const sent = setup.nativeUp.last.body;
    expect(sent.previous_response_id).toBeUndefined();
    expect(JSON.stringify(sent.input)).toContain("My name is Ada.");
    expect((sent.input as { id?: string }[]).every((item) => item.id === undefined)).toBe(true);
    const third = await openai.responses.create({
      model: "claude-x",
      previous_response_id: second.id,
      input: "What is my name?",
    });
    expect(third.output_text).toBe("Your name is Ada.");
    const fourth = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: third.id,
      input: "What is my name?",
    });
    expect(fourth.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("`previous_response_id` and `conversation` together are refused", async () => {
    const first = await openai.responses.create({ model: "mock-gpt", input: "hi" });
    const conversation = await openai.conversations.create();
    await expect(
      openai.responses.create({
        model: "mock-gpt",
        previous_response_id: first.id,
        conversation: conversation.id,
        input: "x",
      }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("conversation") });
  });

  it("a stored response expires with the gateway's clock, and a continued chain lives with its newest turn", async () => {
    const first = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    setup.gw.clock.advance(30 * day - 60_000);
    const second = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: first.id,
      input: "Noted?",
    });
    // Past the first one's 30 days: it lives on as part of the chain the second continues.
    setup.gw.clock.advance(120_000);
    const third = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: second.id,
      input: "What is my name?",
    });
    expect(third.output_text).toBe("Your name is Ada.");
    setup.gw.clock.advance(30 * day);
    await expect(openai.responses.retrieve(third.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.responses.create({ model: "gpt-x", previous_response_id: third.id, input: "x" }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("previous_response_id"),
    });
  });
});

describe("the AI SDK's stored turns", () => {
  it.each([
    ["gpt-x", "chatUp"],
    ["claude-x", "anthropicUp"],
  ] as const)(
    "an earlier answer it sends by item_reference reaches %s whole",
    async (model, up) => {
      const provider = createOpenAI({ apiKey: KEY, baseURL: `${setup.gw.url}/v1` });
      const first = await generateText({
        model: provider.responses(model),
        prompt: "My name is Ada.",
        maxRetries: 0,
      });
      const second = await generateText({
        model: provider.responses(model),
        messages: [
          { role: "user", content: "My name is Ada." },
          ...first.response.messages,
          { role: "user", content: "What is my name?" },
        ],
        maxRetries: 0,
      });
      expect(second.text).toBe("Your name is Ada.");
      // The AI SDK sent the first answer as a reference to the stored item: the provider got it.
      expect(JSON.stringify(setup[up].last.body.messages)).toContain("Nice to meet you, Ada.");
      expect(setup.refused()).toEqual([]);
    },
  );
});
