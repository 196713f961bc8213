import Anthropic from "@anthropic-ai/sdk";
import { Agent, OpenAIResponsesModel, run, setTracingDisabled, tool } from "@openai/agents";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { deferred, openaiJson, type SseStep } from "./support/fake-upstream.js";
import { KEY, KEY2 } from "./support/gateway.js";
import {
  nativeFake,
  OTHER_KEY,
  recallReply,
  type StateSetup,
  stateGateway,
  useStateGateway,
  weatherTool,
} from "./support/responses-loop.js";
import { answerFor, WEATHER_RESULT, WEATHER_TOOL } from "./support/tool-loop.js";

/**
 * An adversarial client of the stateful APIs through the newest SDKs: stored responses and
 * previous_response_id, item_reference, conversations, background, a stream hung up on or cut
 * short, the Agents SDK streamed, and Anthropic message threads toward a chat-wire model.
 */

// Traces would go to OpenAI's API: tests talk to 127.0.0.1 only.
setTracingDisabled(true);

let setup: StateSetup;
let openai: OpenAI;
let second: OpenAI;
let other: OpenAI;
const clientFor = (gw: { url: string }, apiKey: string) =>
  new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
useStateGateway((ready) => {
  setup = ready;
});
beforeAll(() => {
  openai = clientFor(setup.gw, KEY);
  second = clientFor(setup.gw, KEY2);
  other = clientFor(setup.gw, OTHER_KEY);
});

const day = 24 * 60 * 60 * 1000;

/** A chat stream that sends its first words, then waits for `gate` before it ends. */
function heldChatStream(gate: Promise<unknown>): SseStep[] {
  const chunk = (delta: object, finish: string | null) => ({
    data: {
      id: "chatcmpl-held",
      object: "chat.completion.chunk",
      created: 1,
      model: "gpt-upstream",
      choices: [{ index: 0, delta, finish_reason: finish }],
    },
  });
  return [
    chunk({ role: "assistant", content: "Your " }, null),
    { ...chunk({}, "stop"), gate },
    { data: "[DONE]" },
  ];
}

/**
 * The AI SDK's way of sending a stored answer again: by `item_reference`, every turn. The
 * references resolve as long as a stored response of the account holds the item.
 */
async function itemReferenceOutlivesALaterTurn(client: OpenAI): Promise<void> {
  const first = await client.responses.create({ model: "gpt-x", input: "My name is Ada." });
  const answer = first.output[0];
  if (answer.type !== "message") throw new Error("no message");
  const turn = () =>
    client.responses.create({
      model: "gpt-x",
      input: [
        { role: "user", content: "My name is Ada." },
        { type: "item_reference", id: answer.id },
        { role: "user", content: "What is my name?" },
      ],
    });
  const regenerated = await turn();
  expect(regenerated.output_text).toBe("Your name is Ada.");
  // The client deletes that later turn (to regenerate it); the first response is still stored.
  await client.responses.delete(regenerated.id);
  expect((await client.responses.retrieve(first.id)).output[0].id).toBe(answer.id);
  expect((await turn()).output_text).toBe("Your name is Ada.");
}

/**
 * Two message threads of one account toward a chat model whose server gives every answer the
 * same id (the fakes always do; Ollama draws its ids from 999): each reply is named by an id of its
 * own, so a thread continued is answered with its own conversation, never the other's.
 */
async function threadsKeptApart(gw: { url: string }): Promise<void> {
  const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
  const ada = anthropic.beta.messages.thread({ model: "gpt-x", max_tokens: 100 });
  const bob = anthropic.beta.messages.thread({ model: "gpt-x", max_tokens: 100 });
  const adaFirst = await ada.send({ role: "user", content: "My name is Ada." });
  const bobFirst = await bob.stream({ role: "user", content: "My name is Bob." }).finalMessage();
  expect(bobFirst.id).not.toBe(adaFirst.id);
  const adaAsks = await ada.send({ role: "user", content: "What is my name?" });
  expect(adaAsks.content[0]).toMatchObject({ text: "Your name is Ada." });
  const bobAsks = await bob.stream({ role: "user", content: "What is my name?" }).finalMessage();
  expect(bobAsks.content[0]).toMatchObject({ text: "Your name is Bob." });
}

/**
 * A chain on a provider that holds its own responses, whose first turn the client deleted: the
 * next turn is sent the turns after the deleted one only, as on every other wire, not the
 * provider's own chain with the deleted turn in it.
 */
async function deletedTurnLeftOutOfANativeChain(setup: StateSetup, client: OpenAI): Promise<void> {
  const model = "gpt-native";
  const first = await client.responses.create({ model, input: "My name is Ada." });
  const second = await client.responses.create({
    model,
    previous_response_id: first.id,
    input: "Noted?",
  });
  // Unbroken, the chain is the provider's own: it gets its id for the turn, not the turns again.
  expect(setup.nativeUp.last.body.previous_response_id).toMatch(/^resp_native_\d+$/);
  expect(setup.nativeUp.last.body.input).toBe("Noted?");
  await client.responses.delete(first.id);
  const third = await client.responses.create({
    model,
    previous_response_id: second.id,
    input: "What is my name?",
  });
  expect(third.output_text).toBe("I do not know your name.");
  expect(third.previous_response_id).toBe(second.id);
  const sent = setup.nativeUp.last.body;
  expect(sent.previous_response_id).toBeUndefined();
  expect(JSON.stringify(sent.input)).toContain("Noted?");
  expect(JSON.stringify(sent.input)).not.toContain("My name is Ada.");
  // The turn after it continues the same way.
  const fourth = await client.responses.create({
    model,
    previous_response_id: third.id,
    input: "What is my name?",
  });
  expect(fourth.output_text).toBe("I do not know your name.");
  expect(setup.refused()).toEqual([]);
}

/**
 * A provider with its own Responses API behind a pool of keys of two projects, each of which holds
 * only the responses its key made (as OpenAI's projects do); the pool takes its keys in turn, so
 * each turn goes to the key the turn before did not. It is sent the chain whole, not an id its
 * project does not hold.
 */
async function nativeChainAcrossPoolKeys(setup: StateSetup, client: OpenAI): Promise<void> {
  const model = "gpt-native-keys";
  const first = await client.responses.create({ model, input: "My name is Ada." });
  const second = await client.responses.create({
    model,
    previous_response_id: first.id,
    input: "What is my name?",
  });
  expect(second.output_text).toBe("Your name is Ada.");
  expect(setup.nativeUp.last.body.previous_response_id).toBeUndefined();
  const third = await client.responses
    .stream({ model, previous_response_id: second.id, input: "What is my name?" })
    .finalResponse();
  expect(third.output_text).toBe("Your name is Ada.");
  expect(third.previous_response_id).toBe(second.id);
  expect(setup.refused()).toEqual([]);
}

describe("stored responses and threads, as clients use them", () => {
  it("resolves an item_reference in a turn that stores nothing (store: false, no chain)", async () => {
    const first = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const said = (await openai.responses.inputItems.list(first.id)).data[0];
    const next = await openai.responses.create({
      model: "gpt-x",
      store: false,
      input: [
        { type: "item_reference", id: said.id },
        { role: "user", content: "What is my name?" },
      ],
    });
    expect(next.output_text).toBe("Your name is Ada.");
  });

  it("an item_reference resolves while the response that made the item is stored, after a later turn that sent it again is deleted", async () => {
    await itemReferenceOutlivesALaterTurn(openai);
  });

  it("two threads of an account whose provider repeats its answers' ids are each continued with their own conversation", async () => {
    await threadsKeptApart(setup.gw);
  });

  it("a chain whose first turn was deleted is continued on a native provider without it", async () => {
    await deletedTurnLeftOutOfANativeChain(setup, openai);
  });

  it("a chain on a native provider is continued on another key of its pool, which does not hold it", async () => {
    await nativeChainAcrossPoolKeys(setup, openai);
  });

  it("a native Responses stream that ends with response.incomplete ends there, stored, with no failure after it", async () => {
    // OpenAI's API ends a stream cut by max_output_tokens with response.incomplete, not .completed.
    setup.nativeUp.reset((req) => {
      const reply = nativeFake(req);
      if (reply.kind !== "sse") return reply;
      const last = reply.steps[reply.steps.length - 1];
      const data = last.data as { response: Record<string, unknown> };
      last.event = "response.incomplete";
      last.data = {
        ...data,
        type: "response.incomplete",
        response: {
          ...data.response,
          status: "incomplete",
          incomplete_details: { reason: "max_output_tokens" },
        },
      };
      return reply;
    });
    const stream = await openai.responses.create({
      model: "gpt-native",
      input: "My name is Ada.",
      max_output_tokens: 16,
      stream: true,
    });
    const types: string[] = [];
    let id = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.created") id = event.response.id;
    }
    expect(types.at(-1)).toBe("response.incomplete");
    expect(types).not.toContain("response.failed");
    expect((await openai.responses.retrieve(id)).status).toBe("incomplete");
    // And it continues, as an incomplete response does on OpenAI (here on another wire, which
    // is sent the chain the gateway stored).
    const next = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: id,
      input: "What is my name?",
    });
    expect(next.output_text).toBe("Your name is Ada.");
  });

  it("a background response on a native provider is answered complete and can be retrieved and continued", async () => {
    // OpenAI's API answers `background: true` at once, queued, and finishes it later.
    setup.nativeUp.reset((req) => {
      const reply = nativeFake(req);
      if (req.body.background !== true || reply.kind !== "json") return reply;
      const body = reply.body as Record<string, unknown>;
      return {
        kind: "json",
        body: { ...body, status: "queued", output: [], usage: null, background: true },
      };
    });
    const started = await openai.responses.create({
      model: "gpt-native",
      input: "My name is Ada.",
      background: true,
    });
    // The gateway's promise (docs/stateful-apis.md): every response, background ones too, is
    // complete when answered; retrieve is how the SDK's background loop polls it.
    const held = await openai.responses.retrieve(started.id);
    expect(held.status).toBe("completed");
    expect(held.output_text).toBe("Nice to meet you, Ada.");
    const next = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: started.id,
      input: "What is my name?",
    });
    expect(next.output_text).toBe("Your name is Ada.");
  });

  it("a background response with a discounted completion window is answered complete on a native provider and on a bridged one", async () => {
    // openai 7.59's `background_options`: its 2h and 8h windows are valid with `background` only,
    // which the gateway does not send a native provider (it answers every response complete).
    const params = {
      input: "My name is Ada.",
      background: true,
      background_options: { completion_window: "8h", continuation_id: "nightly-batch" },
    } satisfies Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, "model">;
    const native = await openai.responses.create({ ...params, model: "gpt-native" });
    expect(native.status).toBe("completed");
    expect(native.output_text).toBe("Nice to meet you, Ada.");
    const sent = setup.nativeUp.requests.at(-1)!.body;
    expect(sent).not.toHaveProperty("background");
    expect(sent).not.toHaveProperty("background_options");
    const bridged = await openai.responses.create({ ...params, model: "gpt-x" });
    expect(bridged.status).toBe("completed");
    expect(setup.refused()).toEqual([]);
  });

  it("a thread continue whose system differs from the thread's is refused as thread_fingerprint_mismatch, not answered with the old system", async () => {
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: setup.gw.url, maxRetries: 0 });
    const created = await anthropic.beta.messages.create({
      model: "gpt-x",
      max_tokens: 100,
      betas: ["message-threads-2026-08-12"],
      system: "OLD-SYSTEM",
      thread: { type: "create" },
      messages: [{ role: "user", content: "My name is Ada." }],
    } as Anthropic.Beta.MessageCreateParamsNonStreaming);
    const before = setup.chatUp.requests.length;
    const continued = await anthropic.beta.messages
      .create({
        model: "gpt-x",
        max_tokens: 100,
        betas: ["message-threads-2026-08-12"],
        system: "NEW-SYSTEM",
        thread: { type: "continue", previous_message_id: created.id },
        messages: [{ role: "user", content: "What is my name?" }],
      } as Anthropic.Beta.MessageCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(continued).toBeInstanceOf(Anthropic.ThreadFingerprintMismatchError);
    expect(setup.chatUp.requests.length).toBe(before);
  });
});

describe("stored responses on Postgres", () => {
  let pg: StateSetup;
  beforeAll(async () => {
    const saved = process.env.GATEWAY_TEST_BACKEND;
    process.env.GATEWAY_TEST_BACKEND = "postgres";
    try {
      pg = await stateGateway();
    } finally {
      if (saved === undefined) delete process.env.GATEWAY_TEST_BACKEND;
      else process.env.GATEWAY_TEST_BACKEND = saved;
    }
  });
  afterAll(async () => pg?.close());

  it("an item_reference resolves while the response that made the item is stored, after a later turn that sent it again is deleted", async () => {
    await itemReferenceOutlivesALaterTurn(clientFor(pg.gw, KEY));
  });

  it("two threads of an account whose provider repeats its answers' ids are each continued with their own conversation", async () => {
    await threadsKeptApart(pg.gw);
  });

  it("a chain whose first turn was deleted is continued on a native provider without it", async () => {
    await deletedTurnLeftOutOfANativeChain(pg, clientFor(pg.gw, KEY));
  });

  it("a chain on a native provider is continued on another key of its pool, which does not hold it", async () => {
    await nativeChainAcrossPoolKeys(pg, clientFor(pg.gw, KEY));
  });
});

describe("chains, conversations and tools across wires", () => {
  it.each(["gpt-x", "claude-x", "gemini-x", "gpt-native"])(
    "instructions of an earlier turn are not sent with a turn continued on %s",
    async (model) => {
      const first = await openai.responses.create({
        model: "gpt-x",
        instructions: "SECRET-INSTRUCTIONS-1",
        input: "My name is Ada.",
      });
      const ups = [setup.chatUp, setup.anthropicUp, setup.geminiUp, setup.nativeUp];
      const before = ups.map((up) => up.requests.length);
      const next = await openai.responses.create({
        model,
        previous_response_id: first.id,
        instructions: "Be brief.",
        input: "What is my name?",
      });
      expect(next.output_text).toBe("Your name is Ada.");
      const sent = ups.flatMap((up, i) => up.requests.slice(before[i]));
      expect(sent).toHaveLength(1);
      expect(sent[0].raw).not.toContain("SECRET-INSTRUCTIONS-1");
      expect(sent[0].raw).toContain("Be brief.");
    },
  );

  it.each([
    ["gpt-x", "claude-x"],
    ["claude-x", "gpt-x"],
    ["gemini-x", "claude-x"],
    ["gpt-native", "gpt-x"],
    ["gpt-x", "gpt-native"],
    ["claude-x", "gemini-x"],
  ])("a function call made on %s is answered on %s with only its output", async (from, to) => {
    const asked = await openai.responses.create({
      model: from,
      tools: [weatherTool],
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("no function call");
    const answered = await openai.responses.create({
      model: to,
      tools: [weatherTool],
      previous_response_id: asked.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT }],
    });
    // The fake Gemini answers a call it did not sign otherwise; its rules still accept it.
    if (to !== "gemini-x") expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
    expect(setup.refused()).toEqual([]);
  });

  it("an input giving one item id twice is refused naming it, before anything is sent", async () => {
    const before = setup.chatUp.requests.length;
    // Stored, its input_items could not be paged: `after` that id would start the page again.
    const said = (text: string) => ({
      id: "msg_twice",
      type: "message" as const,
      role: "assistant" as const,
      status: "completed" as const,
      content: [{ type: "output_text" as const, text, annotations: [] }],
    });
    const twice = (store: boolean) =>
      openai.responses.create({
        model: "gpt-x",
        store,
        input: [said("one"), said("two"), { role: "user", content: "three" }],
      });
    for (const store of [true, false]) {
      await expect(twice(store)).rejects.toMatchObject({
        status: 400,
        code: "bad_request",
        message: expect.stringContaining("'msg_twice'"),
      });
    }
    const first = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const answer = String(first.output[0].id);
    await expect(
      openai.responses.create({
        model: "gpt-x",
        input: [
          { type: "item_reference", id: answer },
          { type: "item_reference", id: answer },
          { role: "user", content: "What is my name?" },
        ],
      }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining(`'${answer}'`) });
    expect(setup.chatUp.requests.length).toBe(before + 1);
  });

  it("a second key of the same account continues, retrieves and lists the first key's response", async () => {
    const first = await openai.responses.create({ model: "claude-x", input: "My name is Ada." });
    const next = await second.responses.create({
      model: "claude-x",
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(next.output_text).toBe("Your name is Ada.");
    expect((await second.responses.retrieve(first.id)).id).toBe(first.id);
    expect((await second.responses.inputItems.list(first.id)).data).toHaveLength(1);
  });

  it("a conversation turn with store: false adds its items and keeps no response; auto-paged asc", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    const answer = await openai.responses.create({
      model: "gemini-x",
      conversation: conversation.id,
      store: false,
      input: "What is my name?",
    });
    expect(answer.output_text).toBe("Your name is Ada.");
    expect(answer).toMatchObject({ store: false });
    await expect(openai.responses.retrieve(answer.id)).rejects.toMatchObject({ status: 404 });
    const roles = [];
    for await (const item of openai.conversations.items.list(conversation.id, {
      order: "asc",
      limit: 1,
    }))
      roles.push(item.type === "message" && item.role);
    expect(roles).toEqual(["user", "user", "assistant"]);
  });

  it("a tool loop on a conversation crosses wires: the call kept there, the output alone next turn", async () => {
    const conversation = await openai.conversations.create();
    const asked = await openai.responses.create({
      model: "claude-x",
      tools: [weatherTool],
      conversation: conversation.id,
      input: "What is the weather in Jakarta?",
    });
    const call = asked.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("no function call");
    const answered = await openai.responses.create({
      model: "gpt-x",
      tools: [weatherTool],
      conversation: { id: conversation.id },
      input: [{ type: "function_call_output", call_id: call.call_id, output: WEATHER_RESULT }],
    });
    expect(answered.output_text).toBe(answerFor(WEATHER_RESULT));
    const native = await openai.responses.create({
      model: "gpt-native",
      conversation: conversation.id,
      input: "And tomorrow?",
    });
    expect(native.conversation).toEqual({ id: conversation.id });
    expect(setup.refused()).toEqual([]);
  });

  it("another account cannot send this account's item by item_reference on its own conversation", async () => {
    const mine = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const conversation = await other.conversations.create();
    await expect(
      other.responses.create({
        model: "gpt-x",
        conversation: conversation.id,
        input: [{ type: "item_reference", id: String(mine.output[0].id) }],
      }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("item_reference") });
  });

  it("a chained stream the client hangs up on is not stored, and the turn before it continues again", async () => {
    const first = await openai.responses.create({ model: "gpt-x", input: "My name is Ada." });
    const gate = deferred();
    setup.chatUp.reset(() => ({ kind: "sse", steps: heldChatStream(gate.promise) }));
    const controller = new AbortController();
    const stream = await openai.responses.create(
      { model: "gpt-x", previous_response_id: first.id, input: "What is my name?", stream: true },
      { signal: controller.signal },
    );
    let cut = "";
    await (async () => {
      for await (const event of stream) {
        if (event.type === "response.created") cut = event.response.id;
        if (event.type === "response.output_text.delta") controller.abort();
      }
    })().catch(() => undefined);
    gate.resolve();
    expect(cut).toMatch(/^resp_/);
    setup.chatUp.reset((req) => openaiJson(recallReply(req)));
    await expect(
      openai.responses.create({ model: "gpt-x", previous_response_id: cut, input: "x" }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining(cut) });
    const retry = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: first.id,
      input: "What is my name?",
    });
    expect(retry.output_text).toBe("Your name is Ada.");
  });

  it("a chat-wire answer cut by max_output_tokens is stored incomplete and continues", async () => {
    setup.chatUp.reset(() => openaiJson("My name", { finish: "length" }));
    const cut = await openai.responses.create({
      model: "gpt-x",
      input: "My name is Ada.",
      max_output_tokens: 16,
    });
    expect(cut.status).toBe("incomplete");
    setup.chatUp.reset((req) => openaiJson(recallReply(req)));
    const next = await openai.responses.create({
      model: "gpt-x",
      previous_response_id: cut.id,
      input: "What is my name?",
    });
    expect(next.output_text).toBe("Your name is Ada.");
  });

  it("a conversation used on day 29 lives past day 30, and is gone 30 days after its last use", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    setup.gw.clock.advance(29 * day);
    const answer = await openai.responses.create({
      model: "claude-x",
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(answer.output_text).toBe("Your name is Ada.");
    setup.gw.clock.advance(2 * day);
    const again = await openai.responses.create({
      model: "gpt-x",
      conversation: conversation.id,
      input: "What is my name?",
    });
    expect(again.output_text).toBe("Your name is Ada.");
    setup.gw.clock.advance(31 * day);
    await expect(openai.conversations.retrieve(conversation.id)).rejects.toMatchObject({
      status: 404,
    });
  });

  it("input_tokens counts the chain of previous_response_id", async () => {
    const first = await openai.responses.create({
      model: "gpt-x",
      input: "My name is Ada. ".repeat(200),
    });
    const alone = await openai.responses.inputTokens.count({ model: "gpt-x", input: "hi" });
    const chained = await openai.responses.inputTokens.count({
      model: "gpt-x",
      previous_response_id: first.id,
      input: "hi",
    });
    expect(chained.input_tokens).toBeGreaterThan(alone.input_tokens + 100);
  });

  it.each(["gpt-x", "claude-x", "gemini-x", "gpt-native"])(
    "the Agents SDK streamed: runs continued by previousResponseId, a tool loop between, on %s",
    async (model) => {
      const agent = (tools: boolean) =>
        new Agent({
          name: "assistant",
          instructions: "Answer briefly.",
          model: new OpenAIResponsesModel(openai, model),
          tools: tools
            ? [
                tool({
                  name: WEATHER_TOOL,
                  description: "The weather in a city",
                  parameters: z.object({ city: z.string() }),
                  execute: async () => WEATHER_RESULT,
                }),
              ]
            : [],
        });
      const first = await run(agent(false), "My name is Ada.", { stream: true });
      await first.completed;
      expect(first.finalOutput).toBe("Nice to meet you, Ada.");
      const looped = await run(agent(true), "What is the weather in Jakarta?", {
        stream: true,
        previousResponseId: first.lastResponseId,
      });
      await looped.completed;
      expect(looped.finalOutput).toBe(answerFor(WEATHER_RESULT));
      const again = await run(agent(false), "What is my name?", {
        stream: true,
        previousResponseId: looped.lastResponseId,
      });
      await again.completed;
      expect(again.finalOutput).toBe("Your name is Ada.");
      expect(setup.refused()).toEqual([]);
    },
  );

  it("an Anthropic SDK thread toward a chat model: a streamed turn aborted midway is sent again whole", async () => {
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: setup.gw.url, maxRetries: 0 });
    const thread = anthropic.beta.messages.thread({ model: "gpt-x", max_tokens: 100 });
    const first = await thread.send({ role: "user", content: "My name is Ada." });
    expect(first.content[0]).toMatchObject({ text: "Nice to meet you, Ada." });
    const gate = deferred();
    setup.chatUp.reset(() => ({ kind: "sse", steps: heldChatStream(gate.promise) }));
    const stream = thread.stream({ role: "user", content: "What is my name?" });
    await new Promise<void>((resolve) => {
      stream.on("text", () => {
        stream.abort();
        resolve();
      });
    });
    await stream.done().catch(() => undefined);
    gate.resolve();
    setup.chatUp.reset((req) => openaiJson(recallReply(req)));
    // The SDK sends the cut turn again from the reply before it, which the gateway still holds.
    const again = await thread.send();
    expect(again.content[0]).toMatchObject({ text: "Your name is Ada." });
  });
});
