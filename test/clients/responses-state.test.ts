import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";
import type OpenAI from "openai";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { describe, expect, it } from "vitest";
import {
  anthropicJson,
  anthropicToolStreamSteps,
  type RecordedRequest,
  type Reply,
} from "../support/fake-upstream.js";
import { KEY } from "../support/gateway.js";
import {
  nativeFake,
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
  ({ openai, other } = ready);
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
    // The SDK's ItemReference may leave out its type: `{ id }` alone is the same reference.
    const typeless = await openai.responses.create({
      model,
      tools: [weatherTool],
      input: [
        { role: "user", content: "What is the weather in Jakarta?" },
        { id: call.id },
        { type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT },
      ],
    });
    expect(typeless.output_text).toBe(answerFor(WEATHER_RESULT));
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
  it("a native provider that served the turn before gets it as previous_response_id, by the id it gave it", async () => {
    const given: unknown[] = [];
    setup.nativeUp.reset((req) => {
      const reply = nativeFake(req);
      if (reply.kind === "json") given.push((reply.body as { id?: unknown }).id);
      return reply;
    });
    const first = await openai.responses.create({ model: "gpt-native", input: "My name is Ada." });
    // The client's id is the gateway's own: a provider may give its ids again.
    expect(first.id).not.toBe(given[0]);
    const second = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(second.output_text).toBe("Your name is Ada.");
    expect(second.previous_response_id).toBe(first.id);
    expect(setup.nativeUp.last.body).toMatchObject({
      previous_response_id: given[0],
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

/** A native server that gives every response the same id, as one that draws them from a small range. */
function repeatingIds(req: RecordedRequest): Reply {
  const reply = nativeFake(req);
  const id = "resp_1";
  if (reply.kind === "json") return { ...reply, body: { ...(reply.body as object), id } };
  if (reply.kind !== "sse") return reply;
  const steps = reply.steps.map((step) => {
    const data = step.data as { response?: object };
    return data.response
      ? { ...step, data: { ...data, response: { ...data.response, id } } }
      : step;
  });
  return { ...reply, steps };
}

describe("stateful turns as OpenAI checks them", () => {
  it("conversation items that are not Responses input items are refused naming the field, at creation, when added and in input; nothing is kept or sent", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    const before = setup.chatUp.requests.length;
    const malformed: [object, string][] = [
      [{}, "items.0.role"],
      [{ type: "wizardry", text: "abracadabra" }, "items.0.type"],
      [{ type: "message", role: "user", content: 5 }, "items.0.content"],
      [{ role: "wizard", content: "Hi." }, "items.0.role"],
      [{ type: "function_call_output", output: "31 C" }, "items.0.call_id"],
    ];
    for (const [item, field] of malformed) {
      const refused = { status: 400, code: "bad_request", message: expect.stringContaining(field) };
      const items = [item] as ResponseInputItem[];
      await expect(
        openai.conversations.items.create(conversation.id, { items }),
      ).rejects.toMatchObject(refused);
      await expect(openai.conversations.create({ items })).rejects.toMatchObject(refused);
      await expect(openai.responses.create({ model: "gpt-x", input: items })).rejects.toMatchObject(
        {
          status: 400,
          message: expect.stringContaining(field.replace("items", "input")),
        },
      );
    }
    expect((await openai.conversations.items.list(conversation.id)).data).toHaveLength(1);
    expect(setup.chatUp.requests.length).toBe(before);
    const answer = await openai.responses.create({
      model: "gpt-x",
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(answer.output_text).toBe("Your name is Ada.");
  });

  it("a native server that repeats its response ids: each response has an id of its own, and a chain continues its own turns, never another chain's or account's", async () => {
    setup.nativeUp.reset(repeatingIds);
    const model = "gpt-native";
    const ada = await openai.responses.create({ model, input: "My name is Ada." });
    const grace = await openai.responses
      .stream({ model, input: "My name is Grace." })
      .finalResponse();
    const bob = await other.responses.create({ model, input: "My name is Bob." });
    expect(new Set([ada.id, grace.id, bob.id]).size).toBe(3);
    expect((await openai.responses.retrieve(ada.id)).output_text).toBe("Nice to meet you, Ada.");
    const ask = (client: OpenAI, previous: string) =>
      client.responses.create({ model, previous_response_id: previous, input: "What is my name?" });
    expect((await ask(openai, ada.id)).output_text).toBe("Your name is Ada.");
    expect((await ask(openai, grace.id)).output_text).toBe("Your name is Grace.");
    const bobAsks = await ask(other, bob.id);
    expect(bobAsks.output_text).toBe("Your name is Bob.");
    // While nothing took its id since, the server's own chain is continued, under its own id.
    const again = await ask(other, bobAsks.id);
    expect(again.output_text).toBe("Your name is Bob.");
    expect(setup.nativeUp.last.body).toMatchObject({
      previous_response_id: "resp_1",
      input: "What is my name?",
    });
    expect(setup.refused()).toEqual([]);
  });

  it("an input item the chain or the conversation already holds is refused naming its id, before anything is sent", async () => {
    const asked = await openai.responses.create({
      model: "gpt-x",
      tools: [weatherTool],
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call" || !call.id) throw new Error("no function call");
    const output: ResponseInputItem = {
      type: "function_call_output",
      call_id: call.call_id,
      output: WEATHER_RESULT,
    };
    const before = setup.chatUp.requests.length;
    const duplicate = {
      status: 400,
      code: "bad_request",
      message: expect.stringContaining(`'${call.id}'`),
    };
    await expect(
      openai.responses.create({
        model: "gpt-x",
        tools: [weatherTool],
        previous_response_id: asked.id,
        input: [call, output],
      }),
    ).rejects.toMatchObject(duplicate);
    await expect(
      openai.responses.create({
        model: "gpt-x",
        tools: [weatherTool],
        previous_response_id: asked.id,
        input: [{ type: "item_reference", id: call.id }, output],
      }),
    ).rejects.toMatchObject(duplicate);
    const said = {
      id: "msg_said_once",
      type: "message",
      role: "user",
      content: [{ type: "input_text", text: "My name is Ada." }],
    } as ResponseInputItem;
    const conversation = await openai.conversations.create({ items: [said] });
    await expect(
      openai.responses.create({
        model: "gpt-x",
        conversation: conversation.id,
        input: [said, { role: "user", content: "What is my name?" }],
      }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("'msg_said_once'") });
    expect(setup.chatUp.requests.length).toBe(before);
    // Sent once, the loop goes on.
    const answered = await openai.responses.create({
      model: "gpt-x",
      tools: [weatherTool],
      previous_response_id: asked.id,
      input: [output],
    });
    expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
  });

  it.each([false, true])(
    "a stored Claude turn keeps its signed thinking though the client did not include it (stream: %s), and the chain sends it back with thinking on",
    async (stream) => {
      const thinking = {
        text: "The user wants the weather; call the tool.",
        signature: "sig-kept",
      };
      setup.anthropicUp.queue(
        stream
          ? {
              kind: "sse",
              steps: anthropicToolStreamSteps(
                [{ id: "toolu_kept", name: WEATHER_TOOL, jsonPieces: ['{"city":"Jakarta"}'] }],
                { thinking },
              ),
            }
          : anthropicJson(null, {
              thinking,
              toolUses: [{ id: "toolu_kept", name: WEATHER_TOOL, input: { city: "Jakarta" } }],
            }),
        anthropicJson(answerFor(WEATHER_RESULT)),
      );
      const ask = {
        model: "claude-x",
        tools: [weatherTool],
        reasoning: { effort: "medium" as const },
      };
      const asked = stream
        ? await openai.responses
            .stream({ ...ask, input: "What is the weather in Jakarta?" })
            .finalResponse()
        : await openai.responses.create({ ...ask, input: "What is the weather in Jakarta?" });
      // What the client asked to see: no summary, no encrypted_content, so no reasoning item.
      expect(asked.output.map((item) => item.type)).toEqual(["function_call"]);
      expect(JSON.stringify(await openai.responses.retrieve(asked.id))).not.toContain(
        "encrypted_content",
      );
      const answered = await openai.responses.create({
        ...ask,
        previous_response_id: asked.id,
        input: [{ type: "function_call_output", call_id: "toolu_kept", output: WEATHER_RESULT }],
      });
      expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
      expect(setup.refused()).toEqual([]);
      const sent = setup.anthropicUp.last.body as {
        thinking?: unknown;
        messages: { role: string; content: unknown[] }[];
      };
      expect(sent.thinking).toMatchObject({ type: "enabled" });
      expect(sent.messages[1].content).toEqual([
        { type: "thinking", thinking: thinking.text, signature: thinking.signature },
        expect.objectContaining({ type: "tool_use", id: "toolu_kept" }),
      ]);
    },
  );

  it("a store: false client that moves from Claude to a native provider does not send it the gateway's reasoning items", async () => {
    setup.anthropicUp.queue(
      anthropicJson(null, {
        thinking: { text: "Call the tool.", signature: "sig-moved" },
        toolUses: [{ id: "toolu_moved", name: WEATHER_TOOL, input: { city: "Jakarta" } }],
      }),
    );
    const codex = {
      store: false,
      include: ["reasoning.encrypted_content" as const],
      reasoning: { effort: "medium" as const },
      tools: [weatherTool],
    };
    const user: ResponseInputItem = { role: "user", content: "What is the weather in Jakarta?" };
    const asked = await openai.responses.create({ ...codex, model: "claude-x", input: [user] });
    expect(asked.output[0]).toMatchObject({
      type: "reasoning",
      encrypted_content: expect.any(String),
    });
    const next = [
      user,
      ...(asked.output as ResponseInputItem[]),
      { type: "function_call_output" as const, call_id: "toolu_moved", output: WEATHER_RESULT },
    ];
    for (const stream of [false, true]) {
      const answered = stream
        ? await openai.responses
            .stream({ ...codex, model: "gpt-native", input: next })
            .finalResponse()
        : await openai.responses.create({ ...codex, model: "gpt-native", input: next });
      expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
      const sent = setup.nativeUp.last.body.input as { type?: string }[];
      expect(sent.map((item) => item.type ?? "message")).toEqual([
        "message",
        "function_call",
        "function_call_output",
      ]);
    }
    expect(setup.refused()).toEqual([]);
  });
});
