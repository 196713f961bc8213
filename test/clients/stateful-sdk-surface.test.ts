import type OpenAI from "openai";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { describe, expect, it } from "vitest";
import { anthropicJson } from "../support/fake-upstream.js";
import { KEY } from "../support/gateway.js";
import { type StateSetup, useStateGateway, weatherTool } from "../support/responses-loop.js";
import { WEATHER_TOOL } from "../support/tool-loop.js";

/**
 * The stored state's read side as the newest `openai` SDK calls it: retrieve with `include` and
 * with `stream` (its `responses.stream({ response_id })` helper), a native provider's answer with
 * `store: false`, an `item_reference` to an item of a deleted conversation, and every method of
 * `client.responses` and `client.conversations` on the mock and on a chat-completions model.
 */

let setup: StateSetup;
let openai: OpenAI;
let other: OpenAI;
useStateGateway((ready) => {
  setup = ready;
  ({ openai, other } = ready);
});

const encrypted = ["reasoning.encrypted_content" as const];
const thinking = { text: "Greet them.", signature: "sig-retrieve" };

async function eventsOf(
  stream: AsyncIterable<ResponseStreamEvent>,
): Promise<ResponseStreamEvent[]> {
  const events: ResponseStreamEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

describe("GET /v1/responses/{id} with include", () => {
  it("answers as the create did with the same include, and shows encrypted_content only with it", async () => {
    setup.anthropicUp.queue(anthropicJson("Hello.", { thinking }));
    const created = await openai.responses.create({
      model: "claude-x",
      input: "hi",
      reasoning: { effort: "medium", summary: "auto" },
      include: encrypted,
    });
    expect(created.output[0]).toMatchObject({
      type: "reasoning",
      encrypted_content: expect.any(String),
    });
    expect(await openai.responses.retrieve(created.id, { include: encrypted })).toEqual(created);
    const plain = await openai.responses.retrieve(created.id);
    expect(JSON.stringify(plain)).not.toContain("encrypted_content");
    expect(plain.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
  });

  it("gives the signed reasoning a create without include kept, where a create with it has it", async () => {
    const ask = { model: "claude-x", input: "hi", reasoning: { effort: "medium" as const } };
    setup.anthropicUp.queue(
      anthropicJson("Hello.", { thinking }),
      anthropicJson("Hello.", { thinking }),
    );
    const unshown = await openai.responses.create(ask);
    expect(unshown.output.map((item) => item.type)).toEqual(["message"]);
    const shown = await openai.responses.create({ ...ask, include: encrypted });
    const retrieved = await openai.responses.retrieve(unshown.id, { include: encrypted });
    expect(retrieved.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(retrieved.output[0]).toMatchObject({
      type: "reasoning",
      summary: [],
      encrypted_content: (shown.output[0] as { encrypted_content: string }).encrypted_content,
    });
    // The same item each time it is read.
    expect(await openai.responses.retrieve(unshown.id, { include: encrypted })).toEqual(retrieved);
    expect(await openai.responses.retrieve(unshown.id)).toEqual(unshown);
  });

  it("shows an output text's logprobs only with message.output_text.logprobs, in the response and in a conversation", async () => {
    const conversation = await openai.conversations.create();
    const created = await openai.responses.create({
      model: "mock-gpt",
      input: "hi",
      conversation: conversation.id,
      include: ["message.output_text.logprobs"],
      top_logprobs: 2,
    });
    const logprobsOf = (response: OpenAI.Responses.Response) =>
      response.output.flatMap((item) =>
        item.type === "message"
          ? item.content.flatMap((part) => ("logprobs" in part ? (part.logprobs ?? []) : []))
          : [],
      );
    expect(logprobsOf(created).length).toBeGreaterThan(0);
    expect(
      await openai.responses.retrieve(created.id, { include: ["message.output_text.logprobs"] }),
    ).toEqual(created);
    const plain = await openai.responses.retrieve(created.id);
    expect(logprobsOf(plain)).toEqual([]);
    expect(plain.output_text).toBe(created.output_text);

    const listed = async (include?: ["message.output_text.logprobs"]) => {
      const page = await openai.conversations.items.list(conversation.id, {
        order: "asc",
        include,
      });
      const answer = page.data.find((item) => item.type === "message" && item.role === "assistant");
      return answer?.type === "message" ? answer.content : [];
    };
    expect(await listed()).toEqual([
      expect.objectContaining({ type: "output_text", logprobs: [] }),
    ]);
    expect(await listed(["message.output_text.logprobs"])).toEqual([
      expect.objectContaining({ logprobs: logprobsOf(created) }),
    ]);
  });
});

describe("GET /v1/responses/{id}?stream=true", () => {
  it.each(["mock-gpt", "gpt-x"])(
    "replays the stored answer's events on %s: the SDK's responses.stream({ response_id }) ends with the response",
    async (model) => {
      const created = await openai.responses.create({ model, input: "My name is Ada." });
      const replayed = await openai.responses.stream({ response_id: created.id }).finalResponse();
      // The helper adds its parsed fields (`output_parsed`) to what the server sent.
      expect(replayed).toMatchObject(await openai.responses.retrieve(created.id));
      expect(replayed.output_text).toBe(created.output_text);

      const events = await eventsOf(await openai.responses.retrieve(created.id, { stream: true }));
      expect(events[0]).toMatchObject({ type: "response.created", sequence_number: 0 });
      expect(events.at(-1)).toMatchObject({
        type: "response.completed",
        response: { id: created.id },
      });
      expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, at) => at));
      const text = events.flatMap((event) =>
        event.type === "response.output_text.delta" ? [event.delta] : [],
      );
      expect(text.join("")).toBe(created.output_text);
    },
  );

  it("replays a tool call's arguments, only the events after starting_after, and hides what include does not ask for", async () => {
    const asked = await openai.responses.create({
      model: "gpt-x",
      tools: [weatherTool],
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("no function call");
    const events = await eventsOf(await openai.responses.retrieve(asked.id, { stream: true }));
    expect(events).toContainEqual(
      expect.objectContaining({
        type: "response.function_call_arguments.done",
        item_id: call.id,
        name: WEATHER_TOOL,
        arguments: call.arguments,
      }),
    );
    const rest = await eventsOf(
      await openai.responses.retrieve(asked.id, { stream: true, starting_after: 2 }),
    );
    expect(rest).toEqual(events.slice(3));

    setup.anthropicUp.queue(anthropicJson("Hello.", { thinking }));
    const reasoned = await openai.responses.create({
      model: "claude-x",
      input: "hi",
      reasoning: { effort: "medium", summary: "auto" },
      include: encrypted,
    });
    const plain = await eventsOf(await openai.responses.retrieve(reasoned.id, { stream: true }));
    expect(JSON.stringify(plain)).not.toContain("encrypted_content");
    const withIt = await openai.responses
      .stream({ response_id: reasoned.id, include: encrypted } as never)
      .finalResponse();
    expect(withIt.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
  });

  it("refuses a starting_after that is not a sequence number with a 400 naming it; an unknown id is a 404", async () => {
    const created = await openai.responses.create({ model: "mock-gpt", input: "hi" });
    const bad = await fetch(
      `${setup.gw.url}/v1/responses/${created.id}?stream=true&starting_after=soon`,
      { headers: { authorization: `Bearer ${KEY}` } },
    );
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({
      error: { code: "bad_request", message: expect.stringContaining("starting_after") },
    });
    await expect(other.responses.retrieve(created.id, { stream: true })).rejects.toMatchObject({
      status: 404,
    });
  });
});

describe("a native provider's answer with store: false", () => {
  it("has the gateway's id, JSON and streamed, and that id is retrieved, deleted and continued as OpenAI answers an unstored one", async () => {
    const answer = await openai.responses.create({
      model: "gpt-native",
      input: "hi",
      store: false,
    });
    expect(answer).toMatchObject({ store: false });
    expect(answer.id).toMatch(/^resp_/);
    // The fake native server numbers its ids resp_native_<n>.
    expect(answer.id).not.toMatch(/^resp_native_/);

    const events = await eventsOf(
      await openai.responses.create({
        model: "gpt-native",
        input: "hi",
        store: false,
        stream: true,
      }),
    );
    const ids = new Set(
      events.flatMap((event) => ("response" in event ? [event.response.id] : [])),
    );
    expect(ids.size).toBe(1);
    expect([...ids][0]).not.toMatch(/^resp_native_/);

    for (const id of [answer.id, ...ids]) {
      await expect(openai.responses.retrieve(id)).rejects.toMatchObject({ status: 404 });
      await expect(openai.responses.delete(id)).rejects.toMatchObject({ status: 404 });
      await expect(
        openai.responses.create({ model: "gpt-native", previous_response_id: id, input: "again" }),
      ).rejects.toMatchObject({
        status: 400,
        message: expect.stringContaining("previous_response_id"),
      });
    }
    expect(setup.refused()).toEqual([]);
  });
});

describe("an item of a deleted conversation", () => {
  it("is still found by an item_reference, as OpenAI keeps a deleted conversation's items; the conversation itself is gone", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    const [listed] = (await openai.conversations.items.list(conversation.id)).data;
    const item = { id: String(listed.id) };
    await openai.conversations.delete(conversation.id);

    const answered = await openai.responses.create({
      model: "gpt-x",
      input: [
        { type: "item_reference", id: item.id },
        { role: "user", content: "What is my name?" },
      ],
    });
    expect(answered.output_text).toBe("Your name is Ada.");
    await expect(
      other.responses.create({ model: "gpt-x", input: [{ type: "item_reference", id: item.id }] }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("item_reference") });

    await expect(openai.conversations.retrieve(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
    await expect(openai.conversations.delete(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
    await expect(openai.conversations.items.list(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
    await expect(
      openai.conversations.items.retrieve(item.id, { conversation_id: conversation.id }),
    ).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.conversations.items.create(conversation.id, {
        items: [{ type: "message", role: "user", content: "more" }],
      }),
    ).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.conversations.update(conversation.id, { metadata: { topic: "x" } }),
    ).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.responses.create({ model: "gpt-x", conversation: conversation.id, input: "hi" }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("conversation") });
  });
});

/** What a client sees of a refusal: its status and message (never a route the gateway lacks). */
async function refusal(call: Promise<unknown>): Promise<{ status?: number; message: string }> {
  const err = await call.then(
    () => new Error("answered"),
    (e: unknown) => e as Error & { status?: number },
  );
  const { status, message } = err as Error & { status?: number };
  expect(message).not.toMatch(/No route|internal/i);
  return { status, message };
}

describe.each(["mock-gpt", "gpt-x"])(
  "every method of client.responses and client.conversations on %s",
  (model) => {
    it("works as OpenAI documents, paged with for await, or is a 400 saying what is not served", async () => {
      const created = await openai.responses.create({
        model,
        input: [
          { role: "developer", content: "Be brief." },
          { role: "user", content: "My name is Ada." },
        ],
      });
      expect(created.output_text).not.toBe("");
      const streamed = await openai.responses
        .stream({ model, previous_response_id: created.id, input: "What is my name?" })
        .finalResponse();
      expect(streamed.previous_response_id).toBe(created.id);
      expect((await openai.responses.parse({ model, input: "hi" })).output_parsed).toBeNull();
      expect(await openai.responses.retrieve(streamed.id)).toMatchObject({ id: streamed.id });
      const replayed = await openai.responses.stream({ response_id: streamed.id }).finalResponse();
      expect(replayed.output_text).toBe(streamed.output_text);

      const items: string[] = [];
      for await (const item of openai.responses.inputItems.list(created.id, { limit: 1 }))
        items.push(item.type === "message" ? item.role : item.type);
      expect(items).toEqual(["user", "developer"]);
      const counted = await openai.responses.inputTokens.count({
        model,
        previous_response_id: created.id,
        input: "What is my name?",
      });
      expect(counted.input_tokens).toBeGreaterThan(0);

      expect(await refusal(openai.responses.cancel(created.id))).toMatchObject({
        status: 400,
        message: expect.stringContaining("nothing to cancel"),
      });
      const compacted = await openai.responses.compact({
        model,
        previous_response_id: streamed.id,
      });
      expect(compacted.output.map((item) => item.type)).toEqual([
        "message",
        "message",
        "compaction",
      ]);
      expect(await openai.responses.delete(created.id)).toMatchObject({ deleted: true });
      expect(await refusal(openai.responses.retrieve(created.id))).toMatchObject({ status: 404 });
      expect(await refusal(openai.responses.cancel(created.id))).toMatchObject({ status: 404 });

      const conversation = await openai.conversations.create({
        items: [{ type: "message", role: "user", content: "My name is Ada." }],
        metadata: { topic: "names" },
      });
      expect(await openai.conversations.retrieve(conversation.id)).toEqual(conversation);
      expect(
        await openai.conversations.update(conversation.id, { metadata: { topic: "people" } }),
      ).toMatchObject({ metadata: { topic: "people" } });
      const added = await openai.conversations.items.create(conversation.id, {
        items: [{ type: "message", role: "user", content: "I live in Jakarta." }],
      });
      const addedId = String(added.data[0]?.id);
      expect(
        await openai.conversations.items.retrieve(addedId, { conversation_id: conversation.id }),
      ).toMatchObject({ id: addedId, type: "message" });
      const onIt = await openai.responses.create({
        model,
        conversation: conversation.id,
        input: "What is my name?",
      });
      expect(onIt.conversation).toEqual({ id: conversation.id });
      const listed: string[] = [];
      for await (const item of openai.conversations.items.list(conversation.id, {
        limit: 1,
        order: "asc",
      }))
        listed.push(item.type === "message" ? item.role : item.type);
      expect(listed).toEqual(["user", "user", "user", "assistant"]);
      expect(
        await openai.conversations.items.delete(addedId, { conversation_id: conversation.id }),
      ).toMatchObject({ id: conversation.id, object: "conversation" });
      expect(
        await refusal(
          openai.conversations.items.retrieve(addedId, { conversation_id: conversation.id }),
        ),
      ).toMatchObject({ status: 404 });
      expect(await openai.conversations.delete(conversation.id)).toMatchObject({ deleted: true });
      expect(await refusal(openai.conversations.retrieve(conversation.id))).toMatchObject({
        status: 404,
      });
      expect(setup.refused()).toEqual([]);
    });
  },
);
