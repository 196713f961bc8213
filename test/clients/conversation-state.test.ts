import type OpenAI from "openai";
import type { ResponseInputItem, ResponseStreamEvent } from "openai/resources/responses/responses";
import { describe, expect, it } from "vitest";
import {
  anthropicJson,
  anthropicToolStreamSteps,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "../support/fake-upstream.js";
import {
  nativeFake,
  type StateSetup,
  useStateGateway,
  weatherTool,
  wireModels,
} from "../support/responses-loop.js";
import { answerFor, WEATHER_RESULT, WEATHER_TOOL } from "../support/tool-loop.js";

/**
 * Conversations and chains as the official `openai` SDK uses them, where a turn's state is more
 * than the items the client sees: Claude's signed thinking through a tool loop continued with
 * `conversation`, item ids a native provider gives again, an `item_reference` added to a
 * conversation, and a page of items after one that was deleted.
 */

let setup: StateSetup;
let openai: OpenAI;
let other: OpenAI;
useStateGateway((ready) => {
  setup = ready;
  ({ openai, other } = ready);
});

type AnthropicBody = {
  thinking?: unknown;
  messages: { role: string; content: unknown[] }[];
};

const itemTypes = async (conversation: string) =>
  (await openai.conversations.items.list(conversation, { order: "asc", limit: 100 })).data.map(
    (item) => item.type,
  );

describe("a conversation keeps Claude's signed thinking for its tool loop", () => {
  it.each([
    { stream: false, store: true },
    { stream: true, store: false },
  ])(
    "the next turn sends the tool_use turn back with its signed thinking, which the client is not shown (%o)",
    async ({ stream, store }) => {
      const thinking = {
        text: "The user wants the weather; call the tool.",
        signature: "sig-conv",
      };
      setup.anthropicUp.queue(
        stream
          ? {
              kind: "sse",
              steps: anthropicToolStreamSteps(
                [{ id: "toolu_conv", name: WEATHER_TOOL, jsonPieces: ['{"city":"Jakarta"}'] }],
                { thinking },
              ),
            }
          : anthropicJson(null, {
              thinking,
              toolUses: [{ id: "toolu_conv", name: WEATHER_TOOL, input: { city: "Jakarta" } }],
            }),
        anthropicJson(answerFor(WEATHER_RESULT)),
      );
      const conversation = await openai.conversations.create();
      const ask = {
        model: "claude-x",
        tools: [weatherTool],
        reasoning: { effort: "medium" as const },
        conversation: conversation.id,
        store,
      };
      const asked = stream
        ? await openai.responses
            .stream({ ...ask, input: "What is the weather in Jakarta?" })
            .finalResponse()
        : await openai.responses.create({ ...ask, input: "What is the weather in Jakarta?" });
      // What the client asked to see: no summary, no encrypted_content, so no reasoning item.
      expect(asked.output.map((item) => item.type)).toEqual(["function_call"]);
      expect(await itemTypes(conversation.id)).toEqual(["message", "function_call"]);

      const answered = await openai.responses.create({
        ...ask,
        input: [{ type: "function_call_output", call_id: "toolu_conv", output: WEATHER_RESULT }],
      });
      expect(setup.refused()).toEqual([]);
      expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
      const sent = setup.anthropicUp.last.body as AnthropicBody;
      expect(sent.thinking).toMatchObject({ type: "enabled" });
      expect(sent.messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
      expect(sent.messages[1].content).toEqual([
        { type: "thinking", thinking: thinking.text, signature: thinking.signature },
        expect.objectContaining({ type: "tool_use", id: "toolu_conv" }),
      ]);
      const listed = await openai.conversations.items.list(conversation.id, { limit: 100 });
      expect(listed.data.map((item) => item.type)).toEqual([
        "message",
        "function_call_output",
        "function_call",
        "message",
      ]);
      expect(JSON.stringify(listed.data)).not.toContain("encrypted_content");
    },
  );
});

/**
 * A native server that gives every output item the id `item_same` (as one that numbers its items
 * per response, or draws ids from a small range), streamed with a text delta naming it.
 */
function sameItemIds(req: RecordedRequest): Reply {
  const reply = nativeFake(req);
  const same = (item: unknown) => ({ ...(item as object), id: "item_same" });
  type Event = { type?: string; item?: unknown; response?: { output?: unknown[] } };
  const renamed = (data: Event): Event => ({
    ...data,
    ...(data.item ? { item: same(data.item) } : {}),
    ...(data.response?.output
      ? { response: { ...data.response, output: data.response.output.map(same) } }
      : {}),
  });
  if (reply.kind === "json")
    return { ...reply, body: renamed({ response: reply.body as never }).response };
  if (reply.kind !== "sse") return reply;
  const steps: SseStep[] = [];
  for (const step of reply.steps) {
    const data = renamed(step.data as Event);
    steps.push({ ...step, data });
    const item = data.item as { type?: string; content?: { text: string }[] } | undefined;
    if (data.type === "response.output_item.added" && item?.type === "message") {
      steps.push({
        event: "response.output_text.delta",
        data: {
          type: "response.output_text.delta",
          item_id: "item_same",
          output_index: 0,
          content_index: 0,
          delta: item.content?.[0]?.text ?? "",
        },
      });
    }
  }
  return { ...reply, steps };
}

/** A stream's final response and every item id its events named. */
async function streamedIds(
  stream: AsyncIterable<ResponseStreamEvent>,
): Promise<{ ids: Set<string>; final: OpenAI.Responses.Response }> {
  const ids = new Set<string>();
  let final: OpenAI.Responses.Response | undefined;
  for await (const event of stream) {
    if ("item" in event && event.item && "id" in event.item) ids.add(String(event.item.id));
    if ("item_id" in event) ids.add(String(event.item_id));
    if (event.type === "response.completed") final = event.response;
  }
  if (!final) throw new Error("the stream did not complete");
  for (const item of final.output) ids.add(String(item.id));
  return { ids, final };
}

describe("item ids a native provider gives again", () => {
  it("each output item a conversation keeps has an id of its own, unlike the client's items and the turns' before it, JSON and streamed", async () => {
    setup.nativeUp.reset(sameItemIds);
    const conversation = await openai.conversations.create({
      items: [
        {
          id: "item_same",
          type: "message",
          role: "user",
          content: [{ type: "input_text", text: "My name is Ada." }],
        } as ResponseInputItem,
      ],
    });
    const first = await openai.responses.create({
      model: "gpt-native",
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(first.output_text).toBe("Your name is Ada.");
    const firstId = String(first.output[0].id);
    expect(firstId).not.toBe("item_same");
    const streamed = await streamedIds(
      await openai.responses.create({
        model: "gpt-native",
        conversation: conversation.id,
        input: "What is my name?",
        stream: true,
      }),
    );
    expect(streamed.final.output[0]).toMatchObject({ content: [{ text: "Your name is Ada." }] });
    // Every event of the stream names the item by the one id it keeps.
    const secondId = String(streamed.final.output[0].id);
    expect([...streamed.ids]).toEqual([secondId]);
    expect([firstId, "item_same"]).not.toContain(secondId);

    const listed = await openai.conversations.items.list(conversation.id, {
      order: "asc",
      limit: 100,
    });
    const ids = listed.data.map((item) => item.id);
    expect(ids).toHaveLength(5);
    expect(new Set(ids).size).toBe(5);
    expect(ids[0]).toBe("item_same");
    expect(ids[2]).toBe(firstId);
    expect(ids[4]).toBe(secondId);
    const kept = await openai.conversations.items.retrieve(firstId, {
      conversation_id: conversation.id,
    });
    expect(kept).toMatchObject({ role: "assistant", content: [{ text: "Your name is Ada." }] });
    expect(setup.refused()).toEqual([]);
  });

  it("a chain's turns keep ids of their own, so an item_reference names the item the client was given", async () => {
    setup.nativeUp.reset(sameItemIds);
    const first = await openai.responses.create({ model: "gpt-native", input: "My name is Ada." });
    setup.gw.clock.advance(1_000);
    const second = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(second.output_text).toBe("Your name is Ada.");
    const firstId = String(first.output[0].id);
    expect(String(second.output[0].id)).not.toBe(firstId);
    expect((await openai.responses.retrieve(second.id)).output[0].id).toBe(second.output[0].id);
    // The first answer, by reference, on another wire: that answer, not the later one.
    await openai.responses.create({
      model: "gpt-x",
      input: [
        { role: "user", content: "My name is Ada." },
        { type: "item_reference", id: firstId },
        { role: "user", content: "Noted?" },
      ],
    });
    const sent = JSON.stringify(setup.chatUp.last.body.messages);
    expect(sent).toContain("Nice to meet you, Ada.");
    expect(sent).not.toContain("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });
});

describe("an item_reference on a native provider's own chain", () => {
  it("is sent as the item it names, while the provider is still sent its chain by its own id", async () => {
    const elsewhere = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const said = (await openai.responses.inputItems.list(elsewhere.id)).data[0];
    const first = await openai.responses.create({ model: "gpt-native", input: "Hello." });
    const second = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: first.id,
      input: [
        { type: "item_reference", id: said.id },
        { role: "user", content: "What is my name?" },
      ],
    });
    expect(setup.refused()).toEqual([]);
    expect(second.output_text).toBe("Your name is Ada.");
    const sent = setup.nativeUp.last.body;
    expect(sent.previous_response_id).toMatch(/^resp_native_\d+$/);
    expect(sent.input).toEqual([
      {
        type: "message",
        role: "user",
        status: "completed",
        content: [{ type: "input_text", text: "My name is Ada." }],
      },
      { role: "user", content: "What is my name?" },
    ]);
  });
});

describe("an item_reference added to a conversation", () => {
  it("is kept as the item it names, at creation and when added, and later turns are sent that item", async () => {
    const stored = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const said = (await openai.responses.inputItems.list(stored.id)).data[0];
    const conversation = await openai.conversations.create({
      items: [{ type: "item_reference", id: said.id }],
    });
    const listed = await openai.conversations.items.list(conversation.id);
    expect(listed.data).toEqual([said]);
    const added = await openai.conversations.items.create(conversation.id, {
      items: [{ type: "item_reference", id: String(stored.output[0].id) }],
    });
    expect(added.data).toEqual([stored.output[0]]);
    const answer = await openai.responses.create({
      model: "gpt-x",
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(answer.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("naming an item the account does not hold is a 400 naming it, and nothing of the request is added", async () => {
    const stored = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    for (const id of ["msg_nowhere", String(stored.output[0].id)]) {
      const client = id === "msg_nowhere" ? openai : other;
      const theirs = await client.conversations.create();
      await expect(
        client.conversations.items.create(theirs.id, {
          items: [
            { role: "user", content: "Kept?" },
            { type: "item_reference", id },
          ],
        }),
      ).rejects.toMatchObject({
        status: 400,
        code: "bad_request",
        message: expect.stringMatching(
          new RegExp(`item_reference.*'${id}'|'${id}'.*item_reference`),
        ),
      });
      expect((await client.conversations.items.list(theirs.id)).data).toEqual([]);
      await expect(
        client.conversations.create({ items: [{ type: "item_reference", id }] }),
      ).rejects.toMatchObject({ status: 400, message: expect.stringContaining(`'${id}'`) });
    }
  });
});

describe("a page of conversation items after a deleted one", () => {
  const said = (id: string) =>
    ({
      id,
      type: "message",
      role: "user",
      content: [{ type: "input_text", text: id }],
    }) as ResponseInputItem;

  it("goes on from where the deleted item was, in both orders; an id the conversation never held is a 400 naming after", async () => {
    const conversation = await openai.conversations.create({
      items: ["msg_p1", "msg_p2", "msg_p3", "msg_p4", "msg_p5"].map(said),
    });
    const list = (query: OpenAI.Conversations.Items.ItemListParams) =>
      openai.conversations.items.list(conversation.id, query);
    const first = await list({ order: "asc", limit: 2 });
    expect(first.data.map((item) => item.id)).toEqual(["msg_p1", "msg_p2"]);
    await openai.conversations.items.delete("msg_p2", { conversation_id: conversation.id });
    const next = await list({ order: "asc", limit: 2, after: "msg_p2" });
    expect(next.data.map((item) => item.id)).toEqual(["msg_p3", "msg_p4"]);
    expect(next.has_more).toBe(true);
    const back = await list({ order: "desc", limit: 2, after: "msg_p2" });
    expect(back.data.map((item) => item.id)).toEqual(["msg_p1"]);
    expect(back.has_more).toBe(false);
    // Deleted items are not listed, retrieved or deleted again.
    expect((await list({ order: "asc" })).data.map((item) => item.id)).toEqual([
      "msg_p1",
      "msg_p3",
      "msg_p4",
      "msg_p5",
    ]);
    await expect(
      openai.conversations.items.retrieve("msg_p2", { conversation_id: conversation.id }),
    ).rejects.toMatchObject({ status: 404 });
    await expect(
      openai.conversations.items.delete("msg_p2", { conversation_id: conversation.id }),
    ).rejects.toMatchObject({ status: 404 });

    await expect(list({ after: "msg_never" })).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/after.*msg_never/),
    });
    const stored = await openai.responses.create({ model: "gpt-x", input: "Hello." });
    await expect(
      openai.responses.inputItems.list(stored.id, { after: "msg_never" }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringMatching(/after.*msg_never/) });
    // Added again, the item is new: at the end, once.
    await openai.conversations.items.create(conversation.id, { items: [said("msg_p2")] });
    expect((await list({ order: "asc" })).data.map((item) => item.id)).toEqual([
      "msg_p1",
      "msg_p3",
      "msg_p4",
      "msg_p5",
      "msg_p2",
    ]);
  });
});

/** A user message with the id the client gave it. */
const userItem = (id: string, text: string) =>
  ({
    id,
    type: "message",
    role: "user",
    content: [{ type: "input_text", text }],
  }) as ResponseInputItem;

describe.each(wireModels)(
  "a response made on a conversation, continued with previous_response_id, on %s",
  (model) => {
    const said = (text: string): ResponseInputItem => ({ role: "user", content: text });

    it("is answered with the conversation's items that turn was sent, not those added since, and adds nothing to the conversation", async () => {
      const conversation = await openai.conversations.create({ items: [said("My name is Ada.")] });
      const onIt = await openai.responses.create({
        model,
        conversation: conversation.id,
        input: "Hello.",
      });
      expect(onIt.output_text).toBe("You said: Hello.");
      const next = await openai.responses.create({
        model,
        previous_response_id: onIt.id,
        input: "What is my name?",
      });
      expect(next.output_text).toBe("Your name is Ada.");
      expect(next.previous_response_id).toBe(onIt.id);
      expect(next.conversation ?? null).toBeNull();
      expect(await itemTypes(conversation.id)).toEqual(["message", "message", "message"]);
      // Chained on once more, on a turn that was not made on the conversation itself.
      const again = await openai.responses.create({
        model,
        previous_response_id: next.id,
        input: "What is my name?",
      });
      expect(again.output_text).toBe("Your name is Ada.");

      const later = await openai.conversations.create();
      const hello = await openai.responses.create({
        model,
        conversation: later.id,
        input: "Hello.",
      });
      await openai.conversations.items.create(later.id, { items: [said("My name is Bob.")] });
      const asked = await openai.responses.create({
        model,
        previous_response_id: hello.id,
        input: "What is my name?",
      });
      expect(asked.output_text).toBe("I do not know your name.");
      expect(setup.refused()).toEqual([]);
    });
  },
);

describe("a chain that starts on a conversation", () => {
  const day = 24 * 60 * 60 * 1000;

  it("keeps the conversation as long as the chain, and an item of the conversation sent again in input is refused naming it", async () => {
    const conversation = await openai.conversations.create({
      items: [userItem("msg_named_ada", "My name is Ada.")],
    });
    const onIt = await openai.responses.create({
      model: "gpt-x",
      conversation: conversation.id,
      input: "Hello.",
    });
    await expect(
      openai.responses.create({
        model: "gpt-x",
        previous_response_id: onIt.id,
        input: [
          { type: "item_reference", id: "msg_named_ada" },
          { role: "user", content: "Hi." },
        ],
      }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/Duplicate item found with id 'msg_named_ada'/),
    });
    setup.gw.clock.advance(29 * day);
    const next = await openai.responses.create({
      model: "claude-x",
      previous_response_id: onIt.id,
      input: "Noted?",
    });
    // Past the conversation's own 30 days: it lives on with the chain that starts on it.
    setup.gw.clock.advance(2 * day);
    const asked = await openai.responses.create({
      model: "gemini-x",
      previous_response_id: next.id,
      input: "What is my name?",
    });
    expect(asked.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("on a native provider that holds it, is continued there by its own id until an item the turn was sent is deleted from the conversation; then it is sent the gateway's chain", async () => {
    const conversation = await openai.conversations.create({
      items: [userItem("msg_native_ada", "My name is Ada.")],
    });
    const onIt = await openai.responses.create({
      model: "gpt-native",
      conversation: conversation.id,
      input: "Hello.",
    });
    const held = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: onIt.id,
      input: "What is my name?",
    });
    expect(held.output_text).toBe("Your name is Ada.");
    expect(setup.nativeUp.last.body.previous_response_id).toMatch(/^resp_native_\d+$/);
    await openai.conversations.items.delete("msg_native_ada", {
      conversation_id: conversation.id,
    });
    const cut = await openai.responses.create({
      model: "gpt-native",
      previous_response_id: held.id,
      input: "What is my name?",
    });
    expect(cut.output_text).toBe("I do not know your name.");
    const sent = setup.nativeUp.last.body;
    expect(sent.previous_response_id).toBeUndefined();
    expect(JSON.stringify(sent.input)).toContain("Hello.");
    expect(setup.refused()).toEqual([]);
  });

  it("deleted, the conversation is no longer sent: the chain goes on from its own turns", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    const onIt = await openai.responses.create({
      model: "gpt-x",
      conversation: conversation.id,
      input: "Hello.",
    });
    await openai.conversations.delete(conversation.id);
    const asked = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: onIt.id,
      input: "What is my name?",
    });
    expect(asked.output_text).toBe("I do not know your name.");
    expect(JSON.stringify(setup.chatUp.last.body.messages)).toContain("Hello.");
  });
});

describe("a conversation's items as include shows them", () => {
  const thinking = { text: "Greet Ada by name.", signature: "sig-shown" };
  const encrypted = { include: ["reasoning.encrypted_content" as const] };

  it("a reasoning item's encrypted_content is listed, retrieved and answered only with include: ['reasoning.encrypted_content'], however it was kept", async () => {
    setup.anthropicUp.queue(anthropicJson("Nice to meet you, Ada.", { thinking }));
    const conversation = await openai.conversations.create();
    const asked = await openai.responses.create({
      model: "claude-x",
      reasoning: { effort: "medium" },
      ...encrypted,
      conversation: conversation.id,
      input: "My name is Ada.",
    });
    const reasoning = asked.output[0];
    if (reasoning.type !== "reasoning") throw new Error("no reasoning item");
    expect(reasoning.encrypted_content).toEqual(expect.any(String));
    const { encrypted_content: secret, ...plain } = reasoning;

    const listed = await openai.conversations.items.list(conversation.id, { order: "asc" });
    expect(listed.data.map((item) => item.type)).toEqual(["message", "reasoning", "message"]);
    expect(listed.data[1]).toEqual(plain);
    expect(JSON.stringify(listed.data)).not.toContain("encrypted_content");
    const included = await openai.conversations.items.list(conversation.id, {
      order: "asc",
      ...encrypted,
    });
    expect(included.data[1]).toEqual(reasoning);
    const id = String(reasoning.id);
    expect(
      await openai.conversations.items.retrieve(id, { conversation_id: conversation.id }),
    ).toEqual(plain);
    expect(
      await openai.conversations.items.retrieve(id, {
        conversation_id: conversation.id,
        ...encrypted,
      }),
    ).toEqual(reasoning);

    // Added by the client, with its encrypted_content: the same.
    const kept = { type: "reasoning", id: "rs_client", summary: [], encrypted_content: "opaque" };
    const added = await openai.conversations.items.create(conversation.id, {
      items: [kept as ResponseInputItem],
    });
    expect(added.data).toEqual([{ type: "reasoning", id: "rs_client", summary: [] }]);
    const shown = await openai.conversations.items.retrieve("rs_client", {
      conversation_id: conversation.id,
      ...encrypted,
    });
    expect(shown).toEqual(kept);

    // The next turn is still sent the signed thinking, whatever the listing shows.
    const again = await openai.responses.create({
      model: "claude-x",
      reasoning: { effort: "medium" },
      conversation: conversation.id,
      input: [{ role: "user", content: "What is my name?" }],
    });
    expect(again.output_text).toBe("Your name is Ada.");
    expect(JSON.stringify(setup.anthropicUp.last.body.messages)).toContain(thinking.signature);
    expect(secret).toEqual(expect.any(String));
  });

  it("a response's input_items show a reasoning item's encrypted_content only with include", async () => {
    setup.anthropicUp.queue(anthropicJson("Nice to meet you, Ada.", { thinking }));
    const user: ResponseInputItem = { role: "user", content: "My name is Ada." };
    const asked = await openai.responses.create({
      model: "claude-x",
      reasoning: { effort: "medium" },
      ...encrypted,
      store: false,
      input: [user],
    });
    const next = await openai.responses.create({
      model: "claude-x",
      reasoning: { effort: "medium" },
      input: [user, ...(asked.output as ResponseInputItem[]), { role: "user", content: "Hi." }],
    });
    const items = await openai.responses.inputItems.list(next.id, { order: "asc" });
    expect(items.data.map((item) => item.type)).toEqual([
      "message",
      "reasoning",
      "message",
      "message",
    ]);
    expect(JSON.stringify(items.data)).not.toContain("encrypted_content");
    const included = await openai.responses.inputItems.list(next.id, {
      order: "asc",
      ...encrypted,
    });
    expect(included.data[1]).toEqual(asked.output[0]);
  });

  it("an include value no API has is a 400 naming include", async () => {
    const conversation = await openai.conversations.create();
    const refused = {
      status: 400,
      message: expect.stringMatching(/include.*'reasoning\.secrets'/),
    };
    const include = ["reasoning.secrets"] as unknown as OpenAI.Responses.ResponseIncludable[];
    await expect(
      openai.conversations.items.list(conversation.id, { include }),
    ).rejects.toMatchObject(refused);
    const stored = await openai.responses.create({ model: "gpt-x", input: "Hello." });
    await expect(openai.responses.inputItems.list(stored.id, { include })).rejects.toMatchObject(
      refused,
    );
  });
});

describe("an item_reference to an item only a conversation holds", () => {
  it("is the item: one added to a conversation, and one of a store: false turn on it, in input and in a conversation's items", async () => {
    const conversation = await openai.conversations.create({
      items: [userItem("msg_only_here", "My name is Ada.")],
    });
    const answer = await openai.responses.create({
      model: "claude-x",
      input: [
        { type: "item_reference", id: "msg_only_here" },
        { role: "user", content: "What is my name?" },
      ],
    });
    expect(answer.output_text).toBe("Your name is Ada.");
    const input = await openai.responses.inputItems.list(answer.id, { order: "asc" });
    expect(input.data[0]).toMatchObject({ id: "msg_only_here", role: "user" });

    const unstored = await openai.responses.create({
      model: "gpt-x",
      store: false,
      conversation: conversation.id,
      input: "My name is Grace.",
    });
    const greeting = String(unstored.output[0].id);
    const elsewhere = await openai.conversations.create({
      items: [{ type: "item_reference", id: greeting }],
    });
    expect((await openai.conversations.items.list(elsewhere.id)).data).toEqual([
      unstored.output[0],
    ]);
    const streamed = await openai.responses
      .stream({
        model: "gemini-x",
        input: [
          { type: "item_reference", id: "msg_only_here" },
          { type: "item_reference", id: greeting },
          { role: "user", content: "What is my name?" },
        ],
      })
      .finalResponse();
    expect(streamed.output_text).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("is another account's no more than a deleted item: a 400 naming it; an item of a deleted conversation is still found", async () => {
    const conversation = await openai.conversations.create({
      items: [userItem("msg_kept_a", "My name is Ada."), userItem("msg_kept_b", "My name is Bob.")],
    });
    const refer = (client: OpenAI, id: string) =>
      client.responses.create({
        model: "gpt-x",
        // Stored, the turn would hold the item itself.
        store: false,
        input: [
          { type: "item_reference", id },
          { role: "user", content: "What is my name?" },
        ],
      });
    const refused = (id: string) => ({
      status: 400,
      code: "bad_request",
      message: expect.stringMatching(new RegExp(`'${id}'.*item_reference`)),
    });
    await expect(refer(other, "msg_kept_a")).rejects.toMatchObject(refused("msg_kept_a"));
    await openai.conversations.items.delete("msg_kept_a", { conversation_id: conversation.id });
    await expect(refer(openai, "msg_kept_a")).rejects.toMatchObject(refused("msg_kept_a"));
    expect((await refer(openai, "msg_kept_b")).output_text).toBe("Your name is Bob.");
    // As on OpenAI, deleting a conversation leaves its items.
    await openai.conversations.delete(conversation.id);
    expect((await refer(openai, "msg_kept_b")).output_text).toBe("Your name is Bob.");
    await expect(refer(other, "msg_kept_b")).rejects.toMatchObject(refused("msg_kept_b"));
  });
});
