import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { money } from "./support/api.js";
import {
  anthropicStreamSteps,
  everyChoice,
  type FakeUpstream,
  openaiStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { backends, KEY, post, type TestGateway } from "./support/gateway.js";
import { useMeterWires } from "./support/meter-wires.js";
import {
  deliveredTokens,
  type Logged,
  ledgerAgrees,
  logged,
  loggedAs,
} from "./support/metering.js";
import { type StreamEvent, streamEvents } from "./support/sse.js";

/**
 * Meter faults a client sees: a provider's string of millions of characters (under the event
 * limit) that the gateway's scan of a piece could not read; a stream of `n` answers whose provider
 * ends it cleanly before every answer finished; the usage a chat client is shown for an
 * anthropic-wire stream that reported none; a Responses stream's `response.failed` usage. Each on
 * SQLite and Postgres, the balance compared with the request log.
 */

/** micro-IDR per input and per output token of the fakes' models. */
const IN = 1_000;
const OUT = 2_000;
const WORD = "zq ";
/** Millions of characters in one string value: an event under the 16 MB bound. */
const LONG = "x".repeat(9_000_000);
const headers = { authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" };

const priceOf = (row: Logged) => row.usage.input_tokens * IN + row.usage.output_tokens * OUT;

/** A native Responses stream's events (each numbered), from `created` to `completed`. */
function responsesSteps(deltas: string[], finished = true): SseStep[] {
  const text = deltas.join("");
  const done = {
    id: "resp_up",
    object: "response",
    created_at: 1_700_000_000,
    status: "completed",
    model: "up-model",
    output: [
      {
        type: "message",
        id: "msg_1",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text, annotations: [] }],
      },
    ],
    usage: { input_tokens: 11, output_tokens: 7, total_tokens: 18 },
  };
  const part = { item_id: "msg_1", output_index: 0, content_index: 0 };
  const events: [string, object][] = [
    ["response.created", { response: { ...done, status: "in_progress", output: [], usage: null } }],
    [
      "response.output_item.added",
      {
        output_index: 0,
        item: {
          type: "message",
          id: "msg_1",
          status: "in_progress",
          role: "assistant",
          content: [],
        },
      },
    ],
    ...deltas.map((delta): [string, object] => ["response.output_text.delta", { ...part, delta }]),
  ];
  if (finished) events.push(["response.completed", { response: done }]);
  return events.map(([event, data], i) => ({
    event,
    data: { type: event, sequence_number: i, ...data },
  }));
}

describe.each(backends)("meter faults a client sees, on %s", (backend) => {
  let gw: TestGateway;
  let openai: FakeUpstream;
  let anthropic: FakeUpstream;
  let gemini: FakeUpstream;

  useMeterWires(
    backend,
    { openaiKey: "sk-oa", inputPerMtok: IN, outputPerMtok: OUT },
    (started) => {
      ({ gw, openai, anthropic, gemini } = started);
    },
  );

  /** Every event of a stream answer, read to its end. */
  async function eventsOf(res: Response): Promise<StreamEvent[]> {
    expect(res.status, res.status === 200 ? "" : await res.clone().text()).toBe(200);
    const events: StreamEvent[] = [];
    for await (const event of streamEvents(res)) events.push(event);
    return events;
  }

  /**
   * The events of a stream that ends with its error event, once its request is logged: a broken
   * stream is settled after its error event went out.
   */
  async function brokenEventsOf(res: Response): Promise<StreamEvent[]> {
    const events = await eventsOf(res);
    const id = res.headers.get("x-request-id") ?? "";
    const row = await loggedAs(gw.services.store, "acct", id, "upstream_error");
    expect(row?.error_code).toBe("upstream_error");
    return events;
  }

  it("a string value of millions of characters passes whole, on chat, messages and Responses streams", async () => {
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const chat = { stream: true, messages: [{ role: "user", content: "a long one" }] };

    // In a chunk of the middle, and in the first chunk (the one the dispatch reads).
    const first = openaiStreamSteps([WORD]);
    (first[0].data as { choices: { delta: object }[] }).choices[0].delta = {
      role: "assistant",
      content: LONG,
    };
    for (const steps of [openaiStreamSteps([WORD, LONG, WORD]), first]) {
      openai.queue({ kind: "sse", steps });
      const events = await eventsOf(
        await post(gw, "/v1/chat/completions", { model: "m-openai", ...chat }),
      );
      expect(events.at(-1)?.data).toBe("[DONE]");
      const text = events
        .slice(0, -1)
        .map(({ data }) => data.choices?.[0]?.delta?.content ?? "")
        .join("");
      expect(text.length).toBe(LONG.length + WORD.length * (steps === first ? 1 : 2));
    }

    anthropic.queue({ kind: "sse", steps: anthropicStreamSteps([WORD, LONG, WORD]) });
    const messages = await eventsOf(
      await post(gw, "/v1/messages", { model: "m-anthropic", max_tokens: 4_000, ...chat }, headers),
    );
    expect(messages.at(-1)?.event).toBe("message_stop");
    const said = messages
      .filter((ev) => ev.event === "content_block_delta")
      .map(({ data }) => data.delta.text)
      .join("");
    expect(said).toBe(WORD + LONG + WORD);

    openai.queue({ kind: "sse", steps: responsesSteps([WORD, LONG, WORD]) });
    const responses = await eventsOf(
      await post(gw, "/v1/responses", { model: "m-native", stream: true, input: "a long one" }),
    );
    expect(responses.at(-1)?.event).toBe("response.completed");
    const deltas = responses
      .filter((ev) => ev.event === "response.output_text.delta")
      .map(({ data }) => data.delta)
      .join("");
    expect(deltas).toBe(WORD + LONG + WORD);

    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows.map((row) => [row.error_code, row.usage])).toEqual([
      [null, { input_tokens: 11, output_tokens: 7 }],
      [null, { input_tokens: 13, output_tokens: 5 }],
      [null, { input_tokens: 11, output_tokens: 7 }],
      [null, { input_tokens: 11, output_tokens: 7 }],
    ]);
    for (const row of rows) expect(row.cost_micro).toBe(priceOf(row));
  });

  it("a stream of two answers the provider ends cleanly after only the first finished ends with the error event, passed through or translated", async () => {
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const body = {
      n: 2,
      stream: true,
      max_tokens: 100,
      messages: [{ role: "user", content: "two ways" }],
    };

    // OpenAI: answer 0 finishes, answer 1 writes on; a report of the answer so far, then [DONE].
    openai.queue({
      kind: "sse",
      steps: [
        everyChoice(2, { role: "assistant", content: "" }),
        ...Array.from({ length: 4 }, () => everyChoice(2, { content: WORD })),
        {
          data: {
            id: "chatcmpl-n",
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: "gpt-up",
            choices: [
              { index: 0, delta: {}, logprobs: null, finish_reason: "stop" },
              { index: 1, delta: { content: WORD }, logprobs: null, finish_reason: null },
            ],
          },
        },
        {
          data: {
            id: "chatcmpl-n",
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: "gpt-up",
            choices: [],
            usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
          },
        },
        { data: "[DONE]" },
      ],
    });
    // Gemini: candidate 0 finishes at the third event, candidate 1 never does; the stream ends.
    gemini.queue({
      kind: "sse",
      steps: Array.from({ length: 4 }, (_, i) => ({
        data: {
          candidates: [
            ...(i < 3
              ? [
                  {
                    content: { role: "model", parts: [{ text: WORD }] },
                    index: 0,
                    ...(i === 2 ? { finishReason: "STOP" } : {}),
                  },
                ]
              : []),
            { content: { role: "model", parts: [{ text: WORD }] }, index: 1 },
          ],
          usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 2, totalTokenCount: 7 },
          modelVersion: "gemini-up",
          responseId: "gemini-fake",
        },
      })),
    });
    const delivered: string[][] = [];
    for (const model of ["m-openai", "m-gemini"]) {
      const events = await brokenEventsOf(
        await post(gw, "/v1/chat/completions", { model, ...body }),
      );
      const deltas: string[] = [];
      for (const { data } of events.slice(0, -1))
        for (const choice of data.choices ?? []) deltas.push(choice.delta?.content ?? "");
      delivered.push(deltas);
      expect(
        events.some(({ data }) => data === "[DONE]"),
        model,
      ).toBe(false);
      expect(events.at(-1)?.data.error?.code, model).toBe("upstream_error");
    }

    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    // Cut short: the report of the answer so far (two tokens) is not the whole answer's, so each is
    // charged at least what reached its client.
    expect(rows.reverse().map((row) => [row.error_code, row.usage])).toEqual([
      ["upstream_error", { input_tokens: 5, output_tokens: deliveredTokens(delivered[0]) }],
      ["upstream_error", { input_tokens: 5, output_tokens: deliveredTokens(delivered[1]) }],
    ]);
    for (const row of rows) expect(row.cost_micro).toBe(priceOf(row));
  });

  it("an anthropic-wire stream that reported no usage shows a chat client the usage it is billed (official SDK)", async () => {
    const steps = anthropicStreamSteps([WORD, WORD, WORD, WORD, WORD]).map((step) => {
      const data = step.data as { type: string; message?: object; usage?: object };
      if (data.type === "message_start")
        return { ...step, data: { ...data, message: { ...data.message, usage: {} } } };
      if (data.type === "message_delta") return { ...step, data: { ...data, usage: {} } };
      return step;
    });
    anthropic.queue({ kind: "sse", steps });
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: "m-anthropic",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "count to five" }],
    });
    let shown: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) if (chunk.usage) shown = chunk.usage;

    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(1);
    const [row] = rows;
    expect(row.error_code).toBeNull();
    // Billed by the estimate, never free, and the usage chunk says so rather than zero.
    expect(row.usage.input_tokens).toBeGreaterThan(0);
    expect(row.usage.output_tokens).toBe(deliveredTokens([WORD, WORD, WORD, WORD, WORD]));
    expect(shown).toMatchObject({
      prompt_tokens: row.usage.input_tokens,
      completion_tokens: row.usage.output_tokens,
      total_tokens: row.usage.input_tokens + row.usage.output_tokens,
    });
    expect(row.cost_micro).toBe(priceOf(row));
  });

  it("response.failed's usage is what the broken stream is billed, translated or passed through", async () => {
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    // A chat stream cut after three words, read by a Responses client; then a native Responses
    // stream cut the same way.
    openai.queue({
      kind: "sse",
      steps: openaiStreamSteps([WORD, WORD, WORD]).slice(0, 4),
      end: "destroy",
    });
    openai.queue({
      kind: "sse",
      steps: responsesSteps([WORD, WORD, WORD], false),
      end: "destroy",
    });
    const shown: { input_tokens: number; output_tokens: number }[] = [];
    for (const model of ["m-openai", "m-native"]) {
      const events = await brokenEventsOf(
        await post(gw, "/v1/responses", { model, stream: true, input: "three words" }),
      );
      const texts = events
        .filter((ev) => ev.event === "response.output_text.delta")
        .map(({ data }) => data.delta);
      expect(texts, model).toEqual([WORD, WORD, WORD]);
      const failed = events.at(-1);
      expect(failed?.event, model).toBe("response.failed");
      shown.push(failed?.data.response.usage);
    }

    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row.error_code).toBe("upstream_error");
      expect(row.usage.output_tokens).toBe(deliveredTokens([WORD, WORD, WORD]));
      expect(row.cost_micro).toBe(priceOf(row));
    }
    expect(shown).toEqual(
      rows.reverse().map((row) =>
        expect.objectContaining({
          input_tokens: row.usage.input_tokens,
          output_tokens: row.usage.output_tokens,
          total_tokens: row.usage.input_tokens + row.usage.output_tokens,
        }),
      ),
    );
  });
});
